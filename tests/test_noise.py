"""Noise flags: which timing figures are too noisy to support what they say (no real timing here)."""

from bench.measure.noise import LoadWatch, stability
from bench.measure.timing import PairedTiming, Timing


def timing(*trial_ms):
    return Timing(batch_size=100, latency_ms=[[ms] for ms in trial_ms], distinct_batches=10)


def test_steady_trials_are_stable():
    out = stability(timing(1.0, 1.01, 0.99), None, {"load_start": 0.5}, max_trial_cv=0.1, max_ratio_spread=0.1)
    assert out["stable"] and out["unstable_reason"] is None and out["noise"]["trial_cv"] < 0.02


def test_trials_that_swing_are_unstable_with_the_reason():
    out = stability(timing(1.0, 3.0, 1.0), None, {}, max_trial_cv=0.1, max_ratio_spread=0.1)
    assert not out["stable"] and "varied" in out["unstable_reason"] and "between trials" in out["unstable_reason"]


def test_a_wide_paired_interval_is_unstable_even_when_each_side_looks_steady():
    cand = timing(1.0, 1.0, 1.0, 1.0, 1.0)
    ref = Timing(100, [[1.0], [2.0], [1.0], [2.0], [1.5]], 10)
    paired = PairedTiming(candidate=cand, reference=ref, first=["reference", "candidate", "candidate", "reference", "reference"])
    out = stability(cand, paired, {}, max_trial_cv=0.1, max_ratio_spread=0.1)
    assert not out["stable"] and "paired speedup" in out["unstable_reason"] and out["noise"]["ratio_spread"] > 0.1


def test_steal_past_five_percent_is_a_reason():
    out = stability(timing(1.0, 1.0), None, {"steal_share": 0.2}, max_trial_cv=0.1, max_ratio_spread=0.1)
    assert not out["stable"] and "stole 20%" in out["unstable_reason"]


def test_load_watch_records_load_and_cpus():
    with LoadWatch() as watch:
        pass
    assert watch.figures["cpus"] >= 1 and "load_start" in watch.figures and "load_end" in watch.figures
