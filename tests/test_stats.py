"""Unit tests for bench.stats: AUC, paired AUC deltas (DeLong, bootstrap), ratios."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from bench.stats import (
    auc,
    indistinguishable_from_zero,
    interval_contains,
    paired_auc_delta,
    ratio_interval,
)


def simulate(n: int, seed: int, noise_base: float = 1.0, noise_new: float = 1.0, shared: float = 0.8):
    """Labels from a latent logit; two correlated scorers that see it through noise."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-1.5 * z))).astype(np.int64)
    common = rng.standard_normal(n)
    base = z + noise_base * (shared * common + math.sqrt(1 - shared**2) * rng.standard_normal(n))
    new = z + noise_new * (shared * common + math.sqrt(1 - shared**2) * rng.standard_normal(n))
    return y, base, new


# ----------------------------------------------------------------------------------- auc


def test_auc_matches_sklearn_on_continuous_scores():
    y, base, _ = simulate(5000, seed=1)
    assert auc(y, base) == pytest.approx(roc_auc_score(y, base), abs=1e-12)


def test_auc_matches_sklearn_with_heavy_ties_and_float32():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 3000)
    s = np.round(rng.random(3000) + 0.3 * y, 1).astype(np.float32)  # about 14 distinct values
    assert auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_midranks_and_bootstrap_aucs_do_not_depend_on_the_order_within_a_tie_run():
    """The sort that finds tie runs is not stable; a run's midrank, and the bootstrap's whole-number weight sums over
    it, are the same in any order within it: the ranks equal scipy's, the weighted AUCs those of a stable order."""
    from scipy.stats import rankdata

    from bench.stats import _WeightedAuc, _midrank

    rng = np.random.default_rng(5)
    n = 20000
    y = rng.integers(0, 2, n) == 1
    s = np.round(rng.random(n) + 0.3 * y, 2).astype(np.float32).astype(np.float64)  # heavy ties, as a fake-quantized output has
    assert np.array_equal(_midrank(s), rankdata(s))
    weights = rng.integers(0, 3, (4, n)).astype(np.float64)
    stable = _WeightedAuc(y, s)
    stable.order = np.argsort(s, kind="stable")
    stable.pos = y[stable.order]
    assert np.array_equal(_WeightedAuc(y, s)(weights), stable(weights))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(-3, 3)), min_size=2, max_size=40).filter(
        lambda rows: 0 < sum(r[0] for r in rows) < len(rows)
    )
)
def test_auc_matches_sklearn_property(rows):
    y = np.array([r[0] for r in rows])
    s = np.array([r[1] for r in rows], dtype=float)
    assert auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


@pytest.mark.parametrize(
    "labels, scores, message",
    [
        ([1, 1, 1], [0.1, 0.2, 0.3], "both classes"),
        ([0, 1, 2], [0.1, 0.2, 0.3], "0/1"),
        ([0, 1, 1], [0.1, 0.2], "one score per sample"),
        ([0, 1, 1], [0.1, float("nan"), 0.3], "NaN"),
    ],
)
def test_auc_rejects_bad_input(labels, scores, message):
    with pytest.raises(ValueError, match=message):
        auc(labels, scores)


# ----------------------------------------------------------------------------- DeLong


def test_identical_scores_give_zero_delta_and_degenerate_interval():
    y, base, _ = simulate(2000, seed=3)
    for method in ("delong", "bootstrap"):
        r = paired_auc_delta(y, base, base.copy(), method=method, n_boot=50)
        assert (r.delta, r.lo, r.hi, r.p_value) == (0.0, 0.0, 0.0, 1.0)
        assert r.indistinguishable_from_zero


def test_delong_aucs_match_sklearn_and_delta_sign():
    y, base, new = simulate(4000, seed=4, noise_base=1.2, noise_new=0.8)
    r = paired_auc_delta(y, base, new)
    assert r.auc_base == pytest.approx(roc_auc_score(y, base), abs=1e-12)
    assert r.auc_new == pytest.approx(roc_auc_score(y, new), abs=1e-12)
    assert r.delta == pytest.approx(r.auc_new - r.auc_base)
    assert r.delta > 0 and r.lo < r.delta < r.hi
    assert r.as_metrics() == {"auc_delta": r.delta, "auc_delta_lo": r.lo, "auc_delta_hi": r.hi, "auc_delta_p": r.p_value}


def test_swapping_models_flips_the_delta():
    y, base, new = simulate(3000, seed=5, noise_new=1.1)
    a, b = paired_auc_delta(y, base, new), paired_auc_delta(y, new, base)
    assert a.delta == pytest.approx(-b.delta)
    assert a.lo == pytest.approx(-b.hi) and a.hi == pytest.approx(-b.lo)
    assert a.p_value == pytest.approx(b.p_value)


@pytest.mark.slow
def test_delong_agrees_with_paired_bootstrap():
    y, base, new = simulate(4000, seed=6, noise_base=1.0, noise_new=1.15, shared=0.7)
    d = paired_auc_delta(y, base, new, method="delong")
    b = paired_auc_delta(y, base, new, method="bootstrap", n_boot=1500, seed=0)
    assert b.delta == d.delta
    width_d, width_b = d.hi - d.lo, b.hi - b.lo
    assert width_b == pytest.approx(width_d, rel=0.15)
    assert b.lo == pytest.approx(d.lo, abs=0.15 * width_d)
    assert b.hi == pytest.approx(d.hi, abs=0.15 * width_d)
    assert (d.p_value < 0.05) == (b.p_value < 0.05) or abs(d.p_value - b.p_value) < 0.05


def test_bootstrap_is_seeded():
    y, base, new = simulate(1000, seed=7)
    a = paired_auc_delta(y, base, new, method="bootstrap", n_boot=200, seed=3)
    b = paired_auc_delta(y, base, new, method="bootstrap", n_boot=200, seed=3)
    c = paired_auc_delta(y, base, new, method="bootstrap", n_boot=200, seed=4)
    assert (a.lo, a.hi) == (b.lo, b.hi)
    assert (a.lo, a.hi) != (c.lo, c.hi)


def test_delong_type_one_error_is_near_alpha():
    """Two equally good, correlated scorers: the 95% interval should miss 0 about 5% of the time."""
    rejections = sum(
        not paired_auc_delta(*simulate(600, seed=100 + i, shared=0.6)).indistinguishable_from_zero for i in range(300)
    )
    assert 3 <= rejections <= 30  # binomial(300, 0.05): mean 15, sd 3.8


def test_delong_detects_a_real_difference():
    y, base, new = simulate(20000, seed=8, noise_base=1.0, noise_new=1.3)
    r = paired_auc_delta(y, base, new)
    assert r.hi < 0 and r.p_value < 1e-6 and not r.indistinguishable_from_zero


def test_delong_is_fast_on_200k_samples():
    y, base, new = simulate(200_000, seed=9)
    paired_auc_delta(y[:1000], base[:1000], new[:1000])
    start = time.perf_counter()
    paired_auc_delta(y, base, new)
    assert time.perf_counter() - start < 1.0


def test_paired_auc_delta_rejects_bad_arguments():
    y, base, new = simulate(100, seed=10)
    with pytest.raises(ValueError, match="unknown method"):
        paired_auc_delta(y, base, new, method="magic")
    with pytest.raises(ValueError, match="alpha"):
        paired_auc_delta(y, base, new, alpha=1.5)
    with pytest.raises(ValueError, match="one score per sample"):
        paired_auc_delta(y, base, new[:-1])


# ----------------------------------------------------------------------- ratio_interval


def test_ratio_interval_brackets_ratio_of_medians():
    new = [2010.0, 1990.0, 2005.0, 1985.0, 2000.0]
    base = [1000.0, 1010.0, 990.0, 1005.0, 995.0]
    r = ratio_interval(new, base)
    ratio, lo, hi = r  # unpacks as a tuple
    assert ratio == pytest.approx(2000.0 / 1000.0)
    assert lo <= ratio <= hi
    assert 1.9 < lo and hi < 2.1


def test_ratio_interval_contains_one_for_same_distribution():
    rng = np.random.default_rng(11)
    a, b = rng.normal(1000, 30, 7), rng.normal(1000, 30, 7)
    r = ratio_interval(a, b)
    assert r.lo < 1.0 < r.hi


def test_ratio_interval_single_trials_and_seed():
    assert ratio_interval([300.0], [100.0]) == (3.0, 3.0, 3.0)
    a, b = [10.0, 11.0, 12.0, 9.0], [5.0, 6.0, 5.5, 4.5]
    assert ratio_interval(a, b, seed=1) == ratio_interval(a, b, seed=1)


@pytest.mark.parametrize("bad", [[], [0.0, 1.0], [float("nan")], [-5.0]])
def test_ratio_interval_rejects_bad_trials(bad):
    with pytest.raises(ValueError):
        ratio_interval(bad, [1.0, 2.0])


def test_interval_helpers():
    assert indistinguishable_from_zero(-0.0003, 0.0027)
    assert indistinguishable_from_zero(0.0, 0.0)
    assert not indistinguishable_from_zero(0.0001, 0.0027)
    assert not indistinguishable_from_zero(-0.002, -0.001)
    assert interval_contains(0.95, 1.05, 1.0) and not interval_contains(1.01, 1.05, 1.0)
    with pytest.raises(ValueError):
        indistinguishable_from_zero(float("nan"), 1.0)


# ------------------------------------------------------------------- practical equivalence (TOST)

from bench.stats import (  # noqa: E402
    EQUIVALENT,
    GAIN,
    INCONCLUSIVE,
    LOSS,
    median_interval,
    practical_verdict,
)


@pytest.mark.parametrize("lo,hi,verdict", [
    (-6e-7, -5e-7, EQUIVALENT),   # detectable, practically nothing: fp16_tbe's real delta
    (-0.0003, 0.0002, EQUIVALENT),
    (-0.003, -0.002, LOSS),        # wholly below zero and past the margin
    (-0.0015, -0.0002, LOSS),      # below zero, reaching past the margin
    (0.0002, 0.004, GAIN),
    (-0.002, 0.0005, INCONCLUSIVE),  # straddles zero and the margin
    (float("nan"), 0.1, INCONCLUSIVE),
])
def test_auc_delta_verdicts(lo, hi, verdict):
    assert practical_verdict(lo, hi, margin=0.001) == verdict


@pytest.mark.parametrize("lo,hi,verdict", [
    (0.97, 1.04, EQUIVALENT), (1.10, 1.30, GAIN), (0.50, 0.80, LOSS), (0.90, 1.20, INCONCLUSIVE), (1.01, 1.04, EQUIVALENT),
])
def test_speedup_verdicts_use_a_relative_margin(lo, hi, verdict):
    assert practical_verdict(lo, hi, margin=0.05, null=1.0, ratio=True) == verdict


def test_median_interval():
    point, lo, hi = median_interval([1.0, 1.1, 0.9, 1.05, 0.95])
    assert point == 1.0 and lo <= 1.0 <= hi and lo >= 0.9 and hi <= 1.1
    assert median_interval([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError):
        median_interval([])


# ------------------------------------------------------- speedup intervals across processes, tails

from bench.stats import log_se, quantile_interval, log_median_interval, variance_components  # noqa: E402


def test_log_median_interval_widens_by_the_between_process_sd():
    ratios = [1.20, 1.22, 1.18, 1.21, 1.19, 1.20, 1.23, 1.17]
    alone = log_median_interval(ratios)
    wider = log_median_interval(ratios, process_sd=0.02)
    assert alone.ratio == wider.ratio == pytest.approx(1.20, abs=0.005)
    assert alone.lo < alone.ratio < alone.hi and wider.lo < alone.lo and wider.hi > alone.hi
    # Rounds that agree exactly leave only the process part: 1.96 x 2% either side, on the log scale.
    flat = log_median_interval([1.5] * 10, process_sd=0.02)
    assert flat.lo == pytest.approx(1.5 * math.exp(-1.96 * 0.02), rel=1e-3) and flat.hi == pytest.approx(1.5 * math.exp(1.96 * 0.02), rel=1e-3)
    assert log_median_interval([1.5] * 10) == pytest.approx((1.5, 1.5, 1.5))
    with pytest.raises(ValueError):
        log_median_interval([1.0, -1.0])


def test_few_rounds_or_a_spread_from_few_processes_widen_the_interval_by_students_t():
    from bench.stats import satterthwaite_df, t_quantile

    ratios = [1.20, 1.25, 1.15, 1.22]
    se = log_se(ratios)
    four = log_median_interval(ratios)
    assert math.log(four.hi / four.ratio) == pytest.approx(t_quantile(0.975, 3) * se)  # three degrees of freedom
    assert t_quantile(0.975, 3) == pytest.approx(3.182, abs=1e-3) and t_quantile(0.975, math.inf) == pytest.approx(1.960, abs=1e-3)
    known = log_median_interval([1.5] * 4, process_sd=0.02)
    guessed = log_median_interval([1.5] * 4, process_sd=0.02, process_df=4)
    assert math.log(guessed.hi / 1.5) == pytest.approx(t_quantile(0.975, 4) * 0.02) and guessed.hi > known.hi
    assert satterthwaite_df((0.01, 3), (0.0, None)) == 3 and satterthwaite_df((0.0, 3), (0.02, None)) == math.inf
    both = satterthwaite_df((0.01, 3), (0.03, 4))
    assert 4 < both < 7  # the larger part's degrees of freedom dominate, the sum has more than either


def test_log_se_shrinks_with_more_rounds():
    rng = np.random.default_rng(1)
    few, many = np.exp(rng.normal(0, 0.05, 10)), np.exp(rng.normal(0, 0.05, 160))
    assert log_se(many) < log_se(few) and log_se([2.0]) == 0.0


def test_variance_components_find_the_level_that_varies():
    rng = np.random.default_rng(2)
    # 12 processes, each with its own offset (sd 0.03), 40 rounds each with sd 0.01 around it.
    groups = [rng.normal(rng.normal(0, 0.03), 0.01, 40) for _ in range(12)]
    c = variance_components(groups)
    assert c.within_sd == pytest.approx(0.01, rel=0.15) and 0.015 < c.between_sd < 0.05 and c.groups == 12
    # No offsets: the group means scatter only as much as their rounds explain.
    flat = variance_components([rng.normal(0, 0.01, 40) for _ in range(12)])
    assert flat.between_sd < 0.004
    with pytest.raises(ValueError):
        variance_components([[1.0, 2.0]])


def test_quantile_interval_counts_the_calls_in_the_tail():
    calls = [1.0] * 297 + [70.0, 75.0, 80.0]  # three preempted calls of 300
    q = quantile_interval(calls, 0.99)
    assert q.n == 300 and q.tail == 3 and q.hi == 80.0 and q.lo == 1.0  # three calls make it: the interval says so
    smooth = quantile_interval(np.linspace(1.0, 2.0, 10_001), 0.99)
    assert smooth.tail == 101 and smooth.lo < smooth.value < smooth.hi and smooth.hi - smooth.lo < 0.01


# ------------------------------------------------------------------ grouped AUC (MLPerf DLRMv3's AUC)

from bench.stats import grouped_auc, paired_gauc_delta, request_aucs  # noqa: E402


def _requests(seed: int = 0, count: int = 200):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, count)
    labels = (rng.random(sizes.sum()) < 0.4).astype(np.float32)
    scores = (rng.random(sizes.sum()) * 0.6 + labels * 0.25).astype(np.float32)
    return labels, scores, sizes


def test_each_request_s_auc_is_its_own_and_only_requests_with_both_labels_and_spread_scores_count():
    labels, scores, sizes = _requests()
    scores[:sizes[0]] = 0.3  # the first request's scores all equal: it does not count, as in torchrec's GAUC
    auc, counts = request_aucs(labels, scores, sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for i, (s, n) in enumerate(zip(starts, sizes)):
        y, p = labels[s:s + n], scores[s:s + n]
        both = 0 < y.sum() < n and i > 0
        assert counts[i] == both
        if both:
            assert auc[i] == pytest.approx(roc_auc_score(y, p), abs=1e-6)
    assert grouped_auc(labels, scores, sizes) == pytest.approx(auc[counts].mean())


def test_the_grouped_auc_delta_is_paired_by_request():
    labels, scores, sizes = _requests(1)
    same = paired_gauc_delta(labels, scores, scores * 0.5 + 0.1, sizes)  # a monotone map orders every request alike
    assert (same.delta, same.lo, same.hi) == (0, 0, 0) and same.name == "gauc_delta"
    rng = np.random.default_rng(2)
    noisy = (scores + rng.normal(0, 0.2, scores.size)).astype(np.float32)
    d = paired_gauc_delta(labels, scores, noisy, sizes)
    assert d.delta == pytest.approx(grouped_auc(labels, noisy, sizes) - grouped_auc(labels, scores, sizes))
    assert d.lo < d.delta < d.hi < 0  # noise costs ranking inside the requests, beyond the paired interval's reach of 0
