"""The record store's promises as its users meet them: damage is named and never spreads (the
writer never rewrites a stored line; every reader skips the same lines; resume names the lines it
skips), `python -m bench store check` says what a store holds and `store repair` moves the damage
aside without losing a record, resume claims a job so concurrent identical sweeps measure it once,
and default run folders never collide."""

from __future__ import annotations

import fcntl
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench.io import append_jsonl, write_text_atomic
from bench.record import SCHEMA_VERSION, RunRecord
from bench.results.load import load_records
from bench.store import Claims, StoreIndex, check, read_store, repair
from bench.store import main as store_main
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
    bad = cli("check", str(damaged.parent))
    assert bad.returncode == 1 and "line 2" in bad.stdout and "NOT SOUND" in bad.stdout
    clean = tmp_path / "clean"
    append_jsonl(clean / "records.jsonl", [record().stored_form()])
    ok = cli("check", str(clean))
    assert ok.returncode == 0 and "sound: every line is a whole record" in ok.stdout
    missing = cli("check", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no records.jsonl here" in missing.stderr


def cli(*args):
    return subprocess.run([sys.executable, "-m", "bench", "store", *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_resume_names_the_damaged_lines_it_skips_by_their_numbers(damaged, caplog):
    index = StoreIndex(damaged)
    with caplog.at_level(logging.WARNING, logger="bench.store"):
        assert index.latest("h-fp16_tbe", "m1") is not None
    said = [r.getMessage() for r in caplog.records if "resume skips" in r.getMessage()]
    assert len(said) == 1 and "resume skips 2 damaged line(s)" in said[0] and "line 2 (not JSON" in said[0] and "line 3 (not JSON" in said[0]
    assert f"python -m bench store repair {damaged.parent}" in said[0] and [n for n, _ in index.skipped] == [2, 3]
    caplog.clear()
    with damaged.open("a") as f:  # read incrementally: only the new damage is named, by its line number in the file
        f.write("more garbage\n" + line(record("uint4")))
    with caplog.at_level(logging.WARNING, logger="bench.store"):
        assert index.latest("h-uint4", "m1") is not None and index.latest("h-fp32", "m1") is not None
    said = [r.getMessage() for r in caplog.records if "resume skips" in r.getMessage()]
    assert len(said) == 1 and "1 damaged line(s)" in said[0] and "line 6 (not JSON" in said[0]


@pytest.mark.slow
def test_store_repair_moves_the_damage_aside_and_leaves_the_store_sound(damaged, tmp_path):
    """`store repair` as a user runs it: the damaged lines, a record stored twice and a torn tail go to
    records.jsonl.damaged under headers naming them; every record stays, in order; `store check` then exits 0;
    a second repair has nothing to do; no store is one line and exit 2."""
    with damaged.open("a") as f:
        f.write(damaged.read_text().splitlines()[0] + '\n{"status": "ok", "backend": "int')  # line 1 again, then a writer killed mid-write
    before = damaged.read_bytes()
    ids = [r.record_id for r in read_store(damaged).records]
    assert cli("check", str(damaged.parent)).returncode == 1

    fixed = cli("repair", str(damaged.parent))
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "moved 4 line(s) to records.jsonl.damaged: line 2 (not JSON" in fixed.stdout and "line 3 (not JSON" in fixed.stdout
    assert "line 6 (repeats line 1, record " in fixed.stdout and "line 7 (a torn last line" in fixed.stdout
    assert fixed.stdout.rstrip().endswith("sound: every line is a whole record (some of a newer schema)")
    found = read_store(damaged)
    assert [r.record_id for r in found.records] == ids[:2] and ids[2] == ids[0] and len(found.newer) == 1  # the newer one kept
    assert not found.damaged and found.torn_tail is None
    aside = damaged.with_name("records.jsonl.damaged").read_bytes().split(b"\n")
    headers = [x for x in aside if x.startswith(b"# ") and b"moved aside by store repair" in x]
    assert [h.split(b": line ")[1].split(b" ")[0] for h in headers] == [b"2", b"3", b"6", b"7"]
    old = [x for x in before.split(b"\n") if x.strip()]
    assert sorted(old) == sorted([x for x in damaged.read_bytes().split(b"\n") if x.strip()] + [x for x in aside if x.strip() and x not in headers])
    assert cli("check", str(damaged.parent)).returncode == 0
    assert "records.jsonl.damaged: 4 damaged line(s) moved there by store repair" in cli("check", str(damaged.parent)).stdout

    again = cli("repair", str(damaged.parent))
    assert again.returncode == 0 and "nothing to move aside" in again.stdout
    assert damaged.with_name("records.jsonl.damaged").read_bytes().split(b"\n") == aside
    missing = cli("repair", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no records.jsonl here" in missing.stderr
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_a_record_id_repeated_with_other_content_is_kept_and_said(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    first = record("fp32")
    other = {**first.stored_form(), "metrics": {"auc": 0.7}}  # the same record_id, another measurement: not a copy
    path.write_text(line(first) + json.dumps(other) + "\n")
    assert store_main(["repair", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "nothing to move aside" in out and "line(s) 2 repeat a stored record_id with other content" in out
    assert path.read_text() == line(first) + json.dumps(other) + "\n"  # neither is dropped


def test_an_append_that_waited_for_a_repair_lands_in_the_new_store(tmp_path):
    """A repair renames a new file over the store under the old one's lock: a writer that opened the old file and
    waited for its lock appends to the new one, never to the unlinked old one (where its record would be lost)."""
    path = tmp_path / "records.jsonl"
    path.write_text(line(record("fp32")) + "garbage\n")
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what repair holds while it writes the new store
    writer = threading.Thread(target=append_jsonl, args=(path, [record("uint4").stored_form()]))
    writer.start()
    writer.join(0.5)
    assert writer.is_alive()  # waiting for the lock
    write_text_atomic(path, line(record("fp32")))
    os.close(fd)
    writer.join(30)
    assert [r.backend for r in read_store(path).records] == ["fp32", "uint4"]
    assert repair(tmp_path) == [f"{path}: nothing to move aside"]


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
