"""The search policy, pure: which precision for which table, and how far the measured candidates allow.

Each table has options (precision, bytes, predicted AUC loss), its widest (fp32) costing nothing.
`frontier` solves the multiple-choice knapsack "fewest bytes for a summed predicted loss of at most L"
exactly, for every L on a grid (dynamic programming over tables, losses rounded to the nearest grid
unit), and returns its distinct solutions: the candidates, fewest bytes last, each with more predicted
loss than the one before. Candidate 0 is every table at its widest precision.

Summed losses are only a prediction: tables interact. So candidates are measured, and
`largest_passing` finds the last candidate whose measurement passes, starting at the last one
predicted to fit and bisecting forward (when it passes) or back (when it does not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from bench.results.tune import Candidate


@dataclass(frozen=True)
class Option:
    precision: str
    bytes: int
    loss: float  # predicted AUC loss, >= 0


def frontier(options: Mapping[str, Sequence[Option]], unit: float, max_loss: float) -> list[Candidate]:
    """Every table at its widest, then the knapsack's solutions for summed losses up to `max_loss`."""
    names = list(options)
    steps = max(int(round(max_loss / unit)), 0)
    # best[L]: fewest bytes with summed (grid) loss <= L over the tables so far; choice[t][L]: table t's option there
    best = np.zeros(steps + 1)
    choices = []
    for name in names:
        opts = options[name]
        new = np.full(steps + 1, np.inf)
        pick = np.zeros(steps + 1, dtype=np.int64)
        for i, o in enumerate(opts):
            cost = int(round(o.loss / unit))
            if cost > steps:
                continue
            shifted = np.full(steps + 1, np.inf)
            shifted[cost:] = best[: steps + 1 - cost] + o.bytes
            better = shifted < new
            new[better], pick[better] = shifted[better], i
        best = new
        choices.append(pick)

    def solution(level: int) -> Candidate:
        per_table, loss = {}, 0.0
        for name, pick in zip(reversed(names), reversed(choices)):
            o = options[name][pick[level]]
            per_table[name] = o.precision
            loss += o.loss
            level -= int(round(o.loss / unit))
        ordered = {n: per_table[n] for n in names}
        return Candidate(ordered, sum(_bytes(options[n], p) for n, p in ordered.items()), loss)

    widest = {n: max(options[n], key=lambda o: o.bytes) for n in names}
    out = [Candidate({n: o.precision for n, o in widest.items()}, sum(o.bytes for o in widest.values()), 0.0)]
    for level in range(steps + 1):
        if np.isfinite(best[level]) and best[level] < out[-1].bytes:
            out.append(solution(level))
    return out


def _bytes(opts: Sequence[Option], precision: str) -> int:
    return next(o.bytes for o in opts if o.precision == precision)


def predicted_index(candidates: Sequence[Candidate], allowance: float) -> int:
    """The last candidate whose predicted loss fits `allowance` (0 when none does)."""
    fitting = [i for i, c in enumerate(candidates) if c.predicted_loss <= allowance + 1e-15]
    return fitting[-1] if fitting else 0


def largest_passing(n: int, passes: Callable[[int], bool], first: int) -> tuple[int, dict[int, bool]]:
    """The largest k in [0, n) with passes(k), probing `first`, then bisecting (monotone in k assumed).

    Returns (k, probes); k is -1 when even candidate 0 fails. Each k is measured at most once.
    """
    probes: dict[int, bool] = {}

    def ok(k: int) -> bool:
        if k not in probes:
            probes[k] = bool(passes(k))
        return probes[k]

    first = min(max(first, 0), n - 1)
    lo, hi = (first, n) if ok(first) else (-1, first)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes
