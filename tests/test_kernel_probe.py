"""The kernel probe's judging (bench.devices.cpu_probe) on injected timings: interleaved rounds, the
median ratio's interval against bounds set from what a fallback costs, and a verdict cached only when two
probes agree. The real probe runs in tests/test_kernel_path.py and in benchmarks/scripts/probe_stability.py
(its short mode below)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.devices import cpu_probe
from bench.devices.cpu_probe import (EAGER, FAMILIES, GATHER, MAX_EAGER_RATIO, MAX_GATHER_RATIO, ROUNDS, Timed, cached_verdicts,
                                         judge, time_rounds)

REPO = Path(__file__).resolve().parents[1]
ISA = {"fbgemm_isa": "avx2", "fbgemm_isa_shortfall": None}
NOISE_20 = [1.0, 1.2, 0.8, 1.1, 0.9, 1.15, 0.85, 1.05, 0.95]  # one probe's rounds, +-20% around the level
GATHER_NS = 20.0
HEALTHY = {EAGER: 0.8, "tbe_fp32": 1.7, "tbe_fp16": 0.9, "tbe_int8": 1.0, "tbe_int4": 1.4, "tbe_int2": 1.3}  # x the gather


def probe_of(levels: dict[str, float], noise: list[float] = NOISE_20, gather_noise: list[float] | None = None) -> Timed:
    """One probe's per-round figures: each lookup at `levels` times a gather of its rows, the round's noise on
    the kernel (and, with `gather_noise`, on the gather), and the GEMMs healthy."""
    gather = [GATHER_NS * g for g in (gather_noise or [1.0] * len(noise))]
    timed: Timed = {}
    for family, level in {**HEALTHY, **levels}.items():
        timed[GATHER + family] = list(gather)
        timed[family] = [g * level * n for g, n in zip(gather, noise)]
    timed["gemm_fp32"], timed["gemm_int8"] = [10.0] * len(noise), [1.5] * len(noise)
    return timed


def verdicts(*probes: Timed, env: dict[str, str] | None = None) -> dict[str, cpu_probe.Verdict]:
    return {v.family: v for v in judge(list(probes), None, ISA, env or {})}


def test_a_healthy_stack_reads_healthy_and_stable_with_each_probes_figures_and_interval():
    found = verdicts(probe_of({}), probe_of({}, noise=list(reversed(NOISE_20))))
    assert set(found) == set(FAMILIES) and all(v.healthy and v.stable for v in found.values())
    int4 = found["tbe_int4"]
    assert len(int4.probes) == 2 and int4.probes[0]["outcome"] == "healthy"
    ratio, lo, hi, bound = int4.probes[0]["checks"][GATHER + "tbe_int4"]
    assert ratio == pytest.approx(1.4) and lo < ratio < hi and bound == MAX_GATHER_RATIO
    assert int4.probes[0]["checks"][EAGER][3] == MAX_EAGER_RATIO  # a narrower row is judged against the eager lookup too
    assert GATHER + "tbe_fp32" in found["tbe_fp32"].probes[0]["checks"] and EAGER not in found["tbe_fp32"].probes[0]["checks"]
    # the most it should take: the tighter bound, in ns a row
    assert int4.expected_ns == pytest.approx(min(MAX_GATHER_RATIO * GATHER_NS, MAX_EAGER_RATIO * GATHER_NS * 0.8 * 1.0), rel=0.1)


def test_20_percent_noise_on_the_slowest_healthy_figure_is_not_flagged():
    """The slowest healthy lookup (4x the gather) with +-20% round to round, a 20% shift between the probes,
    and the gather's own time moving 20%: healthy, stable."""
    first = probe_of({"tbe_fp32": 4.0, "tbe_int4": 1.6}, gather_noise=[1.2, 0.8] * 4 + [1.0])
    second = probe_of({"tbe_fp32": 4.8, "tbe_int4": 1.6 * 1.2}, noise=list(reversed(NOISE_20)))
    found = verdicts(first, second)
    assert not [v.family for v in found.values() if not v.healthy or not v.stable]


@pytest.mark.parametrize("family", ["tbe_fp32", "tbe_int8", EAGER])
def test_a_lookup_twice_the_slowest_healthy_figure_is_flagged_in_both_probes(family):
    found = verdicts(probe_of({family: 8.0}, noise=[1.0, 1.1, 0.9] * 3), probe_of({family: 8.0}))
    v = found[family]
    assert not v.healthy and v.stable and [p["outcome"] for p in v.probes] == ["degraded", "degraded"]
    assert v.why.startswith(f"slower than {MAX_GATHER_RATIO:g}x a plain gather of its rows (20.0 ns a row): 8.00x [")
    assert "over 9 rounds" in v.why and "fallback path" in v.cause
    assert all(found[f].healthy for f in found if f != family)


def test_reference_kernels_are_flagged_with_the_switch_that_caused_them():
    fallback = {f: 15.0 for f in HEALTHY}
    found = verdicts(probe_of(fallback), probe_of(fallback), env={"FBGEMM_NO_ASMJIT": "1"})
    assert sorted(f for f, v in found.items() if not v.healthy) == sorted(HEALTHY)
    assert all("FBGEMM_NO_ASMJIT=1 switches" in found[f].cause and found[f].fix == "unset FBGEMM_NO_ASMJIT" for f in HEALTHY)


def test_a_narrower_row_slower_than_the_eager_lookup_is_flagged_against_it():
    found = verdicts(probe_of({"tbe_int8": 3.5 * 0.8}, noise=[1.0] * 9), probe_of({"tbe_int8": 3.5 * 0.8}, noise=[1.0] * 9))
    assert not found["tbe_int8"].healthy and f"{MAX_EAGER_RATIO:g}x torch's fp32 EmbeddingBag" in found["tbe_int8"].why
    assert f"{MAX_GATHER_RATIO:g}x a plain gather" not in found["tbe_int8"].why  # 2.8x the gather is within that bound


def test_a_verdict_that_flips_on_the_re_probe_is_not_degraded_and_says_so():
    found = verdicts(probe_of({"tbe_int4": 15.0}), probe_of({}))
    v = found["tbe_int4"]
    assert v.healthy and not v.stable and [p["outcome"] for p in v.probes] == ["degraded", "healthy"]
    assert v.why.startswith("unstable: the probes read degraded (15.00x [") and "probed again next run" in v.why


def test_an_interval_that_straddles_its_bound_in_both_probes_is_undecided_and_unstable():
    straddle = [MAX_GATHER_RATIO * n / 1.2 for n in (0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.0, 1.2)]
    found = verdicts(probe_of({"tbe_int2": 1.0}, noise=straddle), probe_of({"tbe_int2": 1.0}, noise=straddle))
    assert found["tbe_int2"].healthy and not found["tbe_int2"].stable
    assert [p["outcome"] for p in found["tbe_int2"].probes] == ["undecided", "undecided"]


def test_rounds_interleave_kernel_and_reference_and_alternate_their_order():
    calls: list[str] = []
    now = [0]
    cost = {"a": 10, "ref_a": 5, "b": 40, "ref_b": 20}

    def call(name):
        def run():
            calls.append(name)
            now[0] += cost[name]
        return run

    pairs = [("a", call("a"), "ref_a", call("ref_a"), 1.0), ("b", call("b"), "ref_b", call("ref_b"), 2.0)]
    timed = time_rounds(pairs, rounds=2, calls=1, clock=lambda: now[0], warm=0)
    assert calls == ["ref_a", "a", "ref_b", "b", "b", "ref_b", "a", "ref_a"]
    assert timed == {"a": [10.0, 10.0], "ref_a": [5.0, 5.0], "b": [20.0, 20.0], "ref_b": [10.0, 10.0]}


@pytest.mark.slow  # imports fbgemm_gpu (the instruction-set check) or the report's libraries
def test_only_a_stable_verdict_is_cached_and_an_unstable_one_is_probed_again_next_run(tmp_path):
    """The cache keeps every verdict with each probe's per-round figures; the next run reuses the stable
    ones and probes the unstable family again, and caches it once its two probes agree."""
    path = tmp_path / "kernels.json"
    script = [probe_of({"tbe_int4": 15.0}), probe_of({}), probe_of({}), probe_of({})]
    asked: list[list[str]] = []

    def measure(families: list[str]) -> Timed:
        asked.append(list(families))
        return script.pop(0)

    first = cpu_probe.health(path, None, measure=measure)
    assert asked == [list(FAMILIES)] * 2 and not first.degraded() and [v.family for v in first.unstable()] == ["tbe_int4"]
    assert first.as_env()["unstable"] == ["tbe_int4"] and first.as_env()["degraded"] == []
    data = json.loads(path.read_text())
    assert data["version"] == cpu_probe.VERSION and len(data["timed"]) == 2 and len(data["timed"][0]["tbe_int4"]) == ROUNDS
    assert "tbe_int4" not in cached_verdicts(path) and len(cached_verdicts(path)) == len(FAMILIES) - 1

    second = cpu_probe.health(path, None, measure=measure)
    assert asked[2:] == [["tbe_int4"]] * 2 and all(v.stable and v.healthy for v in second.verdicts)
    third = cpu_probe.health(path, None, measure=measure)
    assert len(asked) == 4 and [v.family for v in third.verdicts] == list(FAMILIES)  # all cached: nothing probed


@pytest.mark.slow  # imports fbgemm_gpu (the instruction-set check)
def test_a_fallback_both_probes_confirm_is_cached_degraded_and_read_back_without_probing(tmp_path):
    path = tmp_path / "kernels.json"
    fallback = probe_of({"tbe_int8": 15.0})
    first = cpu_probe.health(path, None, measure=lambda families: fallback)
    assert [v.family for v in first.degraded()] == ["tbe_int8"] and not first.unstable()
    again = cpu_probe.health(path, None, measure=lambda families: pytest.fail(f"probed {families} again"))
    assert [v.family for v in again.degraded()] == ["tbe_int8"] and again.degraded()[0].why == first.degraded()[0].why


def test_a_cache_of_the_previous_version_is_probed_again(tmp_path):
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps({"version": 1, "verdicts": [{"family": EAGER, "healthy": True, "measured_ns": 1.0,
                                                            "expected_ns": None, "unit": "ns/row"}]}))
    assert cached_verdicts(path) == {}


@pytest.mark.slow  # imports fbgemm_gpu (the instruction-set check) or the report's libraries
def test_the_report_says_which_family_read_unstable_and_puts_no_kernel_health_banner_for_it():
    from bench.record import RunRecord
    from bench.report.kernels import banner_lines

    found = verdicts(probe_of({"tbe_int4": 15.0}), probe_of({}))
    health = cpu_probe.Health(list(found.values()), ISA, probed=True).as_env()
    assert health["unstable"] == ["tbe_int4"] and health["degraded"] == []
    assert health["verdicts"]["tbe_int4"]["probes"][0]["checks"][GATHER + "tbe_int4"][0] == pytest.approx(15.0)
    record = RunRecord(status="ok", workload="synthetic", backend="uint4", device="cpu", batch_size=1024, config={},
                       config_hash="h", env={"kernel_health": health}, metrics={"kernel_families": ["tbe_int4"]})
    lines = banner_lines([record])
    assert len(lines) == 2 and lines[0].startswith("> **Kernel probe:** read unstable, so not counted as degraded")
    assert "tbe_int4 on cpu (the host): the probes read degraded (15.00x [" in lines[0] and "Kernel health:" not in lines[0]


# --------------------------------------------------------------- the benchmark script, in its short mode


@pytest.mark.slow
def test_the_stability_script_runs_in_its_short_mode_and_stops_its_hog():
    done = subprocess.run([sys.executable, "benchmarks/scripts/probe_stability.py", "--probes", "1", "--tiny"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for case in ("idle", "beside a one-thread CPU hog", "FBGEMM_NO_ASMJIT=1"):
        assert f"== {case}" in out, out
    assert "-- idle: false fallback verdicts: " in out and "== false fallback verdicts, idle and beside the hog: " in out
    assert out.count("decision 1 (") == 3 and "  tbe_int4 " in out and "gather " in out  # each family's figures, per case
    pid = int(out.split("hog pid ")[1].split()[0])
    assert f"hog pid {pid} stopped" in out and not Path(f"/proc/{pid}").exists()  # stopped and reaped
