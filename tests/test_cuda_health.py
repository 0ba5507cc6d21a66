"""Kernel health per device: a CUDA job is judged by the GPU's probe and the GPU's own limits, never by the host
CPU's; the banner names the device whose probe judged it; a verdict made inconclusive by degraded kernels says so.

Without a GPU the probe's code runs on the CPU device (the same functions take the device; only the clock
differs), and the device choice is tested with CUDA faked as present."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from torch import nn

from bench import devices
from bench.config import DeviceConfig
from bench.devices import cpu_probe, cuda
from bench.devices.cuda import MIN_GATHER_SHARE
from bench.devices.health import EAGER, Health, tbe_family
from bench.devices.roofline import Limits, roofline_metrics
from bench.record import RunRecord

CPU = torch.device("cpu")


def gpu() -> cuda.CudaDevice:
    return devices.get(DeviceConfig(type="cuda"))


def test_the_probe_follows_the_job_s_device(monkeypatch):
    for here in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: here)
        assert devices.get(DeviceConfig(type="cpu")).available()
        assert gpu().available() == here  # never the host CPU's probe in its place


def _never_the_cpu_probe(*args, **kwargs):
    raise AssertionError("a CUDA job was judged by the host CPU's probe")


def test_a_cuda_job_without_a_gpu_is_not_judged_by_the_cpu(tiny_cfg, monkeypatch):
    from bench.runner import Session

    monkeypatch.setattr(cpu_probe, "health", _never_the_cpu_probe)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    found = Session().kernel_health(tiny_cfg("device=cuda", "kernel_health=true"))
    assert found["device"] == "cuda" and not found["probed"] and found["degraded"] == [] and found["verdicts"] == {}
    assert found["why_not_probed"] == "no cuda device here"


def test_a_cuda_job_takes_the_gpu_probe_when_cuda_is_there(tiny_cfg, monkeypatch):
    """CUDA faked as present: the session goes to the GPU probe (which then finds no GPU to name and says so)."""
    from bench.runner import Session

    monkeypatch.setattr(cpu_probe, "health", _never_the_cpu_probe)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    asked = []
    monkeypatch.setattr(cuda.CudaDevice, "health", lambda self, cache_dir, limits, device, env: asked.append(device) or Health([], {}, True, device="cuda"))
    monkeypatch.setattr(Limits, "ensure", lambda self, widths: self)
    monkeypatch.setattr("bench.runner.environment", lambda device=None: {"fingerprint": "fake-gpu"})
    found = Session().kernel_health(tiny_cfg("device=cuda", "kernel_health=true"))
    assert asked == [torch.device("cuda", 0)] and found["device"] == "cuda" and found["probed"]
    off = Session().kernel_health(tiny_cfg("device=cuda", "kernel_health=false"))
    assert off["device"] == "cuda" and not off["probed"] and off["why_not_probed"] == "kernel_health=false"


def test_the_cpu_probe_still_judges_a_cpu_job(tiny_cfg):
    from bench.runner import Session

    found = Session().kernel_health(tiny_cfg("kernel_health=false"))
    assert found["device"] == "cpu" and found["why_not_probed"] == "kernel_health=false"


def test_cuda_rows_are_fbgemm_s_16_byte_aligned_rows():
    assert {d: cuda.row_bytes(d) for d in cuda.SPARSE_TYPES} == {"fp32": 256, "fp16": 128, "int8": 80, "int4": 48, "int2": 32}
    assert cuda.row_widths() == [32, 48, 80, 128, 256]


def test_the_probe_s_timings_run_on_the_device_they_are_given():
    timed = cuda.time_lookups(CPU, tables=2, rows=500, batch=64, calls=3)
    assert set(timed) == {EAGER, *(tbe_family(d) for d in cuda.SPARSE_TYPES)}
    assert all(v > 0 and math.isfinite(v) for v in timed.values())
    gemms = cuda.time_gemms(CPU, shape=(32, 32, 32), calls=3)
    assert set(gemms) == {"gemm_fp32", "gemm_fp16"} and all(v > 0 for v in gemms.values())


def test_gpu_limits_are_measured_once_and_cached(tmp_path):
    device = gpu()
    device.gemm_shape = (64, 64, 64)  # the probe's functions on the CPU device: a small GEMM
    limits = device.limits(tmp_path, "fp", CPU).ensure([32, 48], total_bytes=1 << 22)
    assert limits.path == tmp_path / "roofline" / "fp-cuda.json" and limits.path.exists()
    assert limits.gather(32) > 0 and limits.write() > 0 and limits.gemm("fp16") > 0 and limits.gemm("fp32") > 0
    assert limits.data["device"] == "cuda" and limits.data["version"] == cuda.VERSION and limits.data["clock"] == "wall"  # as the GPU's file was
    again = gpu().limits(tmp_path, "fp", CPU)
    assert again.data["gather_bytes_per_s"] == limits.data["gather_bytes_per_s"]


class _Limits:
    """GPU limits given by hand: 1 GB/s gathers at every width, 1 TFLOP/s GEMMs."""

    fingerprint = "by-hand"
    data = {"gather_bytes_per_s": {str(w): 1e9 for w in (32, 48, 80, 128, 256)}, "gemm_flops": {"fp32": 1e12, "fp16": 1e12}}

    def gather(self, width):
        return 1e9

    def gemm(self, kind):
        return 1e12


def test_the_gpu_verdicts_read_the_gpu_s_own_limits():
    # the int2 row is 32 bytes: 32 ns at the roofline, so at most 32 / MIN_GATHER_SHARE ns a row is healthy
    bound = 32 / MIN_GATHER_SHARE
    timed = {EAGER: 300.0, tbe_family("int2"): bound * 1.1, tbe_family("int8"): 80.0, "gemm_fp16": 1.0, "gemm_fp32": 1e3}
    verdicts = {v.family: v for v in cuda.judge(timed, _Limits())}
    assert not verdicts["tbe_int2"].healthy and "GPU's gather roofline" in verdicts["tbe_int2"].why
    assert verdicts["tbe_int2"].expected_ns == pytest.approx(bound)
    assert verdicts["tbe_int8"].healthy and verdicts[EAGER].healthy
    assert verdicts["gemm_fp16"].healthy and not verdicts["gemm_fp32"].healthy  # 1e3 ns/kFLOP is 1 GFLOP/s: 0.1% of 1 TFLOP/s


def test_the_roofline_reads_half_precision_flops_against_the_gpu_s_fp16_gemm_limit():
    class Mixed(_Limits):
        data = {**_Limits.data, "gemm_flops": {"fp32": 1e12, "fp16": 4e12}}

        def gemm(self, kind):
            return self.data["gemm_flops"][kind]

    roof = roofline_metrics(1e6, {"t": 1.0}, {"t": 32}, dense_flops=1e4, int8_fraction=0.0, limits=Mixed(), half_fraction=0.75)
    assert roof["embedding_share"] == pytest.approx(1e6 * 32 / 1e9)
    assert roof["dense_share"] == pytest.approx(1e6 * 1e4 * (0.25 / 1e12 + 0.75 / 4e12)) and roof["dense_half_fraction"] == 0.75


def test_the_operator_log_tells_half_precision_gemms_apart():
    from bench.measure.operators import families, operators

    mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(4, 8)
    fp32 = operators(mlp, (x,))
    assert families(fp32, []) == ["gemm_fp32"] and fp32.as_metrics(4)["dense_half_fraction"] == 0.0
    half = operators(mlp.to(torch.bfloat16), (x.to(torch.bfloat16),))  # bf16 matmuls run on any CPU
    assert families(half, []) == ["gemm_fp16"] and half.as_metrics(4)["dense_half_fraction"] == 1.0


def _record(device, degraded, gpu=None, backend="int8_tbe"):
    health = {"device": device, "probed": True, "degraded": degraded,
              "verdicts": {f: {"healthy": False, "measured_ns": 82.2, "expected_ns": 25.1, "unit": "ns/row"} for f in degraded}}
    if gpu:
        health["gpu"] = gpu
    return RunRecord(status="ok", workload="synthetic", backend=backend, device=device, batch_size=1024, config={},
                     config_hash="h", env={"kernel_health": health}, metrics={"kernel_families": degraded})


def test_the_banner_names_the_device_whose_probe_judged_it():
    from bench.report.kernels import banner_lines, summary_line

    gpu = banner_lines([_record("cuda", ["tbe_int2"], gpu="NVIDIA H100 80GB HBM3")])
    assert gpu[0].startswith("> **Kernel health:** on cuda (NVIDIA H100 80GB HBM3),") and "host" not in gpu[0]
    assert "tbe_int2: 82.2 ns/row against at most 25.1 expected" in gpu[2]
    cpu = banner_lines([_record("cpu", ["embedding_bag_fp32"])])
    assert cpu[0].startswith("> **Kernel health:** on cpu (the host),")
    both = banner_lines([_record("cuda", ["tbe_int2"], gpu="H100"), _record("cpu", ["tbe_int8"])])
    assert "on cpu (the host) and cuda (H100)" in both[0] and any(line.startswith("> - cuda (H100): tbe_int2") for line in both)
    assert banner_lines([_record("cuda", [], gpu="H100")]) == []  # a healthy GPU: no banner
    assert summary_line(_record("cuda", ["tbe_int2"], gpu="H100")).startswith("Kernel health (on cuda (H100)): tbe_int2")


def test_a_verdict_made_inconclusive_by_kernel_health_says_so_and_not_that_it_straddles():
    from bench.report.markdown import speedup_sentences

    rows = pd.DataFrame([
        dict(status="ok", backend="int8_tbe", batch_size=1024, speedup=2.20, speedup_lo=1.64, speedup_hi=2.94, latency_calls=600,
             speed_verdict="inconclusive", speed_margin=0.05, kernel_degraded="tbe_int8, gemm_fp32", stable=True, throughput=2e6),
        dict(status="ok", backend="uint4", batch_size=1024, speedup=1.02, speedup_lo=0.93, speedup_hi=1.12, latency_calls=600,
             speed_verdict="inconclusive", speed_margin=0.05, kernel_degraded=None, stable=True, throughput=1e6),
        dict(status="ok", backend="fp32", batch_size=1024, speedup=math.nan, speedup_lo=math.nan, speedup_hi=math.nan, latency_calls=600,
             speed_verdict=None, speed_margin=0.05, kernel_degraded=None, stable=True, throughput=1e6),
    ])
    notes = speedup_sentences(rows)
    degraded = next(n for n in notes if n.startswith("**int8_tbe**"))
    assert "measured on degraded kernels (tbe_int8, gemm_fp32" in degraded and "straddles" not in degraded
    assert "alone would read gain" in degraded
    plain = next(n for n in notes if n.startswith("**uint4**"))
    assert "[0.93, 1.12] straddles the ±5% margin" in plain


def test_a_gpu_job_whose_batch_time_is_flat_is_said_to_be_launch_bound():
    from bench.report.regime import regime_sentences

    def row(backend, device, batch, p50):
        return dict(status="ok", backend=backend, device=device, batch_size=batch, latency_p50_ms=p50)

    # eager fp32 on the H100 before this change: 2.55 ms at 256 rows, about 2.25 ms at 4096
    g = pd.DataFrame([row("fp32", "cuda", 256, 2.55), row("fp32", "cuda", 1024, 1.50), row("fp32", "cuda", 4096, 2.25),
                      row("uint4", "cuda", 256, 0.5), row("uint4", "cuda", 4096, 6.0),  # grows with the rows: memory, not launches
                      row("int8_tbe", "cpu", 256, 1.0), row("int8_tbe", "cpu", 4096, 1.2)])  # a CPU job: not said
    notes = regime_sentences(g)
    assert len(notes) == 1 and notes[0].startswith("**fp32** on cuda is launch-bound")
    assert "2.55 ms at 256, 2.25 ms at 4,096: 0.9x the time for 16x the rows" in notes[0] and "CUDA graph" in notes[0]
    assert regime_sentences(pd.DataFrame([row("fp32", "cuda", 256, 2.0), row("fp32", "cuda", 1024, 2.1)])) == []  # 4x apart: too close to say


def test_timing_show_names_a_gpu_probe_by_its_gpu(tmp_path):
    import json

    from bench.pipeline.timing_cache import show

    (tmp_path / "abc-cuda-kernels.json").write_text(json.dumps({"version": 1, "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "verdicts": [
        {"family": "tbe_int2", "healthy": True, "measured_ns": 0.5, "expected_ns": 1.2, "unit": "ns/row"}]}))
    lines = show(tmp_path)
    assert lines[0] == "kernel probe abc-cuda-kernels.json: GPU NVIDIA H100 80GB HBM3, 1 kernel families healthy"
    assert lines[1] == "  tbe_int2: 0.5 ns/row (at most 1.2)"


def test_the_regime_note_gives_the_graphed_speedup_beside_the_eager_one():
    from bench.metrics import CUDA_GRAPH_NOTE, CUDA_GRAPH_SPEEDUP, SPEEDUP, hi, lo
    from bench.report.regime import regime_sentences

    def row(backend, batch, p50, eager=None, graphed=None, note=None):
        return {"status": "ok", "backend": backend, "device": "cuda", "batch_size": batch, "latency_p50_ms": p50,
                SPEEDUP: eager, CUDA_GRAPH_SPEEDUP: graphed, lo(CUDA_GRAPH_SPEEDUP): graphed and graphed - 0.1,
                hi(CUDA_GRAPH_SPEEDUP): graphed and graphed + 0.1, CUDA_GRAPH_NOTE: note}

    g = pd.DataFrame([row("int8_tbe", 256, 1.0, 2.0, 1.5), row("int8_tbe", 4096, 1.2, 2.1, None, "not recorded: capture failed"),
                      row("uint4", 256, 0.5, 1.8, 1.4), row("uint4", 4096, 6.0, 2.4, 2.3)])
    notes = regime_sentences(g)
    assert notes[0].startswith("**int8_tbe** on cuda is launch-bound") and notes[0].endswith(
        ": 1.50x [1.40, 1.60] graphed against 2.00x eager at 256; none at 4,096 (not recorded: capture failed).")
    assert notes[1] == "**uint4** on cuda with CUDA graphs: 1.40x [1.30, 1.50] graphed against 1.80x eager at 256; 2.30x [2.20, 2.40] graphed against 2.40x eager at 4,096."
    plain = regime_sentences(g.drop(columns=[CUDA_GRAPH_SPEEDUP, CUDA_GRAPH_NOTE]))
    assert len(plain) == 1 and plain[0].endswith("; timing.cuda_graphs=true times it so.")
