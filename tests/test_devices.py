"""A device is one object (bench.devices): a new one is one module and its registration, and a job on it is
timed on its clock, measured against its limits, judged by its kernel probe and read for its memory.

The fake device (tests/support/fake_device.py) lives outside bench/ and conf/: nothing else is edited for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from bench import devices
from bench.config import DeviceConfig
from bench.errors import UserError
from tests.conftest import REPO
from tests.support import fake_device


def test_the_registered_devices_and_an_unknown_one():
    assert {"cpu", "cuda", fake_device.NAME} <= set(devices.names())  # the fake registered itself on import
    assert devices.resolve(DeviceConfig(type="cpu")) == (torch.device("cpu"), None)
    assert devices.of(torch.device("cuda", 1)).torch_device() == torch.device("cuda", 1)
    with pytest.raises(UserError, match=r"unknown device 'tpu': choose one of cpu, cuda, fake \(device=NAME\)"):
        devices.get(DeviceConfig(type="tpu"))


def test_each_device_reads_its_own_memory_and_says_where_its_tables_live():
    cpu, gpu = devices.get(DeviceConfig(type="cpu")), devices.get(DeviceConfig(type="cuda"))
    assert cpu.tables_on_host and cpu.peak_bytes(torch.device("cpu")) is None and cpu.calibrated_timing
    assert not gpu.tables_on_host and gpu.process_group == "nccl" and gpu.uncalibrated == "CUDA: timed by CUDA events"


@pytest.mark.slow
def test_a_fake_device_added_as_one_module_runs_a_tiny_job_on_its_clock_limits_health_and_memory(tmp_path):
    reports = tmp_path / "reports"
    args = ["+preset=tiny", "backend=fp32", "device.type=fake", "kernel_health=true", "timing.calibrate=true", f"cache_dir={tmp_path / 'cache'}",
            f"reports_dir={reports}", f"hydra.run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tests.support.fake_device", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = [json.loads(line) for line in (reports / "records.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and record["device"] == "fake", record.get("error")
    m = record["metrics"]
    # its clock: every timed call read CALL_MS, whatever the wall clock said; the CPU's calibration was not used
    calls = [ms for trial in m["latency_samples_ms"] for ms in trial]
    assert calls and set(calls) == {fake_device.CALL_MS}
    assert "fake: timed on its own clock" in m["timing_setting"]["how"]  # timing.calibrate=true, yet not the CPU's calibration
    # its limits: the roofline shares were read against the fake's figures, cached in its own file
    limits = m["roofline"]["limits"]
    assert set(limits["gather_bytes_per_s"].values()) == {fake_device.GATHER_BYTES_PER_S} and limits["gemm_flops"] == fake_device.GEMM_FLOPS
    assert limits["write_bytes_per_s"] == fake_device.WRITE_BYTES_PER_S
    assert (tmp_path / "cache" / "roofline" / f"{limits['fingerprint']}-fake.json").exists()
    # its kernel health: its own probe's one family, judged against its limits
    health = record["env"]["kernel_health"]
    assert health["device"] == "fake" and health["probed"] and set(health["verdicts"]) == {"gather_fake"}
    assert health["verdicts"]["gather_fake"]["measured_ns"] == pytest.approx(fake_device.CALL_MS * 1e6 / fake_device.PROBE_ROWS)
    assert health["verdicts"]["gather_fake"]["healthy"]
    # its memory: the peak of its own memory it reported
    assert m["cuda_peak_bytes"] == fake_device.PEAK_BYTES
