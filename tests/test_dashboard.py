"""The nightly dashboard (`python -m bench dashboard`): history version 3, asv's steps confirmed by the
comparison engine, a page that carries its own JavaScript, and the command's exit codes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.config import CompareConfig
from bench.report.dashboard import build_site
from bench.report.history import HISTORY_VERSION, history_changes, load_history
from tests.conftest import run_bench
from tests.support.dashboard import planted_history

CFG = CompareConfig()
# A version-2 line as the nightly wrote it before version 3 (no stack, memory, sweep, report or gate).
V2_LINE = {"history_version": 2, "run_id": "old", "timestamp": "2025-06-01T02:23:00+00:00", "git_sha": "abc", "workload": "synthetic",
           "device": "cpu", "backend": "int8_tbe", "batch_size": 1024, "status": "ok", "auc": 0.8029, "auc_delta": -0.0002,
           "auc_delta_lo": -0.0004, "auc_delta_hi": 0.0, "throughput": 180000.0, "speedup": 1.8, "speedup_lo": 1.71,
           "speedup_hi": 1.89, "latency_p50_ms": 5.7, "latency_p99_ms": 7.4, "embedding_bytes": 16777216.0,
           "throughput_trials": [176400.0, 178200.0, 180000.0, 181800.0, 183600.0], "config_hash": "h-int8_tbe-1024",
           "fingerprint": "m0"}  # fmt: skip


def first_probe(lines: list[dict]) -> dict:
    return lines[0]["probe"]


def test_nightly_lines_carry_stack_memory_sweep_report_and_gate(tmp_path):
    path = planted_history(tmp_path, runs=2, failing_run=1)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert {x["history_version"] for x in lines} == {HISTORY_VERSION} == {7}
    assert first_probe(lines) == {"gemm_cpu_us": 1300.0, "gather_cpu_us": 200.0, "gemm_wall_us": 1300.0, "gather_wall_us": 200.0,
                                  "cpu_log_sd": 0.0, "wall_log_sd": 0.0, "readings": 4.0}  # 2 jobs, start and end
    first = lines[0]
    assert first["sweep"] == "nightly" and first["report"] == "nightly/20260101-022300"
    assert set(first["stack"]) == {"python", "torch", "fbgemm_gpu", "torchrec", "torchao", "fbgemm_isa"}
    assert first["peak_rss_bytes"] == 2**30
    by = {(x["run_id"], x["backend"]): x for x in lines}
    assert by[("run1", "int8_tbe")]["gate"] == "pass" and by[("run1", "int8_tbe")]["gate_passed"] is True
    assert by[("run2", "int8_tbe")]["gate"] == "fail" and by[("run2", "fp32")]["gate_passed"] is False


def test_version_2_lines_still_read(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(V2_LINE) + "\n")
    planted_history(tmp_path, runs=1)
    df = load_history(path)
    old = df[df["run_id"] == "old"].iloc[0]
    assert old["history_version"] == 7 and pd.isna(old["probe"]) and (old["sharding"], old["world_size"]) == ("none", 1) and all(pd.isna(old[k]) for k in ("stack", "sweep", "gate", "peak_rss_bytes"))
    assert old["throughput"] == 180000.0
    index, summary = build_site(tmp_path, tmp_path / "site", CFG)
    assert "sweep not recorded" in index.read_text()


@pytest.mark.slow
def test_the_planted_step_is_marked_where_history_md_flags_it(tmp_path):
    path = planted_history(tmp_path, runs=5, slow_run=4, slowdown=0.2)
    flagged = history_changes(load_history(path), CFG)
    flagged = flagged[flagged["flagged"].astype(bool)]
    # the throughput drops, and the speedup over fp32 (judged on its own paired intervals) with it
    assert sorted(zip(flagged["backend"], flagged["metric"])) == [("int8_tbe", "speedup"), ("int8_tbe", "throughput")]
    _, summary = build_site(tmp_path, tmp_path / "site", CFG)
    for c in flagged.to_dict("records"):  # everything history.md flags is marked, at the run it flags
        chart = {"throughput": "throughput", "speedup": "speedup", "auc": "auc_delta"}[c["metric"]]
        assert any(s["chart"].endswith(chart) and s["series"] == f"{c['backend']} bs={c['batch_size']}" and s["run_id"] == "run5"
                   for s in summary["steps"])
    steps = [(s["chart"].rsplit("-", 1)[-1], s["series"], s["run_id"]) for s in summary["steps"]]
    # throughput drops at run 5; the speedup over fp32 drops with it
    assert ("throughput", "int8_tbe bs=1024", "run5") in steps
    assert ("speedup", "int8_tbe bs=1024", "run5") in steps
    assert all(run == "run5" for _, _, run in steps)
    assert not any(chart == "auc_delta" or chart == "memory" for chart, _, _ in steps)


@pytest.mark.slow
def test_a_slowdown_in_the_middle_is_a_step_found_by_asv(tmp_path):
    planted_history(tmp_path, runs=6, slow_run=2, slowdown=0.2)  # runs 3-6 slow: a new level, not the newest run
    _, summary = build_site(tmp_path, tmp_path / "site", CFG)
    assert {(s["chart"].rsplit("-", 1)[-1], s["run_id"]) for s in summary["steps"]} == {("throughput", "run3"), ("speedup", "run3")}


@pytest.mark.slow
def test_a_flat_history_has_no_steps(tmp_path):
    planted_history(tmp_path, runs=5, slowdown=0.0)
    _, summary = build_site(tmp_path, tmp_path / "site", CFG)
    assert summary["steps"] == []
    charts = summary["charts"]
    assert len(charts) == 4
    assert {k.rsplit("-", 1)[-1]: v["series"] for k, v in charts.items()} == {"speedup": 1, "throughput": 2, "auc_delta": 1, "memory": 2}
    assert all(p == 5 for v in charts.values() for p in v["points"])


@pytest.mark.slow
def test_dashboard_command_writes_a_self_contained_page(tmp_path):
    planted_history(tmp_path, runs=3)
    done = run_bench("dashboard", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    index = tmp_path / "dashboard" / "index.html"
    assert f"dashboard: {index}" in done.stdout and "4 charts" in done.stdout
    page = index.read_text()
    assert "<script src" not in page and "cdn" not in page.lower().split("<script>")[0]
    assert len(page) > 3_000_000  # plotly.js is inside the page
    assert 'href="../nightly/20260101-022300/report.md"' in page
    assert "expire" in page


@pytest.mark.parametrize("order", ["options first", "overrides last"])
def test_dashboard_takes_overrides_before_or_after_out(tmp_path, order, capsys):
    """docs/dashboard.md writes `dashboard reports --out site/nightly compare.throughput_tolerance=0.1`."""
    from bench.report.dashboard import main

    planted_history(tmp_path, runs=3)
    out = ["--out", str(tmp_path / "site")]
    tolerance = ["compare.throughput_tolerance=0.1"]
    argv = [str(tmp_path), *out, *tolerance] if order == "options first" else [str(tmp_path), *tolerance, *out]
    assert main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "site" / "index.html").is_file()


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing", "is not a folder"),
    (lambda d: d, "no history.jsonl under"),
])
@pytest.mark.slow
def test_dashboard_bad_input_is_one_line_and_exit_2(tmp_path, make, message):
    done = run_bench("dashboard", str(make(tmp_path)), timeout=120)
    assert done.returncode == 2
    assert message in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.slow
def test_history_fields_rejudge_a_stored_report_folder_to_the_same_verdicts(tmp_path):
    from bench.gate.stored import history_fields

    planted_history(tmp_path, runs=2, failing_run=1)
    lines = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines() if '"run2"' in x]
    fields = history_fields(tmp_path / "nightly" / "20260102-022300")  # no result given: re-judged from the folder
    assert fields["gate_passed"] is False and fields["gate_passed"] == lines[0]["gate_passed"]
    assert {k[2]: v for k, v in fields["gate"].items()} == {x["backend"]: x["gate"] for x in lines}
