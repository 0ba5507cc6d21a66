"""Confidence intervals for what the report quotes: paired AUC deltas and throughput ratios.

- `auc`: the Mann-Whitney AUC from midranks (ties count one half), equal to sklearn's
  `roc_auc_score`, O(n log n).
- `paired_auc_delta`: AUC(new) - AUC(base) on the same eval samples, with a confidence interval
  and a two-sided p-value. `method="delong"` is DeLong, DeLong & Clarke-Pearson (1988) for
  correlated ROC curves, computed with the midrank algorithm of Sun & Xu (2014): three sorts per
  model, no n_pos x n_neg matrix. `method="bootstrap"` resamples the eval samples (stratified by
  class, the same draw for both models) as a cross-check.
- `paired_ne_acc_delta`: NE(new) - NE(base) and accuracy(new) - accuracy(base) on the same eval
  samples, each a mean of per-sample differences with a paired, class-stratified interval: normal
  (the stratified standard error) or, as a cross-check, the ΔAUC bootstrap's own resamples.
- `ratio_interval`: ratio of median throughputs of two independent runs, bootstrap over their
  per-trial throughputs.
- `median_interval`: the median of one run's per-trial throughputs, bootstrap over the trials.
- `log_median_interval`: the median of paired per-round ratios (or of trial throughputs), its
  interval widened by a between-process standard deviation (`variance_components` splits a figure's variance between
  processes and rounds), with a Student-t multiplier for the degrees of freedom behind both parts.
- `quantile_interval`: a latency percentile with its order-statistic interval and the number of
  samples in its tail.

Only numpy, scipy.special and the standard library: the runner calls this inside every job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from bench.metrics import ACC_DELTA, AUC_DELTA, AUC_DELTA_P, GAUC_DELTA, NE_DELTA, hi, lo

METHODS = ("delong", "bootstrap")  # ΔAUC's intervals
METHODS_MEAN = ("normal", "bootstrap")  # ΔNE's and Δaccuracy's


@dataclass(frozen=True)
class AucDelta:
    """AUC(new) - AUC(base) on the same samples, with a (1 - alpha) interval and a two-sided p."""

    delta: float
    lo: float
    hi: float
    p_value: float
    method: str
    auc_base: float
    auc_new: float
    alpha: float = 0.05

    @property
    def indistinguishable_from_zero(self) -> bool:
        return indistinguishable_from_zero(self.lo, self.hi)

    def as_metrics(self) -> dict[str, float]:
        """The record's metric names (`auc_delta`, `auc_delta_lo`, ...)."""
        return {
            AUC_DELTA: self.delta,
            lo(AUC_DELTA): self.lo,
            hi(AUC_DELTA): self.hi,
            AUC_DELTA_P: self.p_value,
        }


class RatioInterval(NamedTuple):
    ratio: float
    lo: float
    hi: float


def indistinguishable_from_zero(lo: float, hi: float) -> bool:
    """True when the interval [lo, hi] contains 0: the delta cannot be told from no change."""
    return interval_contains(lo, hi, 0.0)


def interval_contains(lo: float, hi: float, value: float) -> bool:
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        raise ValueError("interval bound is missing (None or NaN)")
    return lo <= value <= hi


# --------------------------------------------------------------------------------------- AUC


def _tie_groups(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): a sort order of x and where each run of equal values begins in it.

    Any order of the values within a run gives the same figures: a run shares one midrank, and the bootstrap sums
    whole-number weights over it, exactly in any order. So numpy's default sort, not a stable one: about 6x faster
    (200k scores: 2.4 ms against 16 ms), and DeLong sorts three arrays per side of every AUC delta a job reports."""
    order = np.argsort(x)
    xs = x[order]
    new_group = np.empty(xs.size, dtype=bool)
    new_group[:1] = True
    np.not_equal(xs[1:], xs[:-1], out=new_group[1:])
    return order, np.flatnonzero(new_group)


def _midrank(x: np.ndarray) -> np.ndarray:
    """1-based ranks of x, tied values sharing the mean of their ranks (O(n log n))."""
    n = x.shape[0]
    order, starts = _tie_groups(x)
    ends = np.append(starts[1:], n)
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def _check(labels, *score_arrays) -> tuple[np.ndarray, list[np.ndarray]]:
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {y.shape}")
    if y.dtype != bool:
        if not np.all((y == 0) | (y == 1)):
            raise ValueError("labels must be 0/1 (or bool)")
        y = y == 1
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        raise ValueError(f"AUC needs both classes; got {n_pos} positives of {y.size} samples")
    scores = []
    for s in score_arrays:
        s = np.asarray(s, dtype=np.float64)
        if s.shape != y.shape:
            raise ValueError(f"scores have shape {s.shape}, labels {y.shape}: one score per sample")
        if not np.all(np.isfinite(s)):
            raise ValueError("scores contain NaN or inf")
        scores.append(s)
    return y, scores


def auc(labels, scores) -> float:
    """ROC AUC (ties count one half), the same number as sklearn's roc_auc_score."""
    y, (s,) = _check(labels, scores)
    m = int(y.sum())
    n = y.size - m
    r = _midrank(s)
    return float((r[y].sum() - m * (m + 1) / 2.0) / (m * n))


# ------------------------------------------------------------------------------------ DeLong


def _delong_components(y: np.ndarray, s: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """AUC and the structural components V10 (per positive) and V01 (per negative)."""
    pos, neg = s[y], s[~y]
    m, n = pos.size, neg.size
    tx, ty = _midrank(pos), _midrank(neg)
    tz = _midrank(np.concatenate([pos, neg]))
    a = (tz[:m].sum() - m * (m + 1) / 2.0) / (m * n)
    v10 = (tz[:m] - tx) / n  # share of negatives below each positive
    v01 = 1.0 - (tz[m:] - ty) / m  # share of positives above each negative
    return float(a), v10, v01


def _two_sided_p(delta: float, se: float) -> float:
    if se > 0:
        return float(math.erfc(abs(delta) / se / math.sqrt(2.0)))
    return 1.0 if delta == 0 else 0.0


def _delong(y: np.ndarray, base: np.ndarray, new: np.ndarray, alpha: float) -> AucDelta:
    a0, v10_0, v01_0 = _delong_components(y, base)
    a1, v10_1, v01_1 = _delong_components(y, new)
    m, n = v10_0.size, v01_0.size
    # var(A1 - A0) = [var(V10_1 - V10_0)] / m + [var(V01_1 - V01_0)] / n
    var = np.var(v10_1 - v10_0, ddof=1) / m + np.var(v01_1 - v01_0, ddof=1) / n
    se = math.sqrt(max(float(var), 0.0))
    delta = a1 - a0
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return AucDelta(delta, delta - z * se, delta + z * se, _two_sided_p(delta, se), "delong", a0, a1, alpha)


# --------------------------------------------------------------------------------- bootstrap


class _WeightedAuc:
    """AUC of one model under many bootstrap weightings of the same samples."""

    def __init__(self, y: np.ndarray, s: np.ndarray) -> None:
        self.order, self.starts = _tie_groups(s)  # tie groups in score order
        self.pos = y[self.order]

    def __call__(self, w: np.ndarray) -> np.ndarray:
        """w: (B, n) sample counts -> (B,) AUCs."""
        ws = w[:, self.order]
        wp = np.add.reduceat(np.where(self.pos, ws, 0.0), self.starts, axis=1)
        wn = np.add.reduceat(np.where(self.pos, 0.0, ws), self.starts, axis=1)
        below = np.cumsum(wn, axis=1) - wn  # negative weight strictly below each tie group
        num = (wp * (below + 0.5 * wn)).sum(axis=1)
        return num / (wp.sum(axis=1) * wn.sum(axis=1))


def _resample_weights(y: np.ndarray, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """The paired bootstrap's draws as sample counts, (b, n) at a time, `n_boot` rows in all.

    Stratified: each class resampled with replacement at its own size, so every draw keeps the
    eval split's base rate; the caller weighs both models with the same draw (paired). Memory grows
    with n_samples x chunk, where chunk = max(1, 2M // n_samples) draws at a time.
    """
    rng = np.random.default_rng(seed)
    pos_idx, neg_idx = np.flatnonzero(y), np.flatnonzero(~y)
    n = y.size
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        draw = np.concatenate(
            [
                pos_idx[rng.integers(0, pos_idx.size, size=(b, pos_idx.size))],
                neg_idx[rng.integers(0, neg_idx.size, size=(b, neg_idx.size))],
            ],
            axis=1,
        )
        flat = (draw + (np.arange(b) * n)[:, None]).ravel()
        yield np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)


def _bootstrap(y, base, new, alpha: float, n_boot: int, seed: int) -> AucDelta:
    a0, a1 = auc(y, base), auc(y, new)
    f0, f1 = _WeightedAuc(y, base), _WeightedAuc(y, new)
    d = np.concatenate([f1(w) - f0(w) for w in _resample_weights(y, n_boot, seed)])
    delta = a1 - a0
    lo, hi = np.quantile(d, [alpha / 2.0, 1.0 - alpha / 2.0])
    se = float(np.std(d, ddof=1)) if d.size > 1 else 0.0
    return AucDelta(delta, float(lo), float(hi), _two_sided_p(delta, se), "bootstrap", a0, a1, alpha)


def paired_auc_delta(
    labels,
    scores_base,
    scores_new,
    alpha: float = 0.05,
    method: str = "delong",
    n_boot: int = 1000,
    seed: int = 0,
) -> AucDelta:
    """AUC(scores_new) - AUC(scores_base) on the same samples, with a (1 - alpha) interval.

    delong: normal interval from DeLong's variance of the difference of correlated AUCs, and
    its two-sided z-test p-value; O(n log n), about 0.03 s of CPU for 200k samples (a 2-vCPU AMD EPYC, busy).
    bootstrap: percentile interval over `n_boot` paired, class-stratified resamples (seeded);
    the p-value is the z-test with the bootstrap standard error. Memory grows with
    n_samples x chunk, where chunk = max(1, 2M // n_samples) resamples at a time.
    Identical scores give delta 0 with the degenerate interval [0, 0] and p = 1.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    y, (base, new) = _check(labels, scores_base, scores_new)
    if method == "delong":
        return _delong(y, base, new, alpha)
    if method == "bootstrap":
        if n_boot < 2:
            raise ValueError(f"n_boot must be at least 2, got {n_boot}")
        return _bootstrap(y, base, new, alpha, n_boot, seed)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


# ------------------------------------------------------------------------ NE and accuracy


def per_sample_logloss(labels, logits) -> np.ndarray:
    """Each sample's log loss from its logit: log(1 + e^-z) for a positive, log(1 + e^z) for a negative."""
    y = np.asarray(labels) == 1
    return np.logaddexp(0.0, np.where(y, -1.0, 1.0) * np.asarray(logits, dtype=np.float64))


def correct(labels, logits) -> np.ndarray:
    """1.0 where a sample's probability lies on its label's side of 0.5 (p >= 0.5, a logit >= 0, reads as
    positive: torchrec's accuracy, which MLPerf's DLRMv3 reference reports), else 0.0."""
    return ((np.asarray(logits) >= 0) == (np.asarray(labels) == 1)).astype(np.float64)


def ne_and_accuracy(labels, probabilities, eta: float = 1e-12) -> tuple[float, float]:
    """(NE, accuracy) of click probabilities by torchrec's own NE and accuracy computations, each row weighted 1 (what
    MLPerf's DLRMv3 accuracy script reports): the log loss over the base rate's entropy, each clamped to [eta, 1 - eta];
    the share with p >= 0.5 on the positive side."""
    import torch  # noqa: PLC0415 - torchrec's metrics, at their first use
    from torchrec.metrics.accuracy import compute_accuracy, compute_accuracy_sum  # noqa: PLC0415
    from torchrec.metrics.ne import compute_cross_entropy, compute_ne  # noqa: PLC0415

    y = torch.from_numpy(np.asarray(labels, dtype=np.float64))
    p = torch.from_numpy(np.asarray(probabilities, dtype=np.float32))
    w = torch.ones_like(y)
    ce = compute_cross_entropy(y, p.clone(), w, eta).sum()  # it clamps its copy in place
    ne = compute_ne(ce, w.sum(), (y * w).sum(), ((1 - y) * w).sum(), eta)
    return float(ne), float(compute_accuracy(compute_accuracy_sum(y, p, w), w.sum()))


def request_aucs(labels, scores, sizes) -> tuple[np.ndarray, np.ndarray]:
    """Each request's AUC over its own candidates, and whether it counts, as torchrec's GAUC reads a request (what
    MLPerf's DLRMv3 calls its AUC: `metric/lifetime_gauc`): the rows are requests of `sizes` rows in order; a request
    counts when it holds both labels and its scores are not all equal (0 reads as padding, as torchrec's does). Ties
    rank as torchrec's argsort puts them: each request is handed to its code alone, as MLPerf's accuracy script does."""
    import torch  # noqa: PLC0415 - torchrec's own computation, at its first use
    from torchrec.metrics.gauc import compute_gauc_3d  # noqa: PLC0415

    y = np.asarray(labels, dtype=np.float32)  # float32, as the script reads labels and weights from LoadGen's log
    p = np.asarray(scores)
    sizes = np.asarray(sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    auc, counts = np.zeros(len(sizes)), np.zeros(len(sizes), dtype=bool)
    for n in np.unique(sizes):  # requests of one size at once, each its own task: no padding between them
        which = np.flatnonzero(sizes == n)
        rows = starts[which][:, None] + np.arange(n)
        out = compute_gauc_3d(torch.from_numpy(np.ascontiguousarray(p[rows]))[:, None, :],
                              torch.from_numpy(y[rows])[:, None, :], torch.ones(len(which), 1, int(n)))
        auc[which], counts[which] = out["auc_sum"].double().numpy(), out["num_samples"].numpy() > 0
    return auc, counts


def _counted_mean(auc: np.ndarray, counts: np.ndarray) -> float:
    return float(auc[counts].mean()) if counts.any() else math.nan


def grouped_auc(labels, scores, sizes) -> float:
    """The mean AUC of the requests that count (`request_aucs`), NaN where none does: MLPerf DLRMv3's AUC."""
    return _counted_mean(*request_aucs(labels, scores, sizes))


def paired_gauc_delta(labels, scores_base, scores_new, sizes, alpha: float = 0.05) -> PairedDelta:
    """Grouped AUC of `scores_new` minus that of `scores_base` on the same requests (each over the requests that count
    for it), with a (1 - alpha) normal interval from the per-request differences over the requests that count for both
    (requests are independent; their differences are paired). Identical scores give 0 with [0, 0]."""
    base, counted_base = request_aucs(labels, scores_base, sizes)
    new, counted_new = request_aucs(labels, scores_new, sizes)
    gauc_base, gauc_new = _counted_mean(base, counted_base), _counted_mean(new, counted_new)
    point = gauc_new - gauc_base
    both = counted_base & counted_new
    diff = new[both] - base[both]
    if not diff.any() or both.sum() < 2:
        half = 0.0 if not diff.any() else math.inf
    else:
        half = NormalDist().inv_cdf(1.0 - alpha / 2.0) * float(diff.std(ddof=1)) / math.sqrt(diff.size)
    return PairedDelta(GAUC_DELTA, point, point - half, point + half, gauc_base, gauc_new)


def base_entropy(positive_rate: float) -> float:
    """The entropy of a base rate: the log loss of predicting it for everyone (NE's denominator)."""
    p = positive_rate
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


@dataclass(frozen=True)
class PairedDelta:
    """new - base of one figure over the same samples, with a (1 - alpha) paired interval."""

    name: str  # the metric the delta is recorded as (bench.metrics)
    delta: float
    lo: float
    hi: float
    base: float
    new: float

    def as_metrics(self) -> dict[str, float]:
        return {self.name: self.delta, lo(self.name): self.lo, hi(self.name): self.hi}


def paired_ne_acc_delta(labels, logits_base, logits_new, alpha: float = 0.05, method: str = "normal", n_boot: int = 1000,
                        seed: int = 0) -> tuple[PairedDelta, PairedDelta]:
    """(ΔNE, Δaccuracy) of `logits_new` against `logits_base` on the same samples, each with a
    (1 - alpha) interval paired over the samples, stratified by class as the bootstrap ΔAUC is.

    Both figures are means of per-sample terms: NE the mean log loss over the base rate's entropy (a
    class-stratified draw keeps the base rate, so the entropy is a constant), accuracy the share on
    the right side of 0.5. So each delta is the mean of per-sample differences d, and
    normal: the normal interval with the stratified standard error sqrt(sum_c n_c var_c(d)) / n (what
    the stratified bootstrap estimates, without drawing; O(n), as DeLong is for ΔAUC);
    bootstrap: the percentile interval over the ΔAUC bootstrap's paired, class-stratified resamples
    (`_resample_weights`, the same draws for both models), as a cross-check.
    Identical scores give 0 with the degenerate interval [0, 0].
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if method not in METHODS_MEAN:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS_MEAN}")
    if method == "bootstrap" and n_boot < 2:
        raise ValueError(f"n_boot must be at least 2, got {n_boot}")
    y, (base, new) = _check(labels, logits_base, logits_new)
    entropy = base_entropy(float(y.mean()))
    base_f = np.stack([per_sample_logloss(y, base) / entropy, correct(y, base)], axis=1)  # (n, 2): NE's and accuracy's terms
    new_f = np.stack([per_sample_logloss(y, new) / entropy, correct(y, new)], axis=1)
    diff = new_f - base_f
    point = diff.mean(axis=0)
    if not diff.any():
        bounds = np.zeros((2, 2))
    elif method == "normal":
        var = sum(diff[c].var(axis=0) * np.count_nonzero(c) for c in (y, ~y)) / y.size**2
        half = NormalDist().inv_cdf(1.0 - alpha / 2.0) * np.sqrt(var)
        bounds = np.stack([point - half, point + half])
    else:
        draws = np.concatenate([w @ diff for w in _resample_weights(y, n_boot, seed)]) / y.size  # (n_boot, 2)
        bounds = np.quantile(draws, [alpha / 2.0, 1.0 - alpha / 2.0], axis=0)  # rows lo, hi; a column per figure
    out = [PairedDelta(name, float(point[i]), float(bounds[0, i]), float(bounds[1, i]), float(base_f[:, i].mean()),
                       float(new_f[:, i].mean())) for i, name in enumerate((NE_DELTA, ACC_DELTA))]
    return out[0], out[1]


# ----------------------------------------------------------------------------- throughput


def ratio_interval(
    trials_new: Sequence[float],
    trials_base: Sequence[float],
    alpha: float = 0.05,
    n_boot: int = 2000,
    seed: int = 0,
) -> RatioInterval:
    """median(new) / median(base) with a percentile-bootstrap (1 - alpha) interval.

    The two runs are independent, so each side's trials are resampled on their own. With a
    handful of trials the interval is coarse (it can only take values of ratios of trial
    medians); with one trial per side it collapses to the point ratio.
    """
    a = np.asarray(trials_new, dtype=np.float64).ravel()
    b = np.asarray(trials_base, dtype=np.float64).ravel()
    for name, t in (("trials_new", a), ("trials_base", b)):
        if t.size == 0:
            raise ValueError(f"{name} is empty")
        if not np.all(np.isfinite(t)) or np.any(t <= 0):
            raise ValueError(f"{name} must be positive finite throughputs")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    ratio = float(np.median(a) / np.median(b))
    rng = np.random.default_rng(seed)
    med_a = np.median(a[rng.integers(0, a.size, size=(n_boot, a.size))], axis=1)
    med_b = np.median(b[rng.integers(0, b.size, size=(n_boot, b.size))], axis=1)
    lo, hi = np.quantile(med_a / med_b, [alpha / 2.0, 1.0 - alpha / 2.0])
    return RatioInterval(ratio, float(min(lo, ratio)), float(max(hi, ratio)))


def median_interval(values: Sequence[float], alpha: float = 0.05, n_boot: int = 2000, seed: int = 0) -> RatioInterval:
    """The median of `values` (e.g. per-round speedup ratios) with a percentile-bootstrap interval."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)):
        raise ValueError("values must be a non-empty sequence of finite numbers")
    point = float(np.median(v))
    rng = np.random.default_rng(seed)
    boot = np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)
    lo, hi = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    return RatioInterval(point, float(min(lo, point)), float(max(hi, point)))


def log_median_interval(values: Sequence[float], process_sd: float = 0.0, alpha: float = 0.05,
                        process_df: float | None = None) -> RatioInterval:
    """The median of positive figures (per-round speedups, per-trial throughputs) with a (1 - alpha)
    interval that a re-run in a new process should fall in.

    On the log scale, the median's standard error over the values (`log_se`) and `process_sd`, the
    standard deviation that separate processes add on top of it (estimated per machine), add as
    variances. Both are estimates: the multiplier is Student's t at the Welch-Satterthwaite degrees
    of freedom of their sum (the values' count less one; `process_df` for the process part, None
    for a known one), so an interval resting on four rounds, or on a spread measured in a few
    processes, says so by its width. With `process_sd` 0 it covers the values of one process only.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError("values must be a non-empty sequence of positive finite numbers")
    point = float(np.median(np.log(v)))
    se = log_se(v)
    half = t_quantile(1.0 - alpha / 2.0, satterthwaite_df((se, v.size - 1), (process_sd, process_df))) * math.sqrt(
        se**2 + process_sd**2)
    return RatioInterval(math.exp(point), math.exp(point - half), math.exp(point + half))


def satterthwaite_df(*parts: tuple[float, float | None]) -> float:
    """Degrees of freedom of a sum of variances, each `(sd, df)` (df None or 0 with sd 0: known
    exactly), by Welch-Satterthwaite; infinite when every part with weight is known exactly."""
    total = sum(sd**2 for sd, _ in parts)
    spread = sum(sd**4 / df for sd, df in parts if sd > 0 and df)
    if total == 0 or spread == 0:
        return math.inf
    return total**2 / spread


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (the normal one for infinite df)."""
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    from scipy.special import stdtrit  # loaded with scikit-learn already; kept out of import time

    return float(stdtrit(df, p))


def log_se(values: Sequence[float], n_boot: int = 2000, seed: int = 0) -> float:
    """Bootstrap standard error of the median of log(values): the rounds' share of a speedup's noise."""
    logs = np.log(np.asarray(values, dtype=np.float64).ravel())
    if logs.size < 2:
        return 0.0
    rng = np.random.default_rng(seed)
    return float(np.std(np.median(logs[rng.integers(0, logs.size, size=(n_boot, logs.size))], axis=1), ddof=1))


class Components(NamedTuple):
    """A one-way random-effects split of a figure's variance: between groups (processes) and within."""

    between_sd: float  # standard deviation that separate groups add beyond what their within spread explains
    within_sd: float  # standard deviation of one observation inside a group
    group_mean_sd: float  # observed standard deviation of the group means
    groups: int


def variance_components(groups: Sequence[Sequence[float]]) -> Components:
    """Between- and within-group standard deviations (ANOVA estimators; a negative between-group
    variance reads as 0). Groups may differ in size; each needs at least two values, and at least
    two groups are needed (Kalibera & Jones, "Rigorous benchmarking in reasonable time", 2013)."""
    arrays = [np.asarray(g, dtype=np.float64).ravel() for g in groups]
    if len(arrays) < 2 or any(a.size < 2 for a in arrays):
        raise ValueError("variance components need at least two groups of at least two values")
    means = np.array([a.mean() for a in arrays])
    within = float(np.mean([a.var(ddof=1) for a in arrays]))
    n = float(np.mean([a.size for a in arrays]))
    between = max(0.0, float(means.var(ddof=1)) - within / n)
    return Components(math.sqrt(between), math.sqrt(within), float(means.std(ddof=1)), len(arrays))


class Quantile(NamedTuple):
    """A sample quantile with its distribution-free (1 - alpha) interval and the evidence behind it."""

    value: float
    lo: float
    hi: float
    n: int  # samples
    tail: int  # samples at or beyond the quantile: how many calls make a p99


def quantile_interval(samples: Sequence[float], q: float, alpha: float = 0.05) -> Quantile:
    """The q-quantile of `samples` with an order-statistic interval (normal approximation to the
    binomial count of samples below it, ranks clipped to the sample). `tail` counts the samples at
    or above the quantile's rank: a p99 over 300 calls rests on its 3 slowest."""
    x = np.sort(np.asarray(samples, dtype=np.float64).ravel())
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("samples must be a non-empty sequence of finite numbers")
    n = x.size
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    spread = z * math.sqrt(n * q * (1.0 - q))
    lo_rank = max(0, math.floor(n * q - spread) - 1)
    hi_rank = min(n - 1, math.ceil(n * q + spread))
    return Quantile(float(np.quantile(x, q)), float(x[lo_rank]), float(x[hi_rank]), n, n - math.floor(n * q))


# ------------------------------------------------------------------------ practical equivalence

EQUIVALENT, GAIN, LOSS, INCONCLUSIVE = "equivalent", "gain", "loss", "inconclusive"


def practical_verdict(lo: float, hi: float, margin: float, null: float = 0.0, ratio: bool = False) -> str:
    """Which of equivalent / gain / loss / inconclusive a (1 - alpha) interval supports.

    Two one-sided tests (TOST) read off the interval: `equivalent` when it lies inside the margin
    around the null (a difference may be detectable yet practically nothing); `gain` or `loss`
    when it lies wholly on one side of the null and reaches past the margin; `inconclusive`
    otherwise. For ratios (`ratio=True`, null 1) the margin is relative: [1/(1+m), 1+m]. Larger
    is better; pass the negated interval for figures where smaller is better.
    """
    if any(math.isnan(x) for x in (lo, hi, margin)):
        return INCONCLUSIVE
    low, high = (null / (1 + margin), null * (1 + margin)) if ratio else (null - margin, null + margin)
    if low <= lo and hi <= high:
        return EQUIVALENT
    if lo > null:
        return GAIN
    if hi < null:
        return LOSS
    return INCONCLUSIVE


WITHIN_BUDGET, OVER_BUDGET = "within budget", "over budget"

# A ΔAUC interval within ±this of 0: the fp32 model's scores up to rounding, a zero-loss choice (fp32_tbe, fp16_tbe).
# A drop this small is float rounding, not a loss: `budget_verdict` reads a budget below it as this.
FP32_EQUIVALENT = 1e-5


def budget_floor(max_drop: float) -> float:
    """The lowest ΔAUC a budget accepts: -max_drop; -FP32_EQUIVALENT for a budget from 0 up to it (rounding)."""
    return -max_drop if max_drop < 0 else -max(max_drop, FP32_EQUIVALENT)


def budget_verdict(lo: float, hi: float, max_drop: float) -> str:
    """The one accuracy rule: a ΔAUC interval read against an accuracy budget (the largest drop accepted).
    `within budget` when the whole interval lies at or above -max_drop (a gain is within), `over budget`
    when it lies wholly below, `inconclusive` when it straddles -max_drop (or a bound is missing).

    Every reader judges a ΔAUC against a budget here and nowhere else: report.md's verdicts and bottom
    line, the gate's `max_auc_drop` rule, tune's search and held-out check, recommend's stage 1. A budget
    from 0 up to FP32_EQUIVALENT reads as FP32_EQUIVALENT: an interval that reaches a few 1e-9 below 0 is
    fp32's scores up to float rounding (onnxruntime_fp32, compiled_fp32), within a 0 budget. A negative
    budget (a gain demanded) is read as given."""
    if any(math.isnan(float(x)) for x in (lo, hi, max_drop)):
        return INCONCLUSIVE
    floor = budget_floor(max_drop)
    if lo >= floor:
        return WITHIN_BUDGET
    if hi < floor:
        return OVER_BUDGET
    return INCONCLUSIVE


def fp32_equivalent(lo: float, hi: float) -> bool:
    """Whether a ΔAUC interval lies within ±FP32_EQUIVALENT of 0 (False with a bound missing)."""
    return not any(math.isnan(float(x)) for x in (lo, hi)) and max(abs(lo), abs(hi)) <= FP32_EQUIVALENT


NOT_SLOWER, BORDERLINE, SLOWER = "not slower", "borderline", "slower"


def noninferiority_verdict(lo: float, hi: float, margin: float) -> str:
    """A speedup's (1 - alpha) interval read as non-inferiority against its reference, with the bound
    1 - margin: `not slower` when the whole interval lies at or above it, `slower` when it lies wholly
    below, `borderline` when it crosses it; `inconclusive` with a bound missing.

    Where the true speedup lies at or above the bound, an interval that covers it reads `not slower` or
    `borderline`, never `slower`; below the bound, `slower` or `borderline`. Two runs whose intervals
    both cover the truth (each does 1 - alpha of the time) therefore never read opposite ways: one of
    them says `borderline`, or they agree."""
    if any(math.isnan(float(x)) for x in (lo, hi, margin)):
        return INCONCLUSIVE
    bound = 1.0 - margin
    if lo >= bound:
        return NOT_SLOWER
    if hi < bound:
        return SLOWER
    return BORDERLINE
