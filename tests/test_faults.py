"""Failure isolation: an exception, a NaN or inf score, or running out of memory fails one job, not
the sweep; the report lists the error and the gate counts it as a failure. And the resource guard:
a job whose estimated memory does not fit is `skipped` with the reason before anything is built.

Elsewhere: a bad batch size or a missing checkpoint as an error record (tests/test_runner.py), an
absent device as a skipped record (tests/test_runner.py), a failing fake-quant twin keeping the
job's measurements (tests/test_backends_quant.py).
"""

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from torch import nn

from bench import hardware, registry
from bench.backends.fake_quant import FakeQuantBackend
from bench.backends.fp32 import Fp32Backend
from bench.backends.int8_tbe import Int8TbeBackend
from bench.backends.tables import embedding_bytes
from bench.measure import memory
from bench.runner import Session, job_hash, run_job
from bench.pipeline.guard import memory_estimate
from bench.store import read_records
from tests.support.models import FAST, config_maker, train_once



@pytest.fixture(scope="session")
def fast_models(tmp_path_factory):
    """The FAST fp32 model, trained once per session; tests copy its checkpoint cache."""
    return train_once(tmp_path_factory.mktemp("fast-models"), FAST)


@pytest.fixture
def fast_cfg(tmp_path, fast_models):
    """Compose FAST configs whose caches and reports live in this test's folder."""
    return config_maker(tmp_path, fast_models, FAST)


class Poisoned(nn.Module):
    """The model, with `value` added to every score (NaN or inf)."""

    def __init__(self, model: nn.Module, value: float) -> None:
        super().__init__()
        self.model, self.value = model, value

    def forward(self, dense, sparse):
        return self.model(dense, sparse) + self.value


def poison(value):
    def prepare(self, model, calibration_batches, device):
        return Poisoned(Fp32Backend.prepare(self, model, calibration_batches, device), value)

    return prepare


def raise_(exc):
    def prepare(self, model, calibration_batches, device):
        raise exc

    return prepare


@pytest.mark.slow
@pytest.mark.parametrize("value,label", [(float("nan"), "NaN"), (float("inf"), "inf"), (-float("inf"), "-inf")])
def test_non_finite_scores_are_an_error_record(fast_cfg, monkeypatch, value, label):
    monkeypatch.setattr(FakeQuantBackend, "prepare", poison(value))
    record, exc = run_job(fast_cfg("backend=fake_quant"))
    assert record.status == "error" and isinstance(exc, FloatingPointError), label
    assert "non-finite scores (NaN or inf)" in record.error and "2048" in record.error
    assert record.metrics == {} and record.env["torch"]


@pytest.mark.slow
@pytest.mark.parametrize("exc", [MemoryError("cannot allocate 40 GB"), torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40 GiB")])
def test_out_of_memory_is_an_error_record_and_the_next_job_runs(fast_cfg, monkeypatch, exc):
    monkeypatch.setattr(Int8TbeBackend, "prepare", raise_(exc))
    session = Session()
    ok = run_job(fast_cfg(), session)[0]
    assert ok.status == "ok" and "model" in session.work.built()  # the fp32 job left a model in the shared work
    record, raised = run_job(fast_cfg("backend=int8_tbe"), session)
    assert raised is exc and record.status == "error"
    assert record.error.startswith(f"out of memory ({type(exc).__name__}: ") and str(exc) in record.error
    assert session.work.built() == []  # dropped, so the next job starts clean
    again = run_job(fast_cfg("batch_size=128"), session)[0]
    assert again.status == "ok" and again.metrics["auc"] == ok.metrics["auc"]


@pytest.mark.slow
def test_any_exception_in_prepare_is_an_error_record(fast_cfg, monkeypatch):
    monkeypatch.setattr(FakeQuantBackend, "prepare", raise_(ZeroDivisionError("division by zero in a user's backend")))
    record, exc = run_job(fast_cfg("backend=fake_quant"))
    assert record.status == "error" and record.error == "ZeroDivisionError: division by zero in a user's backend"
    assert record.error_kind is None  # a failure of the job, not bad input


def multirun(monkeypatch, argv):
    """`python -m bench ARGV` in this process (a Hydra multirun through the real task function)."""
    from bench import cli

    monkeypatch.setattr(sys, "argv", ["bench", *argv])
    GlobalHydra.instance().clear()
    try:
        cli.main()
        return 0
    except SystemExit as exc:
        return exc.code
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.slow
def test_a_sweep_goes_on_past_nan_and_oom_and_the_gate_fails_on_them(fast_cfg, monkeypatch, tmp_path, capsys):
    fast_cfg()  # copies the trained model into tmp_path/cache
    monkeypatch.setattr(FakeQuantBackend, "prepare", poison(float("nan")))
    monkeypatch.setattr(Int8TbeBackend, "prepare", raise_(torch.OutOfMemoryError("out of memory (simulated)")))
    reports, sweep_dir = tmp_path / "reports", tmp_path / "multirun"
    code = multirun(
        monkeypatch,
        ["+sweep=nightly", "backend=fp32,fake_quant,int8_tbe", *FAST, "batch_size=256",
         f"cache_dir={tmp_path / 'cache'}", f"reports_dir={reports}", f"hydra.sweep.dir={sweep_dir}"],  # fmt: skip
    )
    out = capsys.readouterr().out
    assert code == 1  # the gate failed: errored jobs are failures
    records = {json.loads(p.read_text())["backend"]: json.loads(p.read_text()) for p in sweep_dir.glob("*/record.json")}
    assert {b: r["status"] for b, r in records.items()} == {"fp32": "ok", "fake_quant": "error", "int8_tbe": "error"}
    assert "non-finite scores" in records["fake_quant"]["error"] and "out of memory" in records["int8_tbe"]["error"]
    assert len(read_records(reports / "records.jsonl")) == 3
    assert "3 jobs (1 ok, 2 error, 0 skipped)" in out and "gate: FAILED" in out
    assert "error: fake_quant cpu bs=256: FloatingPointError" in out
    # the command line changed the sweep's jobs: only its own pointer, latest-<overrides>, at the printed path;
    # `latest` is left to the sweep as configured
    report = Path(re.search(r"^report: (.+)$", out, re.M).group(1)).parent
    pointers = {p.name: p.resolve() for p in (reports / "nightly").glob("latest*")}
    assert "latest" not in pointers and len(pointers) == 1 and set(pointers.values()) == {report.resolve()}
    report_md, gate_md = (report / "report.md").read_text(), (report / "gate.md").read_text()
    assert "non-finite scores" in report_md and "out of memory" in report_md  # the report lists the errors
    assert "job errored" in gate_md and "FAIL" in gate_md
    # The stored verdict is reproduced from the stored records and config, without results.csv.
    from bench.gate.__main__ import main as gate_main

    assert (report / "gate_config.yaml").is_file()
    (report / "results.csv").unlink()
    assert gate_main([str(report)]) == 1 and (report / "gate.md").read_text() == gate_md
    assert not list(report.glob("gate-*"))


# ---------------------------------------------------------------------------- resource guard


def meminfo(monkeypatch, tmp_path, available_kb):
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       16000000 kB\nMemFree:          100000 kB\nMemAvailable:   {available_kb:>8} kB\n")
    monkeypatch.setattr(hardware, "MEMINFO", path)


def test_row_bytes_are_fbgemm_s():
    d = 128
    assert [memory.row_bytes(t, d) for t in ("fp32", "fp16", "fp8", "int8", "int4", "int2")] == [4 * d, 2 * d, d, d + 4, d // 2 + 4, d // 4 + 4]
    assert memory.row_bytes("int4", 16, alignment=16) == 16 and memory.row_bytes("int8", 16, alignment=16) == 32


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["int8_tbe", "uint4", "int2_tbe", "fp16_tbe"])
def test_estimated_tables_match_what_the_backend_stores(fast_cfg, backend):
    cfg = fast_cfg(f"backend={backend}")
    work = Session().work
    workload = work.workload(cfg)
    model = work.model(cfg, workload).module
    be = registry.get("backend", backend).factory(cfg.backend)
    estimate = memory_estimate(cfg, be, workload, work.model_resident(cfg), torch.device("cpu"))
    prepared = be.prepare(model, work.split_batches(cfg, workload, "calibration"), torch.device("cpu"))
    assert estimate.backend_tables_bytes == embedding_bytes(prepared)
    assert estimate.fp32_model_bytes == memory.model_bytes(model) and estimate.model_resident


def test_per_table_overrides_count_in_the_estimate(fast_cfg):
    cfg = fast_cfg("backend=uint4", "+backend.per_table={t_cat_0: int8}")
    be = registry.get("backend", "uint4").factory(cfg.backend)
    est = memory_estimate(cfg, be, Session().work.workload(cfg), False, torch.device("cpu"))
    dim = cfg.model.embedding_dim
    assert est.backend_tables_bytes == 100 * (dim + 4) + (50 + 30 + 20) * (dim // 2 + 4)


@pytest.mark.slow
def test_a_job_that_does_not_fit_is_skipped_before_anything_is_built(fast_cfg, monkeypatch, tmp_path):
    meminfo(monkeypatch, tmp_path, 64)  # 64 kB available
    def never(*args, **kwargs):
        raise AssertionError("the model must not be built")

    monkeypatch.setattr("bench.pipeline.shared.trained_model", never)
    record, exc = run_job(fast_cfg("backend=int8_tbe"))
    assert exc is None and record.status == "skipped"
    assert "not enough host memory" in record.error and "MemAvailable 0.07 MB" in record.error
    assert "fp32 model" in record.error and "backend tables" in record.error and "memory_fraction" in record.error
    assert record.metrics == {} and record.env["fingerprint"]


@pytest.mark.slow
def test_the_guard_uses_the_safety_fraction_and_can_be_turned_off(fast_cfg, monkeypatch, tmp_path):
    cfg = fast_cfg("backend=uint4")
    be = registry.get("backend", "uint4").factory(cfg.backend)
    need = memory_estimate(cfg, be, Session().work.workload(cfg), False, torch.device("cpu")).total_bytes
    meminfo(monkeypatch, tmp_path, -(-need // 1024) + 1)  # just above the need, below need / 0.8
    assert run_job(cfg)[0].status == "skipped"
    assert run_job(fast_cfg("backend=uint4", "memory_fraction=1.0"))[0].status == "ok"
    meminfo(monkeypatch, tmp_path, 1)
    assert run_job(fast_cfg("backend=uint4", "memory_fraction=null"))[0].status == "ok"
    assert run_one_hash(fast_cfg("memory_fraction=null")) == run_one_hash(fast_cfg())  # not part of the job's identity
    for bad in ("0", "-0.5"):
        record = run_job(fast_cfg(f"memory_fraction={bad}"))[0]
        assert record.status == "error" and "memory_fraction must be a positive number" in record.error


def run_one_hash(cfg):
    return job_hash(dataclasses.asdict(cfg))


def test_no_meminfo_means_no_guard(monkeypatch, tmp_path):
    monkeypatch.setattr(hardware, "MEMINFO", tmp_path / "absent")
    assert hardware.mem_available_bytes() is None
    est = memory.estimate_job({"t": (10**9, 128)}, 0, None, model_resident=False)
    assert memory.memory_skip_reason(est, torch.device("cpu"), 0.8) is None
