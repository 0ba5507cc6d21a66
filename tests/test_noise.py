"""Noise flags: the absolute throughput's own flag, and figures reported beside the speedup (no real timing here)."""

import pytest

from bench.measure.noise import LoadWatch, stability
from bench.measure.timing import PairedTiming, Timing


def timing(*trial_ms):
    return Timing(batch_size=100, latency_ms=[[ms] for ms in trial_ms], distinct_batches=10)


def test_steady_trials_are_stable():
    out = stability(timing(1.0, 1.01, 0.99), None, {"load_start": 0.5}, max_trial_cv=0.1)
    assert out["stable"] and out["unstable_reason"] is None and out["noise"]["trial_cv"] < 0.02


def test_trials_that_swing_are_unstable_with_the_reason():
    out = stability(timing(1.0, 3.0, 1.0), None, {}, max_trial_cv=0.1)
    assert not out["stable"] and "varied" in out["unstable_reason"] and "between trials" in out["unstable_reason"]


def test_a_wide_paired_interval_is_reported_not_a_flag_on_the_throughput():
    """The ratio's spread is the speedup's business (its verdict reads its interval): steady trials stay stable."""
    cand = timing(1.0, 1.0, 1.0, 1.0, 1.0)
    ref = Timing(100, [[1.0], [2.0], [1.0], [2.0], [1.5]], 10)
    paired = PairedTiming(candidate=cand, reference=ref, first=["reference", "candidate", "candidate", "reference", "reference"])
    out = stability(cand, paired, {}, max_trial_cv=0.1)
    assert out["stable"] and out["noise"]["ratio_spread"] > 0.1


def test_swinging_trials_with_steady_ratios_flag_the_throughput_only():
    """Load that slows both sides of each round alike: the throughput is flagged, the ratio is steady."""
    cand = timing(1.0, 3.0, 1.0, 2.0)
    ref = Timing(100, [[2.0], [6.0], [2.0], [4.0]], 10)
    paired = PairedTiming(candidate=cand, reference=ref, first=["reference", "candidate", "candidate", "reference"])
    out = stability(cand, paired, {}, max_trial_cv=0.1)
    assert not out["stable"] and out["noise"]["ratio_spread"] == pytest.approx(0.0, abs=1e-12) and paired.speedup() == pytest.approx((2.0, 2.0, 2.0))


def test_steal_past_five_percent_is_a_reason():
    out = stability(timing(1.0, 1.0), None, {"steal_share": 0.2}, max_trial_cv=0.1)
    assert not out["stable"] and "stole 20%" in out["unstable_reason"]


def test_load_watch_records_load_and_cpus():
    with LoadWatch() as watch:
        pass
    assert watch.figures["cpus"] >= 1 and "load_start" in watch.figures and "load_end" in watch.figures
