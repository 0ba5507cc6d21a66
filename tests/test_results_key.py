"""The results' row key (`bench.results.key`): a sweep axis is one declaration.

`test_one_declared_axis_is_a_column_everywhere` adds one `Axis` line to a copy of the package's key.py
and checks that the axis becomes a column of report.md, results.csv, the gate's rows, the baseline
comparison and the history, with nothing else edited; the same records without the line collapse to
one row per backend (the newest record wins), which is what the added axis prevents.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.record import RunRecord
from bench.results import key
from bench.results.table import results_table

REPO = Path(__file__).resolve().parents[1]
GATE_FIXTURES = Path(__file__).parent / "fixtures" / "gate"
sys.path.insert(0, str(GATE_FIXTURES))
from gate_frames import record, row  # noqa: E402

ANCHOR = '    Axis("table_rows", config_value("workload.table_rows"), kind=int),\n'
NEW_AXIS = '    Axis("pool_size", config_value("workload.pool_size"), kind=int),\n'

# Runs against the copy: every view of the same records, printed as JSON.
SCRIPT = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from gate_frames import record, row
from bench.config import CompareConfig, GateConfig, RuleSet
from bench.gate import evaluate_gate
from bench.report import compare_table, write_report
from bench.results.table import results_table
from bench.report.history import append_history, history_changes, load_history
out = Path(sys.argv[1])

def runs(throughput_scale, day):
    found = []
    for pool in (64, 4096):
        for backend, speedup in (("fp32", 1.0), ("int8_tbe", 1.5 if pool == 64 else 2.5)):
            r = record(row(backend, speedup=speedup * throughput_scale), created_at=f"2025-01-0{day}T00:00:00+00:00")
            r["config"] = {"workload": {"pool_size": pool}}
            r["record_id"] += f"-{pool}-{day}"
            found.append(r)
    return found

def points(df):
    return sorted(set(df["pool_size"].dropna().astype(int))) if "pool_size" in df.columns else []

write_report(runs(1.0, 1), out / "report")
gate = evaluate_gate(results_table(runs(1.0, 1)), GateConfig(default_rules=RuleSet(min_speedup=2.0)))
compare = compare_table(runs(1.0, 2), runs(1.0, 1), CompareConfig())
append_history(runs(1.0, 1), out / "history.jsonl", run_id="r1", timestamp="2025-01-01T00:00:00+00:00", git_sha="a")
append_history(runs(1.3, 2), out / "history.jsonl", run_id="r2", timestamp="2025-01-02T00:00:00+00:00", git_sha="b")
history = load_history(out / "history.jsonl")
changes = history_changes(history, CompareConfig())
print(json.dumps({
    "gate_columns": list(gate.to_frame().columns),
    "gate": sorted([v.where, v.verdict] for v in gate.verdicts if v.backend == "int8_tbe"),
    "compare_columns": list(compare.columns), "compare_rows": len(compare),
    "history_columns": list(history.columns), "history_points": points(history),
    "changed_points": points(changes[changes["metric"] == "throughput"]),
}))
"""


def run_views(root: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root), "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(out), str(GATE_FIXTURES)], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_one_declared_axis_is_a_column_everywhere(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "bench", copy / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    source = (copy / "bench" / "results" / "key.py").read_text()
    assert ANCHOR in source
    (copy / "bench" / "results" / "key.py").write_text(source.replace(ANCHOR, ANCHOR + NEW_AXIS))
    views = run_views(copy, tmp_path / "out")

    report = (tmp_path / "out" / "report" / "report.md").read_text()
    assert "| backend | pool_size | batch |" in report  # report.md: a column of its section tables
    assert "## synthetic on cpu, pool_size 64" in report and "## synthetic on cpu, pool_size 4096" in report
    import pandas as pd

    csv = pd.read_csv(tmp_path / "out" / "report" / "results.csv")
    assert sorted(csv["pool_size"]) == [64, 64, 4096, 4096]  # results.csv: a column, one row per point
    assert "pool_size" in views["gate_columns"]  # the gate's rows
    assert views["gate"] == [["int8_tbe pool_size=4096 synthetic/cpu bs=2048", "pass"],
                             ["int8_tbe pool_size=64 synthetic/cpu bs=2048", "fail"]]
    assert "pool_size" in views["compare_columns"] and views["compare_rows"] == 4  # the baseline comparison
    assert "pool_size" in views["history_columns"] and views["history_points"] == [64, 4096]  # the history
    assert views["changed_points"] == [64, 4096]  # each point judged against its own earlier line


def test_without_the_axis_the_points_collapse(tmp_path):
    """The control: the package as it is keys the same records by backend alone, so one row per backend."""
    views = run_views(REPO, tmp_path / "out")
    csv = (tmp_path / "out" / "report" / "results.csv").read_text()
    assert "pool_size" not in csv and len(csv.strip().splitlines()) == 1 + 2
    assert views["compare_rows"] == 2 and "pool_size" not in views["history_columns"]


def scale(access: str, rows: int, backend: str) -> RunRecord:
    r = record(row(backend, speedup=1.5 if backend != "fp32" else 1.0, embedding_bytes=rows * 26 * (256 if backend == "fp32" else 68)))
    r.update(workload="synthetic_scale", record_id=f"{backend}-{access}-{rows}",
             config={"workload": {"name": "synthetic_scale", "access": access, "table_rows": rows}})
    return RunRecord.from_dict(r)


def test_scale_axes_key_the_rows_and_an_unswept_access_keys_as_none():
    records = [scale(a, n, b) for a in ("zipf", "uniform") for n in (10_000, 60_000) for b in ("fp32", "int8_tbe")]
    df = results_table(records)
    assert len(df) == 8 and df["workload"].eq("synthetic_scale").all()
    assert sorted(set(df["access"])) == ["uniform", "zipf"] and sorted(set(df["table_rows"])) == [10_000, 60_000]
    keys = {key.row_key(r) for r in df.to_dict("records")}
    assert ("synthetic_scale", "cpu", "int8_tbe", "none", 1, 2048, None, 10_000, None, None) in keys  # zipf is the unswept access
    assert ("synthetic_scale", "cpu", "int8_tbe", "none", 1, 2048, "uniform", 60_000, None, None) in keys  # threads: torch's default; no zoo family
    assert df["speedup"].dropna().round(6).tolist().count(1.5) == 4  # each against fp32 at its own point
    assert key.label("int8_tbe", access="uniform", table_rows=60_000) == "int8_tbe access=uniform table_rows=60000"
    assert key.label("int8_tbe", access="zipf") == "int8_tbe"


def test_a_row_without_placement_columns_reads_its_backend_cell():
    assert key.row_key({"workload": "w", "device": "cpu", "backend": "int8_tbe@row_wise×2", "batch_size": 8}) == (
        "w", "cpu", "int8_tbe", "row_wise", 2, 8, None, None, None, None)
    with pytest.raises(ValueError, match="batch_size 'x' is not an integer"):
        key.row_key({"workload": "w", "device": "cpu", "backend": "fp32", "batch_size": "x"})


def test_the_reference_of_a_row_is_fp32_unsharded_at_the_same_point():
    k = ("w", "cpu", "int8_tbe", "row_wise", 2, 8, "uniform", 100)
    assert key.reference_key(k) == ("w", "cpu", "fp32", "none", 1, 8, "uniform", 100)
    assert key.is_reference(key.reference_key(k)) and not key.is_reference(k)


def test_a_scale_sweeps_report_shows_its_axes_as_columns(tmp_path):
    from bench.report import write_report

    records = [scale(a, n, b) for a in ("zipf", "uniform") for n in (10_000, 60_000) for b in ("fp32", "int8_tbe")]
    report = write_report(records, tmp_path).read_text()
    assert "| backend | access | table_rows | batch |" in report
    assert "## synthetic_scale on cpu, access uniform, table_rows 60000" in report
    assert "## Scale: speedup against table bytes and batch size" in report and "| uniform |" in report
    assert "newest record per workload, device, backend, sharding, ranks, batch size, access and table_rows" in report


def test_a_history_line_written_before_the_further_axes_is_compared_with_the_next_run(tmp_path):
    """History lines of version 6 written before `access` and `table_rows` were axes lack both keys: they
    key as unswept, as the same job's new line does, so the next run is judged against them."""
    from bench.config import CompareConfig
    from bench.report.history import append_history, history_changes, load_history

    def runs(scale):
        return [record(row("fp32", speedup=scale)), record(row("int8_tbe", speedup=1.5 * scale))]

    path = tmp_path / "history.jsonl"
    append_history(runs(1.0), path, run_id="r1", timestamp="2025-01-01T00:00:00+00:00", git_sha="a")
    before = [{**{k: v for k, v in json.loads(line).items() if k not in ("access", "table_rows", "probe")}, "history_version": 6}
              for line in path.read_text().splitlines()]  # as version 6 wrote them (version 7 added the run's probe)
    path.write_text("".join(json.dumps(line) + "\n" for line in before))
    append_history(runs(1.3), path, run_id="r2", timestamp="2025-01-02T00:00:00+00:00", git_sha="b")
    changes = history_changes(load_history(path), CompareConfig())
    mine = changes[changes["backend"] == "int8_tbe"]
    assert "throughput" in set(mine["metric"]) and not mine["note"].str.contains("no earlier run").any()


def threaded(backend: str, threads, created: str, measure=None) -> RunRecord:
    r = record(row(backend, speedup=1.5 if backend != "fp32" else 1.0))
    r.update(record_id=f"{backend}-{threads}-{measure}", created_at=created,
             config={"threads": threads, **({"measure": measure} if measure else {})})
    return RunRecord.from_dict(r)


def test_threads_key_the_rows_and_torch_s_default_keys_as_none():
    """recommend stores a backend's jobs at 1 and 2 threads: two rows, neither the newest winning over the other; a job
    that left threads to torch (null), or a sweep that pins one count for every job, keys as before the axis existed."""
    records = [threaded(b, t, f"2026-11-2{t}T00:00:00+00:00") for b in ("fp32", "int8_tbe") for t in (1, 2)]
    df = results_table(records)
    assert len(df) == 4 and sorted(df[df["backend"] == "int8_tbe"]["threads"]) == [1, 2]
    threads = key.KEY.index("threads")
    assert {key.row_key(r)[threads] for r in df.to_dict("records")} == {1, 2}
    assert key.label("int8_tbe", threads=2) == "int8_tbe threads=2"
    assert key.key_of(threaded("fp32", None, "2026-11-20T00:00:00+00:00"))[threads] is None
    pinned = results_table([threaded(b, 16, "2026-11-21T00:00:00+00:00") for b in ("fp32", "int8_tbe")])
    assert pinned["threads"].isna().all() and "threads" not in key.shown_axes(pinned)  # a sweep that pins one count keys as before
    parts = [threaded("int8_tbe", 1, "2026-11-23T00:00:00+00:00", measure) for measure in ("facts", "served")]
    assert len(results_table(records + parts)) == 4  # a part of a job (recommend's facts, served times) is never a row


def test_the_serving_key_is_the_results_key_and_the_serving_axes():
    """Every axis serving has comes from bench.results.key: the results key (threads, sharding, world size, access, table
    rows among it) and scenario, bound, batcher wait and workers."""
    from bench.results.serving_table import SERVE_KEY, serve_table

    assert key.SERVE_KEY == SERVE_KEY == [*key.KEY, "scenario", "bound_ms", "max_wait_ms", "workers"]
    assert {"sharding", "world_size", "access", "table_rows", "threads"} <= set(SERVE_KEY)

    def served(threads: int) -> RunRecord:
        r = record(row("int8_tbe"))
        r.update(record_id=f"s{threads}", metrics={"max_qps": 100.0 * threads},
                 config={"threads": threads, "serve": {"scenario": "server", "bound_ms": 60.0, "max_wait_ms": 2.0, "workers": 1}})
        return RunRecord.from_dict(r)
    table = serve_table([served(1), served(2)])
    assert sorted(table["threads"]) == [1, 2] and sorted(table["max_qps"]) == [100.0, 200.0]
