"""`python -m bench timing show|reset`: what the machine's timing caches hold, and emptying them, as a user
runs it (a subprocess; it must not need torch)."""

from __future__ import annotations

import json

from bench.pipeline import reruns
from tests.conftest import run_bench
from tests.test_reruns import KERNELS, SETTING


def planted_cache(cache):
    timing = cache / "timing"
    timing.mkdir(parents=True)
    for run in range(3):
        for job in ("a", "b"):
            reruns.append(timing / "m1-reruns.jsonl", reruns.entry(job, "code 1", SETTING, KERNELS, 256, "int8_tbe", 0.1 * run, 0.0, 4))
    reruns.append(timing / "m1-reruns.jsonl", reruns.entry("c", "code 1", SETTING, "fbgemm anyarch, cpuinfo fix disabled", 256,
                                                         "int8_tbe", -0.7, 0.0, 4))
    (timing / "m1.json").write_text(json.dumps({"version": 2, "processes": 4, "seconds": 61.0, "runs": [{"fbgemm": {
        "fbgemm_isa": "avx512_vnni", "cpuinfo_fix": "applied"}}], "measured": [{"setting": {"threads": 1, "clock": "thread_cpu"},
                                                                                 "process_sd": 0.03, "rerun_sd": 0.035}]}))
    (timing / "m1-kernels.json").write_text(json.dumps({"version": 1, "isa": {"fbgemm_isa": "anyarch"}, "verdicts": [
        {"family": "tbe_int8", "healthy": False, "measured_ns": 515.0, "expected_ns": 82.0, "unit": "ns/row"},
        {"family": "tbe_int4", "healthy": True, "measured_ns": 40.0, "expected_ns": 120.0, "unit": "ns/row", "stable": False}]}))
    (timing / "m1-pace.jsonl").write_text("".join(json.dumps({"v": 1, "setup": setup, "service_ms": 2.0, "rows_per_batch": 8.0}) + "\n"
                                                  for setup in ("s1", "s1", "s1", "s2")) +
                                          json.dumps({"v": 0, "setup": "s1", "service_ms": 2.0}) + "\n")  # an older version's line
    return timing


def test_show_lists_each_cache_and_reset_empties_the_rerun_log_then_everything(tmp_path):
    timing = planted_cache(tmp_path / "cache")
    shown = run_bench("timing", "show", "--cache-dir", str(tmp_path / "cache"))
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "calibration m1.json: 4 processes, 61 s" in out and "timed on: avx512_vnni (cpuinfo fix applied)" in out
    assert "kernel probe m1-kernels.json: FBGEMM anyarch, degraded: tbe_int8" in out
    assert "  tbe_int4: 40.0 ns/row (at most 120.0), unstable: probed again next run" in out
    assert "re-run log m1-reruns.jsonl: 7 lines of 3 jobs" in out
    assert f"{SETTING}; {KERNELS}: 2 jobs, between runs" in out and "fbgemm anyarch, cpuinfo fix disabled: 1 jobs, no job measured twice" in out
    assert "pace log m1-pace.jsonl: 5 served runs of 2 serving setups" in out
    assert "by log version 0: 1, 1: 4 (a job reads its own version's only)" in out
    assert "import torch" not in out and "torch" not in shown.stderr

    reset = run_bench("timing", "reset", "--cache-dir", str(tmp_path / "cache"))
    assert reset.returncode == 0 and reset.stdout.strip() == f"removed {timing / 'm1-reruns.jsonl'}"
    assert sorted(p.name for p in timing.iterdir()) == ["m1-kernels.json", "m1-pace.jsonl", "m1.json"]  # the pace log goes with --all
    everything = run_bench("timing", "reset", "--all", "--cache-dir", str(tmp_path / "cache"))
    assert everything.returncode == 0 and not list(timing.iterdir())
    assert "no timing cache yet" in run_bench("timing", "show", "--cache-dir", str(tmp_path / "none")).stdout


def test_a_bad_timing_action_is_one_line_and_exit_2(tmp_path):
    done = run_bench("timing", "forget", "--cache-dir", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("error: argument action: invalid choice: 'forget'") and "usage: python -m bench timing" in done.stderr
