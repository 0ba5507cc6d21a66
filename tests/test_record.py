import json
import multiprocessing
from pathlib import Path

import pytest

from bench.io import append_jsonl, write_json_atomic
from bench.record import SCHEMA_VERSION, RunRecord
from bench.store import read_records, read_store, save_record

GOLDEN = Path(__file__).parent / "golden"


def record(**kw):
    base = dict(status="ok", workload="synthetic", backend="fp32", device="cpu", batch_size=8, config={"a": 1}, config_hash="abc", env={}, metrics={"auc": 0.8})
    return RunRecord(**{**base, **kw})


def test_golden_v1_record_still_reads():
    assert all(json.loads(line)["schema_version"] == 1 for line in (GOLDEN / "records_v1.jsonl").read_text().splitlines())
    records = read_records(GOLDEN / "records_v1.jsonl")  # migrated on read
    assert len(records) >= 2 and records[0].schema_version == SCHEMA_VERSION
    ok = next(r for r in records if r.status == "ok")
    for key in ("auc", "logloss", "ne", "n_eval", "oracle_auc", "throughput", "latency_ms", "embedding_bytes", "model_bytes", "peak_rss_bytes"):
        assert key in ok.metrics
    assert set(ok.metrics["latency_ms"]) == {"p50", "p90", "p99"}


def test_a_newer_schema_is_kept_and_named_not_read(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({**record().to_dict(), "schema_version": SCHEMA_VERSION + 1}) + "\n")
    found = read_store(path)
    assert found.records == [] and found.newer == [(1, SCHEMA_VERSION + 1)]
    assert "newer schema" in found.warning() and "upgrade bench" in found.warning()


def test_a_torn_last_line_is_named_not_read(tmp_path):
    path = tmp_path / "r.jsonl"
    good = json.dumps(record().to_dict())
    path.write_text(good + "\n" + '{"schema_version": 1, "sta')
    found = read_store(path)
    assert len(found.records) == 1 and found.torn_tail == (len(good) + 1, len('{"schema_version": 1, "sta'))


def test_save_record_writes_run_dir_and_store(tmp_path):
    save_record(record(), tmp_path / "run", tmp_path / "reports")
    save_record(record(backend="int8_tbe"), tmp_path / "run2", tmp_path / "reports")
    assert json.loads((tmp_path / "run" / "record.json").read_text())["backend"] == "fp32"
    assert [r.backend for r in read_records(tmp_path / "reports" / "records.jsonl")] == ["fp32", "int8_tbe"]
    assert not list((tmp_path / "run").glob("*.tmp"))


def test_nan_is_written_as_null_never_as_invalid_json(tmp_path):
    write_json_atomic(tmp_path / "x.json", {"auc": float("nan"), "x": [float("inf")]})
    assert json.loads((tmp_path / "x.json").read_text()) == {"auc": None, "x": [None]}


def _append_many(path, tag):
    for i in range(50):
        append_jsonl(path, [record(backend=f"{tag}{i}", metrics={"pad": "x" * 5000}).to_dict()])


def test_parallel_appends_never_interleave(tmp_path):
    path = tmp_path / "records.jsonl"
    procs = [multiprocessing.Process(target=_append_many, args=(path, t)) for t in "abcd"]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert len(read_records(path)) == 200
