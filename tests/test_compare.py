"""The comparison engine (`bench.comparison`): planted samples and figures with known answers."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from bench.comparison import (
    BETTER,
    DIFFERENCE,
    NOT_COMPARABLE,
    RATIO,
    SAME,
    WORSE,
    Figure,
    accuracy_change,
    auc_figure,
    compare_metrics,
    delta_figure,
    difference_change,
    finite,
    identity,
    machine_readings,
    normalized_throughput_change,
    probe_shift,
    ratio,
    run_probe,
    samples,
    speedup_change,
    throughput_change,
)
from bench.config import CompareConfig

CFG = CompareConfig()  # auc_tolerance 0.0005, throughput_tolerance 0.05, alpha 0.05


def steady(center: float, n: int = 7, spread: float = 0.005) -> list[float]:
    """n trials spread evenly over center * (1 +- spread)."""
    return list(center * (1 + np.linspace(-spread, spread, n)))


# --------------------------------------------------------------------------- one number


@pytest.mark.parametrize("value, expected", [(1, 1.0), ("2.5", 2.5), (None, None), (float("nan"), None),
                                             (float("inf"), None), ("text", None), (True, None), (np.float32(0.5), 0.5)])
def test_finite_is_the_one_cell_converter(value, expected):
    assert finite(value) == expected


def test_samples_keep_positive_finite_numbers_only():
    assert samples([1.0, None, -2.0, 0.0, float("nan"), "3"]) == [1.0, 3.0]
    assert samples(None) == [] and samples(float("nan")) == []


def test_the_engine_imports_no_pandas_hydra_gate_or_report():
    import subprocess

    code = ("import sys, bench.comparison; bad = [m for m in sys.modules if m.split('.')[0] in ('pandas', 'hydra', 'omegaconf') "
            "or m.startswith(('bench.gate', 'bench.report', 'bench.config'))]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# -------------------------------------------------------------------------- throughput


def test_ratio_of_medians_with_a_bracketing_interval():
    f = ratio(steady(200.0), steady(100.0))
    assert f.value == pytest.approx(2.0)
    assert f.lo <= 2.0 <= f.hi and f.hi - f.lo < 0.03
    assert f.level == 0.95


def test_planted_slowdown_beyond_noise_and_tolerance_is_worse():
    c = throughput_change(steady(80.0), steady(100.0), tolerance=0.05, alpha=0.05)
    assert (c.kind, c.verdict) == (RATIO, WORSE)
    assert c.value == pytest.approx(0.8) and c.moved == pytest.approx(-0.2)
    assert c.hi < 1.0 and c.noise == pytest.approx((c.hi - c.lo) / 2)
    assert c.base == pytest.approx(100.0) and c.new == pytest.approx(80.0)
    assert "clears 1 ± 5%" in c.reason and c.flagged


def test_planted_speedup_is_better_and_lower_is_better_flips_it():
    assert throughput_change(steady(120.0), steady(100.0), tolerance=0.05, alpha=0.05).verdict == BETTER
    latency = throughput_change(steady(120.0), steady(100.0), tolerance=0.05, alpha=0.05, higher_is_better=False)
    assert latency.verdict == WORSE


def test_steady_small_change_is_within_the_tolerance():
    c = throughput_change(steady(97.0), steady(100.0), tolerance=0.05, alpha=0.05)
    assert c.hi < 1.0  # the trials alone would call it slower
    assert c.verdict == SAME and "no more than the tolerance" in c.reason
    assert throughput_change(steady(97.0), steady(100.0), tolerance=0.0, alpha=0.05).verdict == WORSE


def test_noisy_trials_hide_a_large_move():
    noisy_base = [50.0, 150.0, 100.0, 60.0, 140.0]
    c = throughput_change([70.0, 120.0, 40.0, 90.0, 60.0], noisy_base, tolerance=0.05, alpha=0.05)
    assert c.lo <= 1.0 <= c.hi and c.verdict == SAME and "holds 1" in c.reason


def test_missing_trials_are_not_comparable_but_keep_the_point():
    c = throughput_change([], steady(100.0), tolerance=0.05, alpha=0.05, new_point=50.0, base_point=100.0)
    assert c.verdict == NOT_COMPARABLE and "new side" in c.reason
    assert c.value == pytest.approx(0.5) and c.lo is None and not c.flagged


# ------------------------------------------------------------------------------- figures


def test_figure_orders_bounds_and_drops_half_intervals():
    assert Figure.of(1, 3, 2).interval == (2.0, 3.0)
    assert Figure.of(1, None, 2).interval is None
    assert Figure.of(-0.0004, -0.0006, -0.0002).scaled(-1.0).interval == pytest.approx((0.0002, 0.0006))


def test_half_width_rescales_a_95_interval_to_another_alpha():
    f = Figure(0.0, -1.96, 1.96, 0.95)
    assert f.half_width(0.05) == pytest.approx(1.96)
    assert f.half_width(0.10) == pytest.approx(1.6449, abs=1e-3)
    assert Figure(0.0).half_width(0.05) == 0.0


def test_difference_beyond_noise_and_tolerance():
    base, new = Figure(0.8000, 0.7998, 0.8002), Figure(0.7970, 0.7968, 0.7972)
    c = difference_change(new, base, tolerance=0.0005, alpha=0.05)
    assert (c.kind, c.verdict) == (DIFFERENCE, WORSE)
    assert c.value == pytest.approx(-0.003) and c.noise == pytest.approx(0.0002)
    assert (c.lo, c.hi) == pytest.approx((-0.0032, -0.0028))


def test_difference_inside_the_noise_or_the_tolerance_is_same():
    wide = difference_change(Figure(0.798, 0.794, 0.802), Figure(0.800, 0.796, 0.804), tolerance=0.0005, alpha=0.05)
    assert wide.verdict == SAME and wide.noise == pytest.approx(0.004) and "holds 0" in wide.reason
    tight = difference_change(Figure(0.8003), Figure(0.8000), tolerance=0.0005, alpha=0.05)
    assert tight.verdict == SAME and "no more than the tolerance" in tight.reason
    assert difference_change(Figure(0.8003), Figure(0.8000), tolerance=0.0, alpha=0.05).verdict == BETTER


def test_noise_is_the_larger_half_width_of_the_paired_figures():
    c = difference_change(Figure(0.79, 0.789, 0.791), Figure(0.80, 0.797, 0.803), tolerance=0.0, alpha=0.05)
    assert c.noise == pytest.approx(0.003) and c.verdict == WORSE


def test_missing_value_is_not_comparable():
    c = difference_change(Figure(None), Figure(0.8), tolerance=0.0005, alpha=0.05)
    assert c.verdict == NOT_COMPARABLE and "new side" in c.reason and c.value is None


def test_auc_figure_borrows_the_paired_delta_interval():
    f = auc_figure({"auc": 0.7996, "auc_delta": -0.0004, "auc_delta_lo": -0.0006, "auc_delta_hi": -0.0001})
    assert f.value == 0.7996 and f.interval == pytest.approx((0.7994, 0.7999))
    assert auc_figure({"auc": 0.8}).interval is None and auc_figure({}).value is None


# --------------------------------------------------------------------------------- runs


def reading(gemm: float, gather: float) -> dict[str, float]:
    """One reference reading (bench.measure.noise.reference_speed's figures, µs) on both clocks."""
    return {"gemm_cpu_us": gemm, "gather_cpu_us": gather, "gemm_wall_us": gemm, "gather_wall_us": gather}


PROBE = run_probe([reading(1300, 200)] * 8)  # a quiet machine: every reading alike
CPU = {"timing_setting": {"threads": 1, "clock": "thread_cpu"}}


def test_compare_metrics_on_record_shaped_metrics():
    base = {**CPU, "probe": PROBE, "throughput": 100.0, "throughput_trials": steady(100.0), "auc": 0.80, "auc_delta": -0.001,
            "auc_delta_lo": -0.0011, "auc_delta_hi": -0.0009, "speedup": 1.5, "speedup_lo": 1.45, "speedup_hi": 1.55}
    new = {**base, "throughput": 50.0, "throughput_trials": steady(50.0), "auc": 0.79, "auc_delta": -0.011,
           "auc_delta_lo": -0.0111, "auc_delta_hi": -0.0109, "speedup": 0.75, "speedup_lo": 0.72, "speedup_hi": 0.78}
    changes = compare_metrics(new, base, CFG)
    assert {m: c.verdict for m, c in changes.items()} == {"throughput": WORSE, "auc": WORSE, "speedup": WORSE}
    assert changes["auc"].metric == "auc_delta" and changes["auc"].value == pytest.approx(-0.01)
    assert changes["speedup"].value == pytest.approx(0.5)
    same = compare_metrics(base, base, CFG)
    assert {c.verdict for c in same.values()} == {SAME}


# ------------------------------------------------------------------------ paired speedups


def test_speedup_change_carries_both_runs_intervals_on_the_log_scale():
    """Issue 53's identical runs: fp32_tbe's paired speedup 1.22x then 1.27x is no change."""
    base, new = Figure(1.22, 1.15, 1.29), Figure(1.27, 1.20, 1.34)
    c = speedup_change(new, base, tolerance=0.05, alpha=0.05)
    sd = math.hypot(math.log(1.29 / 1.15), math.log(1.34 / 1.20)) / 2 / 1.959964
    assert c.value == pytest.approx(1.27 / 1.22)
    assert (c.lo, c.hi) == pytest.approx((c.value * math.exp(-1.959964 * sd), c.value * math.exp(1.959964 * sd)), rel=1e-5)
    assert c.verdict == SAME and "holds 1" in c.reason


def test_a_planted_twenty_percent_slowdown_of_the_speedup_is_slower():
    base = Figure(1.22, 1.20, 1.24)
    c = speedup_change(Figure(1.22 / 1.2, 1.0, 1.04), base, tolerance=0.05, alpha=0.05)
    assert c.verdict == WORSE and c.hi < 0.95 and "clears 1 ± 5%" in c.reason


def test_an_interval_that_excludes_1_but_reaches_into_the_tolerance_is_no_verdict():
    c = speedup_change(Figure(1.16, 1.14, 1.18), Figure(1.22, 1.20, 1.24), tolerance=0.05, alpha=0.05)
    assert c.hi < 1.0 and c.lo < 0.95 < c.hi  # excludes 1, yet reaches into 1 ± 5%
    assert c.verdict == SAME and "no more than the tolerance" in c.reason


def test_fp32s_speedup_is_1_by_definition_and_has_no_change():
    fp32 = {**CPU, "probe": PROBE, "throughput": 100.0, "throughput_trials": steady(100.0), "auc": 0.80, "auc_delta": 0.0,
            "auc_delta_lo": 0.0, "auc_delta_hi": 0.0, "speedup": None}
    changes = compare_metrics({**fp32, "auc": 0.79}, fp32, CFG)
    assert "speedup" not in changes
    assert changes["auc"].metric == "auc" and changes["auc"].verdict == WORSE  # its own AUC: the reference moved


# ---------------------------------------------------------------------------- ΔAUC


def test_delta_auc_change_adds_both_runs_half_widths():
    base = {"auc": 0.80, "auc_delta": -0.0004, "auc_delta_lo": -0.0007, "auc_delta_hi": -0.0001}
    new = {"auc": 0.80, "auc_delta": -0.0012, "auc_delta_lo": -0.0016, "auc_delta_hi": -0.0008}
    c = accuracy_change(new, base, CompareConfig(auc_tolerance=0.0))
    assert c.metric == "auc_delta" and c.value == pytest.approx(-0.0008)
    assert c.noise == pytest.approx(math.hypot(0.0003, 0.0004))
    assert c.verdict == WORSE
    assert delta_figure({"auc_delta": 0.0, "auc_delta_lo": 0.0, "auc_delta_hi": 0.0}) is None  # fp32's own 0


# -------------------------------------------------------------------------- machine probes


def test_a_runs_probe_is_the_median_of_its_readings_with_their_spread():
    p = run_probe([reading(1300, 200), reading(1400, 240), reading(1200, 190), {"gemm_cpu_us": None}])
    assert p["gemm_cpu_us"] == 1300 and p["gather_cpu_us"] == 200 and p["readings"] == 3
    logs = [math.log(math.sqrt(a * b)) for a, b in ((1300, 200), (1400, 240), (1200, 190))]
    assert p["cpu_log_sd"] == pytest.approx(float(np.std(logs, ddof=1)))
    assert run_probe([]) is None
    assert machine_readings({"machine": {"reference_start": reading(1, 2), "reference_end": reading(3, 4)}}) == [reading(1, 2), reading(3, 4)]
    assert machine_readings({}) == []


def test_probe_shift_normalizes_and_refuses_machines_that_moved():
    slower = run_probe([reading(1300 * 1.25, 200 * 1.25)] * 8)
    shift = probe_shift(slower, PROBE, "cpu", 0.10)
    assert shift.factor == pytest.approx(1.25) and "differ by +25% (GEMM, more than 10%)" in shift.why_not
    assert shift.moves == "GEMM +25%, gather +25%"
    agree = probe_shift(run_probe([reading(1300 * 1.04, 200 * 0.98)] * 8), PROBE, "cpu", 0.10)
    assert agree.why_not is None and agree.factor == pytest.approx(math.sqrt(1.04 * 0.98))
    assert "no machine probe recorded on the base side" in probe_shift(PROBE, None, "cpu", 0.1).why_not


def test_absolute_throughput_is_judged_only_where_the_probes_agree():
    base = {**CPU, "probe": PROBE, "throughput": 100.0, "throughput_trials": steady(100.0)}
    host_slower = {**CPU, "probe": run_probe([reading(1300 * 1.25, 200 * 1.25)] * 8), "throughput": 80.0,
                   "throughput_trials": steady(80.0)}
    c = normalized_throughput_change(host_slower, base, CFG)
    assert c.verdict == NOT_COMPARABLE and not c.flagged
    assert "not judged: the machines' probes differ by +25%" in c.reason and c.raw == pytest.approx(0.8)
    # told to accept a 30% move, the normalized ratio shows the backend did not change: 0.8 x 1.25
    c = normalized_throughput_change(host_slower, base, CompareConfig(probe_tolerance=0.3))
    assert c.value == pytest.approx(1.0) and c.factor == pytest.approx(1.25) and c.verdict == SAME
    # the same machine, a real 20% drop
    c = normalized_throughput_change({**base, "throughput": 80.0, "throughput_trials": steady(80.0)}, base, CFG)
    assert c.verdict == WORSE and c.hi < 0.95
    assert "no machine probe" in normalized_throughput_change({**base, "probe": None}, base, CFG).reason
    gpu = normalized_throughput_change({**base, "device": "cuda", "throughput": 80.0, "throughput_trials": steady(80.0)}, base, CFG)
    assert gpu.verdict == NOT_COMPARABLE and "not the cuda device" in gpu.reason


def test_the_probes_spread_over_a_run_widens_the_normalized_interval():
    busy = run_probe([reading(1300 * f, 200 * f) for f in (0.8, 1.0, 1.2, 0.9, 1.1, 1.0)])
    base = {**CPU, "probe": busy, "throughput": 100.0, "throughput_trials": steady(100.0)}
    new = {**base, "throughput": 88.0, "throughput_trials": steady(88.0)}
    c = normalized_throughput_change(new, base, CFG)
    assert c.lo < 0.95 and c.verdict == SAME  # 12% lower, but the machine moved that much across the run's jobs
    quiet = {**base, "probe": PROBE}
    assert normalized_throughput_change({**new, "probe": PROBE}, quiet, CFG).verdict == WORSE


def test_identity_refuses_other_machines_and_notes_config_changes():
    a = {"fingerprint": "m1", "config_hash": "h1"}
    assert identity(a, a) == (None, [])
    refused, _ = identity({**a, "fingerprint": "m2"}, a)
    assert "machine differs" in refused and "m1 -> m2" in refused
    assert identity({**a, "fingerprint": None}, a)[0] is not None  # an unknown machine is not the same machine
    assert identity({"fingerprint": math.nan}, {"fingerprint": None})[0] is None  # unknown on both sides (table NaN)
    assert identity({**a, "config_hash": "h2"}, a) == (None, ["config hash h1 -> h2"])


def test_unstable_timing_is_never_flagged():
    """A side marked stable=false (issue 11) makes the throughput change not comparable, with the reason."""
    cfg = CompareConfig()
    base = {"throughput": 100.0, "throughput_trials": [100.0] * 5}
    new = {"throughput": 50.0, "throughput_trials": [50.0] * 5, "stable": False, "unstable_reason": "load"}
    change = compare_metrics(new, base, cfg)["throughput"]
    assert change.verdict == NOT_COMPARABLE and "new (load)" in change.reason and not change.flagged


def test_a_change_within_the_trial_variation_is_not_flagged():
    cfg = CompareConfig()
    base = {**CPU, "probe": PROBE, "throughput": 100.0, "throughput_trials": [100.0, 101.0, 99.0, 100.5, 99.5],
            "noise": {"trial_cv": 0.2}}
    new = {**CPU, "probe": PROBE, "throughput": 88.0, "throughput_trials": [88.0, 88.5, 87.5, 88.2, 87.8]}
    assert compare_metrics(new, base, cfg)["throughput"].verdict == SAME  # 12% < the 20% the base's trials varied
    base["noise"]["trial_cv"] = 0.01
    assert compare_metrics(new, base, cfg)["throughput"].verdict == WORSE
