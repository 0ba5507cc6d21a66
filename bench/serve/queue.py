"""The load a single-server queue with this SUT's measured service times could hold under the bound.

Why a simulation and not M/G/1's formula: Pollaczek-Khinchine gives the mean wait, where the bound is
on the p99 of the latency, and it serves one query at a time, where the SUT's batcher merges waiting
queries into one call whose time grows far slower than its rows. So the estimate replays the SUT's
own rule on Poisson arrivals at a trial rate: one worker; a free worker takes the waiting queries in
order up to `max_rows` rows once the oldest has waited `max_wait_s` or the rows are there; a batch of
r pairs takes the typical time of r pairs (a line through the measured batches' medians by size)
times a ratio drawn from the measured batches' own ratios to that line, so the measured spread and
tail (descheduling, stalls) are in. Query sizes are drawn from the query set. The estimate is the
highest rate whose simulated p99 stays within the bound (bisection); the simulation is seeded, so the
same measurements give the same estimate. It leaves out LoadGen's own overhead and early stopping: a
Server max QPS well below it says the SUT serves worse than its measured service times allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

QUERIES = 10_000  # simulated queries per trial rate
PERCENTILE = 99.0


@dataclass
class ServiceModel:
    """Service time of a batch: intercept + slope x pairs, times a measured ratio drawn at random."""

    intercept_ms: float
    slope_ms: float
    ratios: np.ndarray  # measured time / typical time of each measured batch (1.0: none measured)

    @classmethod
    def fit(cls, pairs: np.ndarray, ms: np.ndarray, with_spread: bool = True) -> "ServiceModel":
        pairs, ms = np.asarray(pairs, dtype=float), np.asarray(ms, dtype=float)
        # The line goes through the measured medians of each batch size, weighted by how many batches
        # each holds: a stall moves no median, and the few large batches still pull the slope. (Fitting
        # the binned `typical_ms` instead flattened the slope: it is constant beyond its outer bins, and
        # fake_quant's 15 ms per 1000 pairs came out as 4.7.)
        sizes, counts = np.unique(pairs, return_counts=True)
        points = np.asarray([np.median(ms[pairs == s]) for s in sizes])
        if len(sizes) >= 2:
            slope, intercept = np.polyfit(sizes, points, 1, w=np.sqrt(counts))
        else:
            slope, intercept = float(points[0] / sizes[0]), 0.0
        slope, intercept = max(float(slope), 0.0), max(float(intercept), 0.0)
        line = intercept + slope * pairs
        ratios = ms / np.maximum(line, 1e-6) if with_spread else np.ones(1)
        return cls(intercept, slope, ratios)

    def as_metrics(self) -> dict[str, Any]:
        return {"intercept_ms": round(self.intercept_ms, 3), "ms_per_1000_pairs": round(self.slope_ms * 1000, 3),
                "ratio_p50": round(float(np.median(self.ratios)), 3), "ratio_p99": round(float(np.percentile(self.ratios, 99)), 3),
                "batches": int(len(self.ratios))}


def simulate_p99(rate: float, sizes: np.ndarray, model: ServiceModel, max_rows: int, max_wait_s: float,
                 queries: int = QUERIES, seed: int = 0) -> float:
    """The p99 latency (ms) of `queries` Poisson arrivals at `rate` through the batcher and one worker."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / rate, queries))
    pairs = rng.choice(sizes, queries)
    ratio = rng.choice(model.ratios, queries)  # one per batch, indexed by its first query
    cum = np.concatenate([[0], np.cumsum(pairs)])
    latency = np.empty(queries)
    free, i = 0.0, 0
    while i < queries:
        fits = max(int(np.searchsorted(cum, cum[i] + max_rows, side="right")) - 1, i + 1)  # i..fits-1 fit in max_rows
        filled = int(np.searchsorted(cum, cum[i] + max_rows, side="left")) - 1  # its arrival brings max_rows waiting
        due = arrival[i] + max_wait_s
        if filled < queries:
            due = min(due, arrival[filled])
        start = max(free, due)  # the worker takes the batch when it is due and the worker is free
        j = min(max(int(np.searchsorted(arrival, start, side="right")), i + 1), fits)
        finish = start + (model.intercept_ms + model.slope_ms * (cum[j] - cum[i])) * ratio[i] / 1000
        latency[i:j] = finish - arrival[i:j]
        free, i = finish, j
    return float(np.percentile(latency, PERCENTILE) * 1000)


def max_rate(sizes: np.ndarray, model: ServiceModel, max_rows: int, max_wait_s: float, bound_ms: float,
             queries: int = QUERIES, seed: int = 0) -> float:
    """The highest Poisson rate (queries/s) whose simulated p99 is within the bound; 0 when none is."""
    def ok(rate: float) -> bool:
        return simulate_p99(rate, sizes, model, max_rows, max_wait_s, queries, seed) <= bound_ms

    mean_pairs = float(np.mean(sizes))
    # 4x what full batches serve back to back (max_rows / mean_pairs queries per intercept + slope x max_rows ms at
    # the fastest measured ratio): a finite run of queries can sit a little above a worker's capacity, and a line
    # fitted flat (its slope clamped to 0) still has a finite top
    full_ms = (model.intercept_ms + model.slope_ms * max(max_rows, mean_pairs)) * float(np.min(model.ratios))
    lo, hi = 0.0, 4000 * max(max_rows / mean_pairs, 1.0) / max(full_ms, 1e-9)
    if not ok(hi / 64):
        hi = hi / 64
    for _ in range(10):  # to 0.1% of the upper end
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
