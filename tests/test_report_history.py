"""Nightly history (`bench.report.history`): one appender, raw trials per line, changes judged by the
comparison engine, versioned lines."""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.config import CompareConfig, GateConfig
from bench.errors import UserError
from bench.gate.__main__ import main as gate_main
from bench.report.history import (
    HISTORY_VERSION,
    append_history,
    history_changes,
    history_path,
    load_history,
    render_history,
    update_history,
)

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "gate"))
from gate_frames import frame, healthy, row, write_records  # noqa: E402
from gate_frames import records as frame_records  # noqa: E402

CFG = CompareConfig()  # AUC tolerance 0.0005, throughput tolerance 5%, 95% intervals


def records(df: pd.DataFrame, probe_scale: float = 1.0, **kwargs) -> list[dict]:
    """The frame's records with the machine probes every job now takes at its start and end (the reference GEMM
    and gather, µs), on a machine `probe_scale` times as slow."""
    recs = frame_records(df, **kwargs)
    reading = {f"{p}_{c}_us": t * probe_scale for p, t in (("gemm", 1300.0), ("gather", 200.0)) for c in ("cpu", "wall")}
    for r in recs:
        if r["status"] == "ok":
            r["metrics"]["machine"] = {"reference_start": dict(reading), "reference_end": dict(reading)}
    return recs


def shift_delta(df: pd.DataFrame, backend: str, by: float) -> None:
    """A real change of what the backend's quantization costs: its AUC and its ΔAUC (with its interval) move."""
    for c in ("auc", "auc_delta", "auc_delta_lo", "auc_delta_hi"):
        df.loc[df["backend"] == backend, c] += by


def test_append_writes_one_line_per_key_with_the_raw_trials(tmp_path):
    path = tmp_path / "history.jsonl"
    df = healthy()
    n = append_history(records(df), path, run_id="r1", timestamp="2025-01-01T00:00:00+00:00", git_sha="abc123")
    lines = path.read_text().splitlines()
    assert n == len(df) == len(lines)
    first = json.loads(lines[0])
    assert first["history_version"] == HISTORY_VERSION == 7
    assert first["probe"]["gemm_cpu_us"] == 1300.0 and first["probe"]["readings"] == 2 * len(df)  # the run's machine probe
    assert (first["run_id"], first["timestamp"], first["git_sha"]) == ("r1", "2025-01-01T00:00:00+00:00", "abc123")
    assert {"workload", "device", "backend", "sharding", "world_size", "batch_size", "auc", "throughput", "throughput_trials", "speedup_lo",
            "speedup_hi", "config_hash", "fingerprint"} <= set(first)
    assert "throughput_lo" not in first  # v1's spread rebuilt from the speedup CI is gone
    uint4 = next(json.loads(x) for x in lines if json.loads(x)["backend"] == "uint4")
    assert uint4["throughput_trials"] == pytest.approx([uint4["throughput"] * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)])


def test_same_run_id_is_not_appended_twice(tmp_path):
    path = tmp_path / "history.jsonl"
    assert append_history(records(healthy()), path, run_id="r1") > 0
    assert append_history(records(healthy()), path, run_id="r1") == 0
    assert load_history(path)["run_id"].nunique() == 1


def test_history_appends_through_the_record_stores_appender():
    import inspect

    import bench.report.history as history

    source = inspect.getsource(history)
    assert "append_jsonl(" in source and "flock" not in source and "fcntl" not in source


def _append_worker(args):
    path, run_id = args
    append_history(records(healthy(batch_sizes=(512, 1024, 2048, 4096))), Path(path), run_id=run_id)


@pytest.mark.slow
def test_parallel_appends_never_tear_lines(tmp_path):
    path = tmp_path / "history.jsonl"
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_append_worker, [(str(path), f"r{i}") for i in range(8)])
    df = load_history(path)  # raises on a torn line
    assert df["run_id"].nunique() == 8 and len(df) == 8 * 4 * 7


def test_load_skips_torn_and_newer_lines_and_names_them(tmp_path, caplog):
    path = tmp_path / "history.jsonl"
    append_history(records(healthy()), path, run_id="r1")
    whole = len(load_history(path))
    with open(path, "a") as f:
        f.write(json.dumps({"history_version": HISTORY_VERSION + 1, "run_id": "r9"}) + "\n")
        f.write('{"history_version": 2, "run_id": "r2", "wor')
    assert len(load_history(path)) == whole and set(load_history(path)["run_id"]) == {"r1"}
    assert f"line {whole + 1} (history_version {HISTORY_VERSION + 1}: upgrade bench to read it)" in caplog.text
    assert "a torn last line" in caplog.text
    append_history(records(healthy()), path, run_id="r3")  # the next append copies the torn tail aside and cuts it
    assert set(load_history(path)["run_id"]) == {"r1", "r3"}
    assert b'"run_id": "r2", "wor' in path.with_name("history.jsonl.damaged").read_bytes()


V1_LINE = {"history_version": 1, "run_id": "old", "timestamp": "2024-12-31T02:23:00+00:00", "git_sha": "sha-old",
           "workload": "synthetic", "device": "cpu", "backend": "uint4", "batch_size": 2048, "status": "ok",
           "auc": 0.8027, "auc_delta": -0.0004, "auc_delta_lo": -0.0006, "auc_delta_hi": -0.0002,
           "throughput": 160000.0, "throughput_lo": 152000.0, "throughput_hi": 168000.0, "speedup": 1.6,
           "speedup_lo": 1.52, "speedup_hi": 1.68, "latency_p50_ms": 12.8, "latency_p99_ms": 16.6,
           "embedding_bytes": 8650752.0, "fingerprint": "m0", "config_hash": "h-uint4-2048"}  # fmt: skip


def test_v1_lines_migrate_and_their_throughput_is_shown_not_judged(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(V1_LINE) + "\n")
    append_history(records(frame(row("uint4", delta=-0.0004, half=0.0002, speedup=0.5))), path, run_id="new")
    df = load_history(path)
    old = df[df["run_id"] == "old"].iloc[0]
    assert old["throughput_trials"] is None and "throughput_lo" not in df.columns
    by = {r["metric"]: r for r in history_changes(df, CFG).to_dict("records")}
    assert not by["throughput"]["flagged"] and "not judged: no machine probe recorded on the base side" in by["throughput"]["note"]
    assert by["throughput"]["change"] == pytest.approx(50_000 / 160_000 - 1)  # the point is still shown
    assert by["auc"]["change"] == pytest.approx(0.0)


def _history(tmp_path, *runs) -> pd.DataFrame:
    path = tmp_path / "history.jsonl"
    for i, recs in enumerate(runs):
        append_history(recs, path, run_id=f"r{i}", timestamp=f"2025-01-0{i + 1}T02:23:00+00:00", git_sha=f"sha{i}")
    return load_history(path)


def test_changes_inside_the_noise_are_not_flagged(tmp_path):
    a = healthy(batch_sizes=(2048,))
    b = a.copy()
    b["auc"] += 0.0002  # < tolerance 0.0005
    b["throughput"] *= 1.03  # < 5%
    changes = history_changes(_history(tmp_path, records(a), records(b)), CFG)
    assert not changes.empty and not changes["flagged"].any()


def test_auc_and_throughput_changes_beyond_the_noise_are_flagged(tmp_path):
    a = healthy(batch_sizes=(2048,))
    b = a.copy()
    shift_delta(b, "uint4", -0.003)
    b.loc[b["backend"] == "int8_tbe", "throughput"] *= 0.5
    changes = history_changes(_history(tmp_path, records(a), records(b)), CFG)
    flagged = changes[changes["flagged"]]
    # int8_tbe halved while fp32 held: its throughput and its speedup over fp32 both fell
    assert sorted(zip(flagged["backend"], flagged["metric"])) == [("int8_tbe", "speedup"), ("int8_tbe", "throughput"), ("uint4", "auc")]
    by = {r["metric"]: r for r in flagged.to_dict("records")}
    assert by["auc"]["change"] == pytest.approx(-0.003) and "worse" in by["auc"]["note"]
    assert by["throughput"]["change"] == pytest.approx(-0.5) and "throughput -50.0%" in by["throughput"]["note"]


def test_auc_change_within_a_wide_ci_is_not_flagged(tmp_path):
    a = frame(row("uint4", delta=-0.0004, half=0.004))
    b = frame(row("uint4", delta=-0.0024, half=0.004))
    auc = history_changes(_history(tmp_path, records(a), records(b)), CFG).query("metric == 'auc'").iloc[0]
    assert auc["change"] == pytest.approx(-0.002) and auc["noise"] == pytest.approx(0.004 * 2**0.5) and not auc["flagged"]


def test_throughput_change_within_the_trial_spread_is_not_flagged(tmp_path):
    a = records(frame(row("fp32")), spread=0.5)
    b = records(frame(row("fp32", throughput=70_000.0)), spread=0.5)
    tput = history_changes(_history(tmp_path, a, b), CFG).query("metric == 'throughput'").iloc[0]
    assert not tput["flagged"] and "holds 1" in tput["note"]  # -30%, but the noisy trials cannot tell


def test_status_change_and_config_change(tmp_path):
    a = frame(row("uint4"), row("int8_tbe", config_hash="h1"))
    b = frame(row("uint4", status="error", error="boom"), row("int8_tbe", config_hash="h2", throughput=1.0))
    changes = history_changes(_history(tmp_path, records(a), records(b)), CFG)
    by = {(r["backend"], r["metric"]): r for r in changes.to_dict("records")}
    assert by[("uint4", "status")]["flagged"] and "ok -> error" in by[("uint4", "status")]["note"]
    assert by[("int8_tbe", "config")]["flagged"] and "config hash h1 -> h2" in by[("int8_tbe", "config")]["note"]
    assert by[("int8_tbe", "throughput")]["flagged"]  # compared anyway, with the note beside it


def test_machine_change_is_not_compared(tmp_path):
    a = frame(row("int8_tbe", fingerprint="m1"))
    b = frame(row("int8_tbe", fingerprint="m2", throughput=1.0))
    changes = history_changes(_history(tmp_path, records(a), records(b)), CFG)
    by = {(r["backend"], r["metric"]): r for r in changes.to_dict("records")}
    assert "machine differs (fingerprint m1 -> m2)" in by[("int8_tbe", "config")]["note"]
    assert ("int8_tbe", "throughput") not in by


def test_tolerances_come_from_the_compare_config(tmp_path):
    a = healthy(batch_sizes=(2048,))
    b = a.copy()
    b["throughput"] *= 0.9  # -10%: beyond 5%, within 20%
    history = _history(tmp_path, records(a), records(b))
    assert history_changes(history, CFG)["flagged"].any()
    assert not history_changes(history, CompareConfig(throughput_tolerance=0.2))["flagged"].any()


def test_render_shows_last_n_runs_and_flags(tmp_path):
    frames = [healthy(batch_sizes=(2048,)) for _ in range(5)]
    shift_delta(frames[-1], "uint4", -0.01)
    md = render_history(_history(tmp_path, *map(records, frames)), CFG, runs=3)
    assert "Last 3 runs" in md
    assert "`r2`" in md and "`r4`" in md and "`r1`" not in md
    assert "## synthetic on cpu" in md and "### AUC" in md and "### Throughput (rows/s)" in md
    flag_lines = [line for line in md.splitlines() if "⚠" in line]
    assert len(flag_lines) == 1 and "uint4" in flag_lines[0] and "auc" in flag_lines[0]
    uint4_auc = next(line for line in md.splitlines() if line.startswith("| uint4 | 2048 |"))
    assert uint4_auc.rstrip(" |").endswith("0.7927")
    assert "git sha4" in md and "AUC tolerance 0.0005, throughput tolerance 5%" in md


def test_render_one_run_says_nothing_to_compare(tmp_path):
    md = render_history(_history(tmp_path, records(healthy())), CFG, runs=14)
    assert "nothing to compare" in md


def test_update_history_appends_and_writes_history_md(tmp_path):
    for i in range(3):
        md_path = update_history(records(healthy()), tmp_path / "history.jsonl", CFG, runs=2, run_id=f"n{i}", git_sha="deadbeef")
    assert md_path == tmp_path / "history.md"
    assert load_history(tmp_path / "history.jsonl")["run_id"].nunique() == 3
    md = md_path.read_text()
    assert "Last 2 runs" in md and "`n0`" not in md


def test_history_path_honours_history_file(tmp_path):
    assert history_path(None, tmp_path) == tmp_path / "history.jsonl"
    cfg = GateConfig(history_file=str(tmp_path / "elsewhere" / "h.jsonl"))
    assert history_path(cfg.history_file, tmp_path / "reports") == tmp_path / "elsewhere" / "h.jsonl"


@pytest.mark.slow
def test_gate_cli_history_flag_reads_the_report_records(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    report = write_records(tmp_path / "report", healthy())
    assert gate_main([str(report), "--history", "--run-id", "a"]) == 0
    assert gate_main([str(report), "--history", "--run-id", "a"]) == 0  # same run: not appended twice
    assert gate_main([str(report), "--history", "--run-id", "b"]) == 0
    assert load_history(report / "history.jsonl")["run_id"].tolist().count("b") == len(healthy())
    assert (report / "history.md").is_file()


@pytest.mark.slow
def test_gate_cli_history_appends_where_the_nightly_does(tmp_path, monkeypatch):
    """README: the nightly history lives in reports/ (gate.history_file=); `bench.gate DIR --history` on
    reports/nightly/latest appends there, not inside the report folder."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    from bench.report.publish import point_latest

    stamp = write_records(tmp_path / "reports" / "nightly" / "20260101-000000", healthy())
    point_latest(stamp.parent, stamp.name)
    assert gate_main([str(tmp_path / "reports" / "nightly" / "latest"), "--history", "--run-id", "a"]) == 0
    assert load_history(tmp_path / "reports" / "history.jsonl")["run_id"].tolist() == ["a"] * len(healthy())
    assert (tmp_path / "reports" / "history.md").is_file() and not (stamp / "history.jsonl").exists()
    elsewhere = tmp_path / "h" / "history.jsonl"
    assert gate_main([str(stamp), f"gate.history_file={elsewhere}", "--history", "--run-id", "b"]) == 0
    assert load_history(elsewhere)["run_id"].unique().tolist() == ["b"]


def test_append_cuts_a_torn_tail_left_by_a_killed_writer(tmp_path):
    path = tmp_path / "history.jsonl"
    append_history(records(frame(row("uint4"))), path, run_id="r1")
    with open(path, "a") as f:
        f.write('{"history_version": 2, "run_id": "r2", "wor')  # killed mid-line
    append_history(records(frame(row("uint4"))), path, run_id="r3")
    assert list(load_history(path)["run_id"]) == ["r1", "r3"]


@pytest.mark.slow
def test_report_never_imports_the_gate():
    import subprocess

    code = ("import sys, bench.report, bench.report.history, bench.report.baseline, bench.report.__main__; "
            "bad = [m for m in sys.modules if m.startswith('bench.gate')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


V2_LINE = {**{k: v for k, v in V1_LINE.items() if k not in ("throughput_lo", "throughput_hi")}, "history_version": 2,
           "run_id": "v2", "throughput_trials": [158000.0, 160000.0, 162000.0], "stable": False, "trial_cv": 0.02,
           "unstable_reason": "the paired speedup's 95% interval spans 12% of it (limit 10%)"}


def test_v2_and_v3_lines_read_as_v4_and_a_flag_only_the_ratio_raised_is_dropped(tmp_path):
    path = tmp_path / "history.jsonl"
    both = {**V2_LINE, "run_id": "v2b", "unstable_reason": "throughput varied 14% between trials (limit 10%); "
            "the paired speedup's 95% interval spans 12% of it (limit 10%)"}
    path.write_text(json.dumps(V2_LINE) + "\n" + json.dumps(both) + "\n")
    df = load_history(path).set_index("run_id")
    assert bool(df.at["v2", "stable"]) is True and pd.isna(df.at["v2", "unstable_reason"])
    assert bool(df.at["v2b", "stable"]) is False and df.at["v2b", "unstable_reason"] == "throughput varied 14% between trials (limit 10%)"
    assert pd.isna(df.at["v2", "timing_setting"]) and pd.isna(df.at["v2", "speedup_process_sd"])


def _with(recs: list[dict], backend: str, **metrics) -> list[dict]:
    for r in recs:
        if r["backend"] == backend:
            r["metrics"].update(metrics)
    return recs


def test_a_speedup_change_is_judged_even_where_the_throughput_is_flagged(tmp_path):
    base = _with(records(frame(row("fp32"), row("int8_tbe", speedup=1.60))), "int8_tbe", speedup=1.60, speedup_lo=1.56, speedup_hi=1.64)
    new = _with(records(frame(row("fp32"), row("int8_tbe", speedup=1.20))), "int8_tbe", speedup=1.20, speedup_lo=1.17, speedup_hi=1.23,
                stable=False, unstable_reason="throughput varied 30%")
    by = {(r["backend"], r["metric"]): r for r in history_changes(_history(tmp_path, base, new), CFG).to_dict("records")}
    assert not by[("int8_tbe", "throughput")]["flagged"] and "too noisy" in by[("int8_tbe", "throughput")]["note"]
    speedup = by[("int8_tbe", "speedup")]
    assert speedup["flagged"] and speedup["change"] == pytest.approx(1.20 / 1.60 - 1) and "worse" in speedup["note"]


def test_runs_timed_with_different_settings_are_not_compared(tmp_path):
    def timed(speedup, threads, clock):
        recs = records(frame(row("fp32"), row("int8_tbe", speedup=speedup)))
        for r in recs:
            r["metrics"]["timing_setting"] = {"threads": threads, "clock": clock}
        return recs

    by = {(r["backend"], r["metric"]): r for r in history_changes(
        _history(tmp_path, timed(1.6, 2, "wall"), timed(1.2, 1, "thread_cpu")), CFG).to_dict("records")}
    assert by[("int8_tbe", "config")]["note"] == (
        "no earlier run alike: run r0 differs (timing setting 2 threads, wall clock -> 1 thread, thread_cpu clock): not compared")
    assert ("int8_tbe", "speedup") not in by and ("int8_tbe", "throughput") not in by
    lines = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert {x["timing_setting"] for x in lines} == {"2 threads, wall clock", "1 thread, thread_cpu clock"}


def _sized(recs: list[dict], eval_samples: int, trials: int) -> list[dict]:
    """Records of a run with a workload and timing config (a +preset=tiny run differs in both)."""
    for r in recs:
        r["config"] = {"workload": {"name": "synthetic", "eval_samples": eval_samples}, "model": {"name": "small"},
                       "timing": {"trials": trials}}
    return recs


def test_a_full_nightly_is_judged_only_against_full_ones_and_names_what_the_tiny_ones_differ_in(tmp_path):
    """Issue 35: after tiny nightlies the full one saw only 'timing setting differs'; now it passes them
    over, is judged against the last full run, and history.md says which config differed."""
    full_a = healthy(batch_sizes=(2048,))
    full_b = full_a.copy()
    shift_delta(full_b, "uint4", -0.01)  # a real change between the two full runs
    runs = [_sized(records(full_a), 100000, 5), *(_sized(records(healthy(batch_sizes=(2048,))), 8192, 2) for _ in range(3)),
            _sized(records(full_b), 100000, 5)]
    history = _history(tmp_path, *runs)
    changes = history_changes(history, CFG)
    notes = {(r["backend"], r["metric"]): r["note"] for r in changes.to_dict("records")}
    assert "auc_delta -0.0100" in notes[("uint4", "auc")]  # judged against r0, the last full run
    passed = notes[("uint4", "config")]
    assert passed.startswith("passed over runs r1, r2, r3 (workload config ") and "timing config " in passed
    assert not changes[changes["metric"] == "config"]["flagged"].any()
    assert "model config" not in passed and passed.endswith("since run r0, the newest alike")
    md = render_history(history, CFG)
    assert "- `r0`: 2025-01-01T02:23:00+00:00, git sha0, kind A" in md and "- `r1`: 2025-01-02T02:23:00+00:00, git sha1, kind B" in md
    assert "- `r4`: 2025-01-05T02:23:00+00:00, git sha4, kind A" in md
    assert ("`r4` (kind A) is judged against `r0`, the newest earlier run of its kind; runs of other kinds passed over: "
            "`r1`, `r2`, `r3` (other timing config, workload config).") in md
    flagged = [line for line in md.splitlines() if "⚠" in line]
    assert len(flagged) == 1 and "| uint4 |" in flagged[0] and "auc_delta -0.0100" in flagged[0]  # the passing over is said once, above


def test_a_run_with_no_earlier_run_alike_says_what_differs_and_compares_nothing(tmp_path):
    tiny = _sized(records(healthy(batch_sizes=(2048,))), 8192, 2)
    full = healthy(batch_sizes=(2048,))
    full["throughput"] *= 3
    changes = history_changes(_history(tmp_path, tiny, _sized(records(full), 100000, 5)), CFG)
    assert set(changes["metric"]) == {"config"}  # no throughput verdict across unlike runs
    note = changes["note"].iloc[0]
    assert note.startswith("no earlier run alike: run r0 differs (workload config ") and "; timing config " in note and note.endswith(": not compared")
    md = render_history(_history(tmp_path / "again", tiny, _sized(records(full), 100000, 5)), CFG)
    assert ("`r1` (kind B) has no earlier run of its kind shown here: nothing is compared; runs of other kinds passed over: `r0` "
            "(other timing config, workload config).") in md


def test_a_tiny_run_has_a_history_of_its_own_and_its_md_beside_it(tmp_path):
    """+preset=tiny sets gate.history_name=history-tiny.jsonl: the nightly's history.jsonl stays free of tiny runs."""
    from bench.config.compose import compose_dictconfig
    from bench.report.history import history_md_path

    tiny = compose_dictconfig(["+sweep=nightly", "+preset=tiny"]).gate
    plain = compose_dictconfig(["+sweep=nightly"]).gate
    assert (plain.history_name, tiny.history_name) == ("history.jsonl", "history-tiny.jsonl")
    path = history_path(tiny.history_file, tmp_path, tiny.history_name)
    assert path == tmp_path / "history-tiny.jsonl"
    md = update_history(records(healthy()), path, CFG, run_id="t")
    assert md == history_md_path(path) == tmp_path / "history-tiny.md" and md.is_file()
    assert not (tmp_path / "history.jsonl").exists() and not (tmp_path / "history.md").exists()
    assert history_md_path(tmp_path / "history.jsonl") == tmp_path / "history.md"


def test_a_schema_key_at_its_legacy_value_does_not_split_a_series(tmp_path):
    """`model.output_key` (null) and `backend.mlp_output` joined the schema later: a run whose records carry
    them at the value that measures what older records measured is of the same kind as those records."""
    path = tmp_path / "history.jsonl"
    old, new = records(healthy()), records(healthy())
    for r in old:
        r["config"] = {**(r.get("config") or {}), "model": {"name": "small", "embedding_dim": 16}}
    for r in new:
        r["config"] = {**(r.get("config") or {}), "model": {"name": "small", "embedding_dim": 16, "output_key": None}}
    append_history(old, path, run_id="r1", timestamp="2025-01-01T00:00:00+00:00", git_sha="a")
    append_history(new, path, run_id="r2", timestamp="2025-01-02T00:00:00+00:00", git_sha="b")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert {line["model_config"] for line in lines if line["run_id"] == "r1"} == {line["model_config"] for line in lines if line["run_id"] == "r2"}
