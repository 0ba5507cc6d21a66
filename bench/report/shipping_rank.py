"""The one pick rule: which of the candidates inside the accuracy budget to ship, best first.

Both "what to ship" answers rank with it: report.md's bottom line (`bench.report.pick.picks`) and
`python -m bench recommend` (`bench.recommend.decide.ranked`). Among the candidates within the budget
(`bench.stats.budget_verdict`, the one accuracy rule), the best by the answer's own measure first, then
the smaller ΔAUC drop, then the fewer bytes, then the name. The measure is where the two answers differ,
and it is a parameter:

- the bottom line: the embedding bytes, the smallest model (`smallest`). Nothing timed enters which
  backend is named, so two runs apart only by noise name the same pick; its paired offline speedup is
  read beside it (`smallest`).
- recommend: the Server QPS under the p99 bound, read through the paired ratio to fp32 (closed brackets
  first, the fewest threads that hold a target rate, then the interval's low end): what a deployment
  is chosen for.

Pure functions: nothing is measured here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Generic, Optional, Sequence, TypeVar

from bench import stats

T = TypeVar("T")


@dataclass(frozen=True)
class Shippable(Generic[T]):
    """What the rule reads of one candidate; `item` is the caller's own (a results row, a confirmed candidate)."""

    item: T
    name: str
    auc_delta: float
    auc_delta_lo: float
    auc_delta_hi: float
    size: float  # bytes or MB: fewer is better; NaN (not recorded) ranks last


def smallest(s: Shippable) -> tuple:
    """The bottom line's measure: the smallest model first (its size)."""
    return (_last(s.size),)


def _last(x: float) -> float:
    return math.inf if math.isnan(x) else x


def within(s: Shippable, budget: Optional[float]) -> bool:
    """Whether the candidate may be shipped at all: its ΔAUC within the budget (None: judged before, by the same rule)."""
    return budget is None or stats.budget_verdict(s.auc_delta_lo, s.auc_delta_hi, budget) == stats.WITHIN_BUDGET


def rank(candidates: Sequence[Shippable[T]], budget: Optional[float],
         measure: Callable[[Shippable], tuple] = smallest) -> list[Shippable[T]]:
    """The candidates within `budget`, best first: by `measure` (lower first), then the smaller ΔAUC drop, then the
    fewer bytes, then the name."""
    def key(s: Shippable) -> tuple:
        return (*measure(s), -(-math.inf if math.isnan(s.auc_delta) else s.auc_delta), _last(s.size), s.name)
    return sorted((s for s in candidates if within(s, budget)), key=key)


__all__ = ["Shippable", "smallest", "rank", "within"]
