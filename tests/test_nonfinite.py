"""NaN and infinity are data: one serialization path (bench.io.to_json) writes them as null and names
them, and a record whose every metric is NaN, inf or None goes through the store, the report, the
gate and the history without an exception."""

from __future__ import annotations

import json
import math

import pandas as pd

import pytest

from bench.config import CompareConfig
from bench.gate import evaluate_gate, load_gate_config
from bench.io import json_safe, to_json
from bench.record import RunRecord
from bench.report import write_report
from bench.results.table import results_table
from bench.report.history import append_history, history_rows, load_history, render_history
from bench.store import read_store, save_record

NAN, INF = float("nan"), float("inf")


def record(backend: str, **metrics) -> RunRecord:
    return RunRecord(status="ok", workload="synthetic", backend=backend, device="cpu", batch_size=256, config={"backend": {"name": backend}},
                     config_hash=f"h-{backend}", env={"fingerprint": "m1"}, metrics=metrics)  # fmt: skip


def broken(backend: str) -> RunRecord:
    """Every metric a reader looks at, non-finite or missing."""
    return record(
        backend, auc=NAN, auc_delta=INF, auc_delta_lo=-INF, auc_delta_hi=NAN, logloss=None, ne=NAN, n_eval=2048, oracle_auc=None,
        throughput=NAN, throughput_trials=[NAN, INF, 1.0], latency_ms={"p50": NAN, "p90": INF, "p99": None},
        speedup=INF, speedup_lo=NAN, speedup_hi=None, speedup_method="paired", stable=True, unstable_reason=None, trial_cv=NAN,
        embedding_bytes=NAN, model_bytes=INF, peak_rss_bytes=None, threads=1,
    )  # fmt: skip


def test_json_safe_names_what_it_replaced():
    replaced: dict[str, str] = {}
    data = json_safe({"a": NAN, "b": [1.0, INF], "c": {"d": -INF}, "e": None}, replaced=replaced)
    assert data == {"a": None, "b": [1.0, None], "c": {"d": None}, "e": None}
    assert replaced == {"a": "nan", "b[1]": "inf", "c.d": "-inf"}
    assert json.loads(to_json({"x": NAN})) == {"x": None}


@pytest.mark.slow
def test_a_record_of_non_finite_metrics_goes_through_store_report_gate_and_history(tmp_path):
    good = record("fp32", auc=0.8, auc_delta=0.0, auc_delta_lo=0.0, auc_delta_hi=0.0, throughput=1000.0, throughput_trials=[1000.0, 990.0],
                  latency_ms={"p50": 1.0, "p90": 1.1, "p99": 1.2}, embedding_bytes=100, model_bytes=200, peak_rss_bytes=300, n_eval=2048,
                  stable=True, unstable_reason=None, threads=1)  # fmt: skip
    reports = tmp_path / "reports"
    for r in (good, broken("int8_tbe")):
        save_record(r, tmp_path / "runs" / r.backend, reports)
    text = (reports / "records.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON: every other reader can parse it
    found = read_store(reports / "records.jsonl")
    assert not found.problems() and len(found.records) == 2
    stored = found.records[1]
    assert stored.metrics["auc"] is None and stored.metrics["non_finite"]["auc"] == "nan"
    assert stored.metrics["non_finite"]["latency_ms.p90"] == "inf" and stored.metrics["non_finite"]["auc_delta_lo"] == "-inf"

    df = results_table(found.records)
    assert math.isnan(df.set_index("backend").at["int8_tbe", "auc"])
    assert (write_report(found.records, tmp_path / "report")).is_file()

    result = evaluate_gate(df, load_gate_config("default"))
    int8 = [v for v in result.verdicts if v.backend == "int8_tbe"]
    assert int8 and all(v.verdict in ("inconclusive", "fail") for v in int8)  # no number to pass on

    rows = history_rows(found.records, run_id="r1", timestamp="t", git_sha=None)
    assert all(r.get("unstable_reason") is None for r in rows)  # a stable row's None is NaN in the frame: not copied as NaN
    history = tmp_path / "history.jsonl"
    assert append_history(found.records, history, run_id="r1") == 2
    assert append_history(found.records, history, run_id="r2") == 2
    loaded = load_history(history)
    assert isinstance(loaded, pd.DataFrame) and len(loaded) == 4
    assert "# Nightly history" in render_history(loaded, CompareConfig())
