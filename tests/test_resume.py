"""resume=true: an interrupted sweep, re-run, measures only what is missing and ends with exactly
one record per job. In-process for the rules (what is reused, what runs again), and with real
processes interrupted by Ctrl-C (SIGINT) and by SIGKILL mid-job."""

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.backends.fake_quant import FakeQuantBackend
from bench.io import append_jsonl
from bench.runner import job_hash, run_job
from bench.store import read_records, save_record
from tests.support.signals import sigint_at_default
from tests.test_faults import FAST, fast_cfg, fast_models, poison  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[1]


def store(tmp_path):
    return tmp_path / "reports" / "records.jsonl"


def measured(cfg):
    record, _ = run_job(cfg)
    save_record(record, None, cfg.reports_dir)
    return record


def no_measuring(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("resume measured a job that was already stored")

    monkeypatch.setattr("bench.routes.single.measure", refuse)


@pytest.mark.slow
def test_resume_reuses_the_stored_record_without_measuring(fast_cfg, monkeypatch, tmp_path):
    first = measured(fast_cfg())
    no_measuring(monkeypatch)
    again, exc = run_job(fast_cfg("resume=true"))
    assert exc is None and again.status == "ok" and again.resumed_from == first.record_id
    assert again.record_id != first.record_id and again.config_hash == first.config_hash
    assert again.metrics == first.metrics and again.env == first.env
    assert again.config["resume"] is True  # this run's config; the hash ignores resume
    # without resume=true the store is not consulted: it measures (and here measure refuses)
    assert "already stored" in run_job(fast_cfg())[0].error


@pytest.mark.slow
def test_resume_names_the_damaged_lines_it_skips_and_still_reuses_the_rest(fast_cfg, monkeypatch, tmp_path, caplog):
    """Two damaged lines after the stored record (as the README promises): resume names them by line number, with the
    command that moves them aside, and reuses the record; after `store repair` nothing is named."""
    import logging

    from bench.store import repair

    first = measured(fast_cfg())
    with store(tmp_path).open("a") as f:
        f.write('{"status": "ok", "backend": "fp3\nnot a record\n')
    no_measuring(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="bench.store"):
        again, _ = run_job(fast_cfg("resume=true"))
    assert again.resumed_from == first.record_id
    said = [r.getMessage() for r in caplog.records if "resume skips" in r.getMessage()]
    assert len(said) == 1 and "2 damaged line(s)" in said[0] and "line 2 (not JSON" in said[0] and "line 3 (not JSON" in said[0]
    assert "python -m bench store repair" in said[0]
    caplog.clear()
    repair(tmp_path / "reports")
    with caplog.at_level(logging.WARNING, logger="bench.store"):
        assert run_job(fast_cfg("resume=true"))[0].resumed_from == first.record_id
    assert not [r for r in caplog.records if "resume skips" in r.getMessage()]


@pytest.mark.slow
def test_resume_does_not_count_as_part_of_the_job_s_identity(fast_cfg):
    plain, resumed = (dataclasses.asdict(fast_cfg(*o)) for o in ([], ["resume=true"]))
    assert job_hash(plain) == job_hash(resumed)


@pytest.mark.slow
def test_error_records_run_again(fast_cfg, monkeypatch, tmp_path):
    with monkeypatch.context() as m:
        m.setattr(FakeQuantBackend, "prepare", poison(float("nan")))
        failed = measured(fast_cfg("backend=fake_quant"))
    assert failed.status == "error"
    assert not list((tmp_path / "cache" / "scores").glob("*.npz"))  # non-finite scores are never cached
    again = measured(fast_cfg("backend=fake_quant", "resume=true"))
    assert again.status == "ok" and again.resumed_from is None
    no_measuring(monkeypatch)
    third = run_job(fast_cfg("backend=fake_quant", "resume=true"))[0]
    assert third.resumed_from == again.record_id  # the ok record now stands for the job
    assert [r.status for r in read_records(store(tmp_path))] == ["error", "ok"]


@pytest.mark.slow
def test_a_record_whose_answer_the_host_withheld_is_measured_again_and_kept(fast_cfg, monkeypatch, tmp_path, caplog):
    # An ok record that says the host withheld its answer (a paired Server job whose rounds were set aside: no ratio)
    # is not handed back by resume: the job is measured again, its new record names the withheld one, and the
    # withheld record stays in the store as it was. The new record then stands for the job.
    first, _ = run_job(fast_cfg())
    withheld = dataclasses.replace(first, record_id="withheld0000000a",
                                   metrics={**first.metrics, "measure_again": "no paired ratio, its rounds set aside: planted"})
    save_record(withheld, None, fast_cfg().reports_dir)  # the job's only record
    with caplog.at_level("INFO", logger="bench.runner"):
        again = measured(fast_cfg("resume=true"))
    assert again.status == "ok" and again.resumed_from is None and again.metrics["measured_again_after"] == "withheld0000000a"
    assert "measured again: record withheld0000000a withheld its answer (no paired ratio, its rounds set aside: planted)" in caplog.text
    no_measuring(monkeypatch)
    third = run_job(fast_cfg("resume=true"))[0]
    assert third.resumed_from == again.record_id
    stored = read_records(store(tmp_path))
    assert [r.record_id for r in stored] == ["withheld0000000a", again.record_id]
    assert stored[0].metrics["measure_again"].endswith("planted")  # nothing already stored changed
    assert "measure_again" not in again.metrics


@pytest.mark.slow
def test_another_machine_s_record_is_not_reused(fast_cfg, monkeypatch, tmp_path):
    first = measured(fast_cfg())
    data = first.to_dict()
    store(tmp_path).unlink()
    append_jsonl(store(tmp_path), [{**data, "env": {**data["env"], "fingerprint": "another-box"}}])
    again = run_job(fast_cfg("resume=true"))[0]
    assert again.status == "ok" and again.resumed_from is None


@pytest.mark.slow
def test_other_configs_are_not_reused(fast_cfg, monkeypatch):
    measured(fast_cfg())
    record = run_job(fast_cfg("resume=true", "batch_size=128"))[0]
    assert record.status == "ok" and record.resumed_from is None


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_skipped_records_are_reused(fast_cfg, monkeypatch):
    first = measured(fast_cfg("device=cuda"))
    assert first.status == "skipped"
    again = run_job(fast_cfg("device=cuda", "resume=true"))[0]
    assert again.status == "skipped" and again.resumed_from == first.record_id and again.error == first.error


def test_a_resumed_record_keeps_why_it_was_skipped():
    """A skip because the backend cannot take the model (NotApplicable) read back on resume stays that kind of skip, so
    recommend's stage 0 says "cannot take this model" in a resumed run as in the first one."""
    from bench.record import NOT_APPLICABLE, RunRecord
    from bench.runner import resumed

    def record(**fields):
        return RunRecord(**{"status": "ok", "workload": "w", "backend": "b", "device": "cpu", "batch_size": 32, "config": {},
                            "config_hash": "h", "env": {}, **fields})

    prior = record(status="skipped", error="the exported twin takes dense id matrices", error_kind=NOT_APPLICABLE)
    again = resumed(prior, record())
    assert (again.status, again.error, again.error_kind, again.resumed_from) == ("skipped", prior.error, NOT_APPLICABLE, prior.record_id)


# ------------------------------------------------------------------------- real interruptions

JOBS = {(b, bs) for b in ("fp32", "fake_quant") for bs in (128, 256)}
SWEEP = [
    "+sweep=quant", "device=cpu", "backend=fp32,fake_quant", "batch_size=128,256",
    *[o for o in FAST if not o.startswith("batch_size=")],
    "timing.trials=20", "timing.batches_per_trial=8",  # each job times for a while: kills land mid-job
]  # fmt: skip


def start(tmp_path, run, *extra):
    args = [*SWEEP, f"reports_dir={tmp_path / 'reports'}", f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / run}", *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with sigint_at_default():
        return subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def interrupt_when_started(proc, job_dir: Path, sig, timeout=180):
    """Send `sig` as soon as Hydra has set up `job_dir` (the job is running, its record not written)."""
    deadline = time.monotonic() + timeout
    while not (job_dir / ".hydra").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.02)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def records_in(sweep_dir: Path) -> dict[int, dict]:
    return {int(p.parent.name): json.loads(p.read_text()) for p in sweep_dir.glob("*/record.json")}


@pytest.mark.slow
def test_a_sweep_stopped_by_ctrl_c_then_killed_resumes_to_one_record_per_job(tmp_path, fast_models):
    shutil.copytree(fast_models, tmp_path / "cache" / "models")
    stored = lambda: read_records(tmp_path / "reports" / "records.jsonl")  # noqa: E731

    # 1. Ctrl-C while job 1 runs: job 0's record is kept, job 1 leaves nothing behind.
    code, out, err = interrupt_when_started(start(tmp_path, "run1"), tmp_path / "run1" / "1", signal.SIGINT)
    assert code == 130 and "interrupted" in err and "resume=true" in err, (code, out[-2000:], err[-4000:])  # what the run said, if not
    assert list(records_in(tmp_path / "run1")) == [0] and len(stored()) == 1

    # 2. Resumed, then SIGKILL while job 2 runs: job 0 re-emitted, job 1 measured, job 2 nothing.
    code, _, _ = interrupt_when_started(start(tmp_path, "run2", "resume=true"), tmp_path / "run2" / "2", signal.SIGKILL)
    assert code == -signal.SIGKILL
    run2 = records_in(tmp_path / "run2")
    assert sorted(run2) == [0, 1] and len(stored()) == 2
    assert run2[0]["resumed_from"] == stored()[0].record_id and run2[1]["resumed_from"] is None

    # 3. Resumed to the end.
    proc = start(tmp_path, "run3", "resume=true")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "4 jobs (4 ok, 0 error, 0 skipped; 2 resumed from stored records)" in out

    final = stored()  # nothing lost, nothing duplicated: one measurement per job
    assert len(final) == 4 and {(r.backend, r.batch_size) for r in final} == JOBS
    assert len({r.config_hash for r in final}) == 4 and all(r.status == "ok" for r in final)
    run3 = records_in(tmp_path / "run3")
    assert sorted(run3) == [0, 1, 2, 3] and {(r["backend"], r["batch_size"]) for r in run3.values()} == JOBS
    by_hash = {r.config_hash: r for r in final}
    assert sorted(r["resumed_from"] for r in run3.values() if r["resumed_from"]) == sorted(r.record_id for r in final[:2])
    for r in run3.values():
        assert r["metrics"] == by_hash[r["config_hash"]].metrics
    report = Path(re.search(r"^report: (.+)/report.md$", out, re.M).group(1))  # the run's own report (not `latest`: the jobs were overridden)
    assert len(read_records(report / "records.jsonl")) == 4  # the sweep's report: one row per job
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp") or ".tmp." in p.name]


@pytest.mark.slow
def test_resume_tells_two_contents_of_one_per_table_file_apart(fast_cfg, tmp_path):
    """The record carries the mapping the file held, so a changed file is a different job."""
    path = tmp_path / "per_table.yaml"
    path.write_text("{t_cat_0: int8}\n")
    first = measured(fast_cfg("backend=uint4", "backend.mlp=fp32", f"backend.per_table_file={path}"))
    assert first.status == "ok" and first.config["backend"]["per_table"] == {"t_cat_0": "int8"}
    assert first.config["backend"]["per_table_file"] == str(path)
    same, _ = run_job(fast_cfg("backend=uint4", "backend.mlp=fp32", f"backend.per_table_file={path}", "resume=true"))
    assert same.resumed_from == first.record_id
    path.write_text("{t_cat_0: int2}\n")
    changed, _ = run_job(fast_cfg("backend=uint4", "backend.mlp=fp32", f"backend.per_table_file={path}", "resume=true"))
    assert changed.status == "ok" and not changed.resumed_from and changed.config_hash != first.config_hash
    assert changed.config["backend"]["per_table"] == {"t_cat_0": "int2"}
