"""Every axis of a sweep is a column of its own (issue 35): `backend` names the backend alone, a sharded
run's `sharding`, `world_size` and `route` sit beside it; reports still name the row `backend@sharding×N`,
the gate still judges it by its backend's rules, and a history line written before keeps its key."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from bench.config import CompareConfig, GateConfig, RuleSet
from bench.gate import evaluate_gate
from bench.gate.stored import row_verdicts
from bench.report import write_report
from bench.results.table import results_table
from bench.report.history import HISTORY_VERSION, append_history, history_changes, load_history
from bench.results.key import label, read_label

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "gate"))
from gate_frames import frame, record, row  # noqa: E402


def sharded(r: dict, sharding: str, world_size: int, route: str) -> dict:
    """The record of `r` run with `sharding` over `world_size` ranks, as the sharded route stores it."""
    r = record(r)
    r["config"] = {"sharding": {"name": sharding}, "world_size": world_size}
    r["metrics"]["sharding"] = {"route": route, "world_size": world_size}
    r["record_id"] += f"-{sharding}-{world_size}"
    return r


def sweep() -> list[dict]:
    return [record(row("fp32")), record(row("fake_quant", speedup=0.7)),
            sharded(row("fake_quant", speedup=0.6), "auto", 2, "process_group"),
            sharded(row("int8_tbe", speedup=1.5), "row_wise", 2, "one_process")]


def test_results_csv_has_a_column_per_axis_and_the_backend_alone(tmp_path):
    write_report(sweep(), tmp_path)
    df = pd.read_csv(tmp_path / "results.csv")
    assert df[["backend", "sharding", "world_size", "route"]].values.tolist() == [
        ["fp32", "none", 1, "single"], ["fake_quant", "none", 1, "single"],
        ["fake_quant", "auto", 2, "process_group"], ["int8_tbe", "row_wise", 2, "one_process"]]
    two = df[df["world_size"] == 2]  # what a pandas user filters on
    assert set(two["backend"]) == {"fake_quant", "int8_tbe"}
    # a sharded row's speedup is against fp32 unsharded in one process, as before
    assert two.set_index("backend").at["int8_tbe", "speedup"] == df.set_index(["backend", "sharding"]).at[("fp32", "none"), "speedup"] * 1.5
    text = (tmp_path / "report.md").read_text()
    assert "| fake_quant@auto×2 |" in text and "| int8_tbe@row_wise×2 |" in text  # the report's tables still tell them apart


def test_the_gate_judges_a_sharded_row_by_its_backends_rules_and_names_it_by_its_label():
    rules = GateConfig(rules={"int8_tbe": RuleSet(min_speedup=1.2)}, default_rules=RuleSet(min_speedup=10.0))
    result = evaluate_gate(results_table(sweep()), rules)
    sharded_int8 = next(v for v in result.verdicts if v.backend == "int8_tbe")
    assert (sharded_int8.sharding, sharded_int8.world_size, sharded_int8.verdict) == ("row_wise", 2, "pass")
    assert sharded_int8.where.startswith("int8_tbe@row_wise×2 ") and "default_rules" not in sharded_int8.reason
    keys = row_verdicts(result)
    # the key's further axes (access, table_rows, threads, family) were not swept here: None
    assert ("synthetic", "cpu", "fake_quant", "none", 1, 2048, None, None, None, None) in keys
    assert ("synthetic", "cpu", "fake_quant", "auto", 2, 2048, None, None, None, None) in keys


def test_a_results_csv_written_before_the_columns_is_still_gated_by_backend():
    old = frame(row("fp32"), row("int8_tbe", speedup=1.5))  # no sharding columns, as results.csv had before
    assert "sharding" not in old.columns
    old.loc[1, "backend"] = "int8_tbe@row_wise×2"
    v = next(v for v in evaluate_gate(old, GateConfig(rules={"int8_tbe": RuleSet(min_speedup=1.2)})).verdicts if v.backend != "fp32")
    assert (v.backend, v.sharding, v.world_size, v.verdict) == ("int8_tbe", "row_wise", 2, "pass")


def test_labels_round_trip():
    assert label("int8_tbe") == "int8_tbe" and label("int8_tbe", "row_wise", 2) == "int8_tbe@row_wise×2"
    assert read_label("int8_tbe@row_wise×2") == ("int8_tbe", "row_wise", 2)
    assert read_label("fp32") == ("fp32", "none", 1) and read_label("odd@name") == ("odd@name", "none", 1)


def test_a_version_5_line_of_a_sharded_job_keeps_its_key_and_is_compared_with_the_next_run(tmp_path):
    """A v5 line stored `fake_quant@auto×2` in `backend`; it migrates to the three columns, so the next
    run of the same job is judged against it rather than starting a new series."""
    path = tmp_path / "history.jsonl"
    append_history(sweep(), path, run_id="r1", timestamp="2025-01-01T00:00:00+00:00", git_sha="a")
    v5 = []
    for line in map(json.loads, path.read_text().splitlines()):
        name = label(line.pop("backend"), line.pop("sharding"), line.pop("world_size"))
        v5.append({**line, "backend": name, "history_version": 5})
    assert "fake_quant@auto×2" in {x["backend"] for x in v5}
    path.write_text("".join(json.dumps(x) + "\n" for x in v5))
    append_history(sweep(), path, run_id="r2", timestamp="2025-01-02T00:00:00+00:00", git_sha="b")
    history = load_history(path)
    assert HISTORY_VERSION == 7 and set(history["history_version"]) == {7}
    assert len(history.drop_duplicates(["backend", "sharding", "world_size"])) == 4  # no line split off into a key of its own
    changes = history_changes(history, CompareConfig())
    mine = changes[(changes["backend"] == "fake_quant") & (changes["sharding"] == "auto")]
    assert set(mine["metric"]) >= {"throughput"} and not mine["note"].str.contains("no earlier run").any()
