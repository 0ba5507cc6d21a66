"""The record store under faults: versions and migrations, whole lines under kills and parallel
writers, file permissions. (Torn-line reading, NaN refusal and parallel append_jsonl are in
tests/test_results.py.)"""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.io import append_jsonl, write_json_atomic
from bench.record import MIGRATIONS, SCHEMA_VERSION, RunRecord, SchemaError, migrate
from bench.store import StoreIndex, read_records, read_store, save_record

GOLDEN = Path(__file__).parent / "golden"
REPO = Path(__file__).resolve().parents[1]


def record(**kw):
    base = dict(status="ok", workload="synthetic", backend="fp32", device="cpu", batch_size=8, config={"a": 1}, config_hash="abc", env={"fingerprint": "m1"}, metrics={"auc": 0.8})
    return RunRecord(**{**base, **kw})


# ------------------------------------------------------------------------------ versions


def test_every_older_version_has_a_migration_step():
    assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION))


def test_golden_v1_migrates_step_by_step_with_stable_ids():
    raw = [json.loads(line) for line in (GOLDEN / "records_v1.jsonl").read_text().splitlines()]
    assert {d["schema_version"] for d in raw} == {1} and all("record_id" not in d for d in raw)
    first, second = read_records(GOLDEN / "records_v1.jsonl"), read_records(GOLDEN / "records_v1.jsonl")
    assert [r.record_id for r in first] == [r.record_id for r in second]  # derived from content, not random
    assert len({r.record_id for r in first}) == len(first) and all(r.record_id.startswith("v1-") for r in first)
    assert all(r.schema_version == SCHEMA_VERSION and r.resumed_from is None for r in first)
    # The migrated record is the v1 record plus the new fields: nothing else changes.
    for data, rec in zip(raw, first):
        migrated = rec.to_dict()
        assert {k: v for k, v in migrated.items() if k not in ("record_id", "resumed_from", "error_kind", "schema_version")} == {
            k: v for k, v in data.items() if k != "schema_version"
        }


def test_current_records_round_trip(tmp_path):
    r = record(resumed_from="0123456789abcdef")
    append_jsonl(tmp_path / "r.jsonl", [r.to_dict()])
    [back] = read_records(tmp_path / "r.jsonl")
    assert back == r and back.schema_version == SCHEMA_VERSION == 3


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 99])
def test_newer_versions_are_refused_naming_both_versions(version):
    with pytest.raises(SchemaError, match=f"schema_version {version} is newer than this harness reads \\({SCHEMA_VERSION}\\): upgrade bench"):
        RunRecord.from_dict({**record().to_dict(), "schema_version": version})


@pytest.mark.parametrize("bad", [None, "1", 0, True, 1.0])
def test_a_missing_or_odd_version_is_not_a_record(bad):
    data = record().to_dict()
    data["schema_version"] = bad
    with pytest.raises(SchemaError, match="no integer schema_version"):
        migrate(data)


def test_incomplete_record_names_the_missing_fields():
    data = record().to_dict()
    del data["config_hash"], data["env"]
    with pytest.raises(SchemaError, match="lacks required field\\(s\\) config_hash, env"):
        RunRecord.from_dict(data)
    with pytest.raises(SchemaError, match="lacks required field"):
        RunRecord.from_dict({"schema_version": 1})  # a v1 stub: migrated first, then checked


def test_unknown_status_and_non_objects_are_schema_errors(tmp_path):
    with pytest.raises(SchemaError, match="status 'fine' is not one of ok, error, skipped"):
        RunRecord.from_dict({**record().to_dict(), "status": "fine"})
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record().to_dict()) + "\n[1, 2]\n")
    found = read_store(path)
    assert len(found.records) == 1 and found.damaged == [(2, "a JSON list, not an object")]


# ------------------------------------------------------------------------- atomic writes


def test_record_files_get_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "a.json", {"x": 1})
        save_record(record(), tmp_path / "run", tmp_path / "reports")
    finally:
        os.umask(old)
    for p in (tmp_path / "a.json", tmp_path / "run" / "record.json", tmp_path / "reports" / "records.jsonl"):
        assert p.stat().st_mode & 0o777 == 0o644, p
    old = os.umask(0o077)
    try:
        write_json_atomic(tmp_path / "b.json", {"x": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "b.json").stat().st_mode & 0o777 == 0o600  # the umask still rules


def test_an_append_cuts_off_a_torn_tail_first(tmp_path):
    path = tmp_path / "records.jsonl"
    good = json.dumps(record().to_dict())
    path.write_text(good + "\n" + good[:77])  # a writer killed mid-line
    assert read_store(path).torn_tail == (len(good) + 1, 77)
    index = StoreIndex(path)
    assert index.latest("abc", "m1") is not None  # the index reads whole lines only
    append_jsonl(path, [record(backend="int8_tbe").to_dict()])
    assert [r.backend for r in read_records(path)] == ["fp32", "int8_tbe"]
    aside = path.with_name("records.jsonl.damaged").read_bytes()
    assert good[:77].encode() in aside and f"offset {len(good) + 1}".encode() in aside  # copied aside before the cut
    path.write_text(good[:30])  # nothing whole at all
    append_jsonl(path, [record().to_dict()])
    assert len(read_records(path)) == 1


def test_a_whole_last_line_without_newline_is_completed_never_cut(tmp_path):
    path = tmp_path / "records.jsonl"
    good = json.dumps(record().to_dict())
    path.write_text(good)  # the only record, its newline lost
    append_jsonl(path, [record(backend="int8_tbe").to_dict()])
    assert [r.backend for r in read_records(path)] == ["fp32", "int8_tbe"]
    assert not path.with_name("records.jsonl.damaged").exists()


WRITER = """
import sys
from bench.io import append_jsonl
from bench.record import RunRecord
pad = "x" * 300_000  # records of several pages: one write(2) each, the kill can land inside one
i = 0
while True:
    r = RunRecord(status="ok", workload="w", backend=f"b{i}", device="cpu", batch_size=1, config={}, config_hash=str(i), env={}, metrics={"pad": pad})
    append_jsonl(sys.argv[1], [r.to_dict()])
    i += 1
    if i == 3:
        print("writing", flush=True)
"""


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_only_whole_lines(tmp_path):
    path = tmp_path / "records.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout.readline().strip() == "writing"
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        append_jsonl(path, [record(backend="after-kill").to_dict()])  # the next writer repairs any torn tail
        found = read_store(path)
        assert not found.damaged and found.torn_tail is None  # only whole lines
        assert found.records[-1].backend == "after-kill"
    assert path.read_bytes().endswith(b"\n")
    assert all(len(line) > 0 for line in path.read_bytes().split(b"\n")[:-1])


def _save_many(reports, tag):
    for i in range(25):
        save_record(record(backend=f"{tag}{i}", metrics={"pad": "y" * 20000}), reports / "runs" / f"{tag}{i}", reports)


@pytest.mark.slow
def test_parallel_save_record_from_several_processes(tmp_path):
    procs = [multiprocessing.Process(target=_save_many, args=(tmp_path, t)) for t in "abcd"]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    records = read_records(tmp_path / "records.jsonl")
    assert sorted(r.backend for r in records) == sorted(f"{t}{i}" for t in "abcd" for i in range(25))
    assert len(list((tmp_path / "runs").glob("*/record.json"))) == 100
    assert not list(tmp_path.rglob("*.tmp"))


# ------------------------------------------------------------------------------ the index


def test_store_index_reads_incrementally_and_keeps_only_ok_and_skipped(tmp_path):
    path = tmp_path / "records.jsonl"
    index = StoreIndex(path)
    assert index.latest("abc", "m1") is None  # no store yet
    append_jsonl(path, [record(status="error", error="boom").to_dict()])
    assert index.latest("abc", "m1") is None  # errors are run again
    append_jsonl(path, [record(status="ok", metrics={"auc": 0.7}).to_dict(), record(config_hash="def", status="skipped", error="no CUDA").to_dict()])
    assert index.latest("abc", "m1").metrics == {"auc": 0.7}
    assert index.latest("abc", "m2") is None  # another machine
    assert index.latest("def", "m1").status == "skipped"
    append_jsonl(path, [record(metrics={"auc": 0.9}).to_dict()])
    assert index.latest("abc", "m1").metrics == {"auc": 0.9}  # the newest wins
    path.unlink()
    append_jsonl(path, [record(config_hash="xyz").to_dict()])  # replaced: read from the start
    assert index.latest("abc", "m1") is None and index.latest("xyz", "m1") is not None
