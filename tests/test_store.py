"""The record store's promises as its users meet them: damage is named and never spreads (the
writer never rewrites a stored line; every reader skips the same lines), `python -m bench store
check` says what a store holds, resume claims a job so concurrent identical sweeps measure it once,
and default run folders never collide."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

from bench.io import append_jsonl
from bench.record import SCHEMA_VERSION, RunRecord
from bench.results.load import load_records
from bench.store import Claims, StoreIndex, check, read_store
from tests.conftest import REPO, run_bench
from tests.test_nightly_command import TINY_NIGHTLY


def record(backend="fp32", **kw) -> RunRecord:
    base = dict(status="ok", workload="synthetic", device="cpu", batch_size=8, config={}, config_hash=f"h-{backend}", env={"fingerprint": "m1"},
                metrics={"auc": 0.8})  # fmt: skip
    return RunRecord(backend=backend, **{**base, **kw})


def line(r: RunRecord) -> str:
    return json.dumps(r.stored_form()) + "\n"


@pytest.fixture
def damaged(tmp_path) -> Path:
    """A store with a record, a torn line in the middle, garbage, a newer-schema record, a record."""
    path = tmp_path / "records.jsonl"
    newer = {**record("uint4").stored_form(), "schema_version": SCHEMA_VERSION + 1}
    path.write_text(line(record("fp32")) + line(record("int8_tbe"))[:40] + "\n" + "not json at all\n" + json.dumps(newer) + "\n"
                    + line(record("fp16_tbe")))  # fmt: skip
    return path


def test_every_reader_sees_the_same_records_and_the_damage_by_line(damaged, caplog):
    found = read_store(damaged)
    assert [r.backend for r in found.records] == ["fp32", "fp16_tbe"]
    assert [n for n, _ in found.damaged] == [2, 3] and found.newer == [(4, SCHEMA_VERSION + 1)]
    assert [r.backend for r in load_records(damaged.parent)] == ["fp32", "fp16_tbe"]  # report, gate, compare read this
    assert "line 2" in caplog.text and "line 3" in caplog.text and "newer schema" in caplog.text
    assert StoreIndex(damaged).latest("h-fp16_tbe", "m1") is not None  # resume skips the same lines


def test_the_writer_never_rewrites_a_stored_line(damaged):
    before = damaged.read_bytes()
    append_jsonl(damaged, [record("uint4").stored_form()])
    after = damaged.read_bytes()
    assert after.startswith(before) and after.count(b"\n") == before.count(b"\n") + 1
    assert [r.backend for r in read_store(damaged).records] == ["fp32", "fp16_tbe", "uint4"]


@pytest.mark.slow
def test_store_check_says_what_it_found(damaged, tmp_path):
    lines, sound = check(damaged.parent)
    assert not sound and lines[0].endswith("2 records (2 ok, 0 error, 0 skipped)")
    assert any("2 damaged line(s) skipped: line 2" in x for x in lines) and any("newer schema" in x for x in lines)
    assert lines[-1] == "NOT SOUND: see the lines above"

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "bench", "store", *args], cwd=REPO, capture_output=True, text=True, timeout=60)

    bad = cli("check", str(damaged.parent))
    assert bad.returncode == 1 and "line 2" in bad.stdout and "NOT SOUND" in bad.stdout
    clean = tmp_path / "clean"
    append_jsonl(clean / "records.jsonl", [record().stored_form()])
    ok = cli("check", str(clean))
    assert ok.returncode == 0 and "sound: every line is a whole record" in ok.stdout
    missing = cli("check", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no records.jsonl here" in missing.stderr


# ------------------------------------------------------------------------------------- claims


def _claim_and_hold(folder: str, job: str, started, release) -> None:
    with Claims() as claims:
        claims.take(Path(folder), job)
        started.set()
        release.wait(30)


@pytest.mark.slow
def test_a_claim_blocks_the_same_job_until_released_and_a_dead_holder_releases_it(tmp_path):
    ctx = multiprocessing.get_context("fork")
    started, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_claim_and_hold, args=(str(tmp_path), "job-a", started, release))
    holder.start()
    assert started.wait(60)
    waiter = ctx.Process(target=_claim_and_hold, args=(str(tmp_path), "job-a", ctx.Event(), ctx.Event()))
    other_started = ctx.Event()
    other = ctx.Process(target=_claim_and_hold, args=(str(tmp_path), "job-b", other_started, ctx.Event()))
    other.start()
    assert other_started.wait(60)  # another job is not blocked
    other.kill()
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive()  # still waiting on job-a
    holder.kill()  # the holder dies without releasing: the kernel drops its lock
    holder.join()
    waiter.join(60)
    assert waiter.exitcode == 0


def _run_dir(queue) -> None:
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from bench.config.compose import compose_dictconfig

    GlobalHydra.instance().clear()
    OmegaConf.register_new_resolver("now", lambda pattern: "2026-01-01_00-00-00", replace=True)  # the same second in both
    cfg = compose_dictconfig(with_hydra=True)
    queue.put((cfg.hydra.run.dir, cfg.hydra.sweep.dir))


def test_default_run_folders_of_two_runs_in_the_same_second_differ():
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_run_dir, args=(queue,)) for _ in range(2)]
    for p in procs:
        p.start()
    dirs = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    assert dirs[0][0] != dirs[1][0] and dirs[0][1] != dirs[1][1]


@pytest.mark.slow
def test_two_concurrent_identical_resume_sweeps_measure_each_job_once(tmp_path):
    args = ["+sweep=nightly", *TINY_NIGHTLY, f"reports_dir={tmp_path / 'reports'}", f"cache_dir={tmp_path / 'cache'}", "resume=true"]
    warm = run_bench(*args, "backend=fp32", "batch_size=128", cwd=tmp_path, timeout=600)  # trains the model once
    assert warm.returncode == 0, warm.stderr[-3000:]
    env = {"PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=tmp_path, env={**__import__("os").environ, **env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    stored = read_store(tmp_path / "reports" / "records.jsonl").records
    per_job = {}
    for r in stored:
        per_job[r.config_hash] = per_job.get(r.config_hash, 0) + 1
    assert len(per_job) == 3 and set(per_job.values()) == {1}, per_job  # the warm-up's job and the sweep's two
