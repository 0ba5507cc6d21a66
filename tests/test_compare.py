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
    auc_figure,
    compare_metrics,
    difference_change,
    finite,
    identity,
    ratio,
    samples,
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
    assert "excludes 1" in c.reason and c.flagged


def test_planted_speedup_is_better_and_lower_is_better_flips_it():
    assert throughput_change(steady(120.0), steady(100.0), tolerance=0.05, alpha=0.05).verdict == BETTER
    latency = throughput_change(steady(120.0), steady(100.0), tolerance=0.05, alpha=0.05, higher_is_better=False)
    assert latency.verdict == WORSE


def test_steady_small_change_is_within_the_tolerance():
    c = throughput_change(steady(97.0), steady(100.0), tolerance=0.05, alpha=0.05)
    assert c.hi < 1.0  # the trials alone would call it slower
    assert c.verdict == SAME and "no more than 5%" in c.reason
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
    assert wide.verdict == SAME and wide.noise == pytest.approx(0.004) and "within the noise" in wide.reason
    tight = difference_change(Figure(0.8003), Figure(0.8000), tolerance=0.0005, alpha=0.05)
    assert tight.verdict == SAME and "within the tolerance" in tight.reason
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


def test_compare_metrics_on_record_shaped_metrics():
    base = {"throughput": 100.0, "throughput_trials": steady(100.0), "auc": 0.80, "auc_delta": 0.0,
            "auc_delta_lo": -0.0001, "auc_delta_hi": 0.0001}
    new = {**base, "throughput": 50.0, "throughput_trials": steady(50.0), "auc": 0.79}
    changes = compare_metrics(new, base, CFG)
    assert {m: c.verdict for m, c in changes.items()} == {"throughput": WORSE, "auc": WORSE}
    same = compare_metrics(base, base, CFG)
    assert {c.verdict for c in same.values()} == {SAME}


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
    base = {"throughput": 100.0, "throughput_trials": [100.0, 101.0, 99.0, 100.5, 99.5], "noise": {"trial_cv": 0.2}}
    new = {"throughput": 88.0, "throughput_trials": [88.0, 88.5, 87.5, 88.2, 87.8]}
    assert compare_metrics(new, base, cfg)["throughput"].verdict == SAME  # 12% < the 20% the base's trials varied
    base["noise"]["trial_cv"] = 0.01
    assert compare_metrics(new, base, cfg)["throughput"].verdict == WORSE
