"""Nightly history: locked appends, one line per (run, key), history.md with noise-aware flags."""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.errors import UserError
from bench.gate import GateConfig
from bench.gate.__main__ import main as gate_main
from bench.history import (HISTORY_VERSION, append_history, history_changes, load_history, render_history,
                           update_history)

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "gate"))
from gate_frames import frame, healthy, row  # noqa: E402

TOL = dict(auc_tolerance=0.0005, throughput_tolerance=0.05)


def test_append_writes_one_line_per_row_with_run_fields(tmp_path):
    path = tmp_path / "history.jsonl"
    df = healthy()
    n = append_history(df, path, run_id="r1", timestamp="2025-01-01T00:00:00+00:00", git_sha="abc123")
    lines = path.read_text().splitlines()
    assert n == len(df) == len(lines)
    first = json.loads(lines[0])
    assert first["history_version"] == HISTORY_VERSION
    assert (first["run_id"], first["timestamp"], first["git_sha"]) == ("r1", "2025-01-01T00:00:00+00:00", "abc123")
    assert {"workload", "device", "backend", "batch_size", "auc", "throughput", "throughput_lo", "throughput_hi",
            "speedup_lo", "speedup_hi"} <= set(first)
    uint4 = next(json.loads(x) for x in lines if json.loads(x)["backend"] == "uint4")
    # no trial columns: the spread is scaled from the speedup CI (+-5% in these frames)
    assert uint4["throughput_lo"] == pytest.approx(uint4["throughput"] * 0.95)
    assert uint4["throughput_hi"] == pytest.approx(uint4["throughput"] * 1.05)


def test_trial_spread_columns_win_over_speedup_ci(tmp_path):
    path = tmp_path / "h.jsonl"
    append_history(frame(row("fp32", throughput_lo=90.0, throughput_hi=110.0)), path, run_id="r1")
    [line] = load_history(path).to_dict("records")
    assert (line["throughput_lo"], line["throughput_hi"]) == (90.0, 110.0)


def test_same_run_id_is_not_appended_twice(tmp_path):
    path = tmp_path / "history.jsonl"
    assert append_history(healthy(), path, run_id="r1") > 0
    assert append_history(healthy(), path, run_id="r1") == 0
    assert load_history(path)["run_id"].nunique() == 1


def _append_worker(args):
    path, run_id = args
    append_history(healthy(batch_sizes=(512, 1024, 2048, 4096)), Path(path), run_id=run_id)


def test_parallel_appends_never_tear_lines(tmp_path):
    path = tmp_path / "history.jsonl"
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_append_worker, [(str(path), f"r{i}") for i in range(8)])
    df = load_history(path)  # raises on a torn line
    assert df["run_id"].nunique() == 8 and len(df) == 8 * 4 * 7


def test_load_refuses_torn_and_newer_lines(tmp_path):
    path = tmp_path / "history.jsonl"
    append_history(healthy(), path, run_id="r1")
    with open(path, "a") as f:
        f.write('{"history_version": 1, "run_id": "r2", "wor')
    with pytest.raises(UserError, match=r"history.jsonl:\d+: not a history line"):
        load_history(path)
    path.write_text(json.dumps({"history_version": HISTORY_VERSION + 1, "run_id": "r9"}) + "\n")
    with pytest.raises(UserError, match="newer than this harness reads"):
        load_history(path)


def _history(tmp_path, *frames) -> pd.DataFrame:
    path = tmp_path / "history.jsonl"
    for i, df in enumerate(frames):
        append_history(df, path, run_id=f"r{i}", timestamp=f"2025-01-0{i + 1}T02:23:00+00:00", git_sha=f"sha{i}")
    return load_history(path)


def test_changes_inside_the_noise_are_not_flagged(tmp_path):
    a = healthy(batch_sizes=(2048,))
    b = a.copy()
    b["auc"] += 0.0002  # < tolerance 0.0005
    b["throughput"] *= 1.03  # < 5% and inside the +-5% trial spread
    changes = history_changes(_history(tmp_path, a, b), **TOL)
    assert not changes.empty and not changes["flagged"].any()


def test_auc_and_throughput_changes_beyond_the_noise_are_flagged(tmp_path):
    a = healthy(batch_sizes=(2048,))
    b = a.copy()
    is_uint4 = b["backend"] == "uint4"
    b.loc[is_uint4, "auc"] -= 0.003
    is_int8 = b["backend"] == "int8_tbe"
    b.loc[is_int8, "throughput"] *= 0.5
    changes = history_changes(_history(tmp_path, a, b), **TOL)
    flagged = changes[changes["flagged"]]
    assert sorted(zip(flagged["backend"], flagged["metric"])) == [("int8_tbe", "throughput"), ("uint4", "auc")]
    auc = flagged[flagged["metric"] == "auc"].iloc[0]
    assert auc["change"] == pytest.approx(-0.003)


def test_auc_change_within_a_wide_ci_is_not_flagged(tmp_path):
    a = frame(row("uint4", delta=-0.0004, half=0.004))
    b = frame(row("uint4", delta=-0.0004, half=0.004, auc=0.8031 - 0.0004 - 0.002))
    changes = history_changes(_history(tmp_path, a, b), **TOL)
    auc = changes[changes["metric"] == "auc"].iloc[0]
    assert auc["noise"] == pytest.approx(0.004) and not auc["flagged"]


def test_throughput_change_within_the_trial_spread_is_not_flagged(tmp_path):
    a = frame(row("fp32", throughput_lo=50_000.0, throughput_hi=150_000.0))
    b = frame(row("fp32", throughput=70_000.0, throughput_lo=40_000.0, throughput_hi=100_000.0))
    tput = history_changes(_history(tmp_path, a, b), **TOL).query("metric == 'throughput'").iloc[0]
    assert not tput["flagged"]  # -30%, but the trial ranges overlap


def test_status_change_and_config_change(tmp_path):
    a = frame(row("uint4"), row("int8_tbe", config_hash="h1"))
    b = frame(row("uint4", status="error", error="boom"), row("int8_tbe", config_hash="h2", throughput=1.0))
    changes = history_changes(_history(tmp_path, a, b), **TOL)
    by = {(r["backend"], r["metric"]): r for r in changes.to_dict("records")}
    assert by[("uint4", "status")]["flagged"] and "ok -> error" in by[("uint4", "status")]["note"]
    assert by[("int8_tbe", "config")]["flagged"] and "not comparable" in by[("int8_tbe", "config")]["note"]
    assert ("int8_tbe", "throughput") not in by  # not compared across configs


def test_render_shows_last_n_runs_and_flags(tmp_path):
    frames = [healthy(batch_sizes=(2048,)) for _ in range(5)]
    frames[-1].loc[frames[-1]["backend"] == "uint4", "auc"] -= 0.01
    md = render_history(_history(tmp_path, *frames), runs=3, **TOL)
    assert "Last 3 runs" in md
    assert "`r2`" in md and "`r4`" in md and "`r1`" not in md
    assert "## synthetic on cpu" in md and "### AUC" in md and "### Throughput (rows/s)" in md
    flag_lines = [line for line in md.splitlines() if "⚠" in line]
    assert len(flag_lines) == 1 and "uint4" in flag_lines[0] and "auc" in flag_lines[0]
    uint4_auc = next(line for line in md.splitlines() if line.startswith("| uint4 | 2048 |"))
    assert uint4_auc.rstrip(" |").endswith("0.7927")
    assert "git sha4" in md


def test_render_one_run_says_nothing_to_compare(tmp_path):
    md = render_history(_history(tmp_path, healthy()), runs=14, **TOL)
    assert "nothing to compare" in md


def test_update_history_appends_and_writes_history_md(tmp_path):
    cfg = GateConfig(history_runs=2)
    for i in range(3):
        md_path = update_history(healthy(), cfg, tmp_path, run_id=f"n{i}", git_sha="deadbeef")
    assert md_path == tmp_path / "history.md"
    assert load_history(tmp_path / "history.jsonl")["run_id"].nunique() == 3
    md = md_path.read_text()
    assert "Last 2 runs" in md and "`n0`" not in md


def test_update_history_honours_history_file(tmp_path):
    cfg = GateConfig(history_file=str(tmp_path / "elsewhere" / "h.jsonl"))
    md_path = update_history(healthy(), cfg, tmp_path / "reports", run_id="x", git_sha=None)
    assert md_path == tmp_path / "elsewhere" / "history.md"
    assert (tmp_path / "elsewhere" / "h.jsonl").is_file()


def test_gate_cli_history_flag(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    report = tmp_path / "report"
    report.mkdir()
    healthy().to_csv(report / "results.csv", index=False)
    assert gate_main([str(report), "--history", "--run-id", "a"]) == 0
    assert gate_main([str(report), "--history", "--run-id", "a"]) == 0  # same run: not appended twice
    assert gate_main([str(report), "--history", "--run-id", "b"]) == 0
    assert load_history(report / "history.jsonl")["run_id"].tolist().count("b") == len(healthy())
    assert (report / "history.md").is_file()


def test_machine_change_is_not_compared(tmp_path):
    a = frame(row("int8_tbe", fingerprint="m1"))
    b = frame(row("int8_tbe", fingerprint="m2", throughput=1.0))
    changes = history_changes(_history(tmp_path, a, b), **TOL)
    by = {(r["backend"], r["metric"]): r for r in changes.to_dict("records")}
    assert "fingerprint changed" in by[("int8_tbe", "config")]["note"]
    assert ("int8_tbe", "throughput") not in by


def test_append_cuts_a_torn_tail_left_by_a_killed_writer(tmp_path):
    path = tmp_path / "history.jsonl"
    append_history(frame(row("uint4")), path, run_id="r1")
    with open(path, "a") as f:
        f.write('{"history_version": 1, "run_id": "r2", "wor')  # killed mid-line
    append_history(frame(row("uint4")), path, run_id="r3")
    assert list(load_history(path)["run_id"]) == ["r1", "r3"]
