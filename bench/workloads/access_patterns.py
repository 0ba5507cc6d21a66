"""Access patterns of the synthetic workloads: which rows a stream of requests reads.

Every pattern is a Zipf law over each table's rows (a random permutation, or a scramble for very
large tables, decides which ids are frequent), with one exponent per feature:

    zipf     the configured `zipf_alpha` for every feature (1.1 by default): a hot head that stays
             in cache, and a long tail
    uniform  exponent 0: every row equally likely, the worst case for a cache
    criteo   an exponent per feature fitted to real Criteo Kaggle rows (`criteo_access.json`,
             written by `benchmarks/scripts/fit_criteo_access.py` from the first 10,000 rows of
             train.txt): for each feature, the exponent whose expected unique ids per batch of
             256, 1024 and 4096 samples best match the real ones (least squares in log), at the
             workload's table size. The fit is refit for every table size, because the unique count
             of a batch depends on both the exponent and the rows.

`expected_unique` evaluates sum_i 1 - (1 - p_i)^B exactly over the first 4096 ranks and over
geometric buckets of ranks beyond (p_i changes slowly there), so a fit costs milliseconds even for a
40M-row table. `ZipfIds` draws ids without per-row arrays (inverse of the continuous Zipf CDF, then a
bijective scramble of the ranks), for tables too large for the exact sampler.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np

from bench.errors import UserError

ACCESS = ("zipf", "uniform", "criteo")
CRITEO_PROFILE = Path(__file__).with_name("criteo_access.json")
FIT_BATCHES = (256, 1024, 4096)
_EXACT_RANKS = 4096
_BUCKETS = 2048
ALPHA_RANGE = (0.0, 4.0)


def check_access(access: str) -> None:
    if access not in ACCESS:
        raise UserError(f"workload.access={access!r} is not an access pattern: choose one of {', '.join(ACCESS)}")


def feature_alphas(access: str, zipf_alpha: float, cardinalities: list[int]) -> list[float]:
    """The Zipf exponent of each feature's ids under `access`."""
    check_access(access)
    if access == "zipf":
        return [float(zipf_alpha)] * len(cardinalities)
    if access == "uniform":
        return [0.0] * len(cardinalities)
    profile = criteo_profile()["features"]
    # Criteo has 26 categorical features; a workload with another count cycles through them.
    return [fit_alpha(profile[i % len(profile)]["unique_per_batch"], rows) for i, rows in enumerate(cardinalities)]


@functools.cache
def criteo_profile() -> dict:
    return json.loads(CRITEO_PROFILE.read_text())


def zipf_weights(rows: int, alpha: float) -> np.ndarray:
    """Unnormalized P(rank r) = r^-alpha for r = 1..rows (float64)."""
    return 1.0 / np.arange(1, rows + 1) ** alpha


def zipf_cdf(rows: int, alpha: float) -> np.ndarray:
    weights = zipf_weights(rows, alpha)
    return np.cumsum(weights) / weights.sum()


def zipf_probabilities(rows: int, alpha: float) -> np.ndarray:
    weights = zipf_weights(rows, alpha)
    return weights / weights.sum()


@functools.lru_cache(maxsize=64)
def _rank_groups(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Representative ranks and their counts: every rank up to _EXACT_RANKS, then geometric buckets."""
    head = np.arange(1, min(rows, _EXACT_RANKS) + 1, dtype=np.float64)
    if rows <= _EXACT_RANKS:
        return head, np.ones_like(head)
    edges = np.unique(np.geomspace(_EXACT_RANKS + 1, rows + 1, _BUCKETS).astype(np.int64))
    edges[0], edges[-1] = _EXACT_RANKS + 1, rows + 1
    counts = np.diff(edges).astype(np.float64)
    keep = counts > 0
    mids = np.sqrt(edges[:-1] * (edges[1:] - 1).clip(min=edges[:-1]))[keep]  # geometric middle of each bucket
    return np.concatenate([head, mids]), np.concatenate([np.ones_like(head), counts[keep]])


def expected_unique(alpha: float, rows: int, draws: int) -> float:
    """Expected distinct ids among `draws` independent Zipf(alpha) draws over `rows` rows."""
    ranks, counts = _rank_groups(rows)
    weights = ranks ** -alpha
    p = weights / float(np.dot(weights, counts))
    return float(np.dot(counts, -np.expm1(draws * np.log1p(-np.minimum(p, 1 - 1e-12)))))


def fit_alpha(unique_per_batch: dict, rows: int) -> float:
    """The exponent whose expected unique ids per batch best match `unique_per_batch` ({batch: unique})."""
    targets = [(int(b), float(u)) for b, u in unique_per_batch.items() if int(b) in FIT_BATCHES]

    def loss(alpha: float) -> float:
        return sum((math.log(expected_unique(alpha, rows, b)) - math.log(u)) ** 2 for b, u in targets)

    grid = np.linspace(*ALPHA_RANGE, 81)
    best = min(grid, key=loss)
    lo, hi = max(ALPHA_RANGE[0], best - 0.05), min(ALPHA_RANGE[1], best + 0.05)
    for _ in range(30):  # golden-section refinement around the best grid point
        a, b = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
        lo, hi = (lo, b) if loss(a) < loss(b) else (a, hi)
    return round((lo + hi) / 2, 4)


class ZipfIds:
    """Zipf(alpha) ids over `rows` rows without per-row arrays: continuous inverse CDF, then a scramble.

    The rank -> id map `(rank * multiplier + offset) mod rows` is a bijection (the multiplier is prime
    to `rows`), so frequent ids are spread over the table instead of sitting at its start.
    """

    def __init__(self, rows: int, alpha: float, seed_sequence: list[int]) -> None:
        rng = np.random.default_rng(seed_sequence)
        self.rows, self.alpha = int(rows), float(alpha)
        multiplier = int(rng.integers(rows // 3 + 1, max(rows, 2))) | 1
        while math.gcd(multiplier, rows) != 1:
            multiplier += 2
        self.multiplier, self.offset = multiplier, int(rng.integers(0, rows))

    def ranks(self, u: np.ndarray) -> np.ndarray:
        n, a = self.rows, self.alpha
        if a == 0.0:
            r = u * n
        elif abs(a - 1.0) < 1e-9:
            r = np.expm1(u * math.log(n + 1))
        else:
            r = (1.0 + u * ((n + 1.0) ** (1.0 - a) - 1.0)) ** (1.0 / (1.0 - a)) - 1.0
        return np.minimum(r.astype(np.int64), n - 1)

    def sample(self, rng: np.random.Generator, shape) -> np.ndarray:
        ranks = self.ranks(rng.random(shape))
        return (ranks * self.multiplier + self.offset) % self.rows  # both factors < rows: no int64 overflow below 3e9 rows
