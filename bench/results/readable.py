"""What the results count as missing, and when an interval is too wide to read: the rules the results
table's verdicts follow and the reports print by."""

from __future__ import annotations

import math
from typing import Any


def missing(x: Any) -> bool:
    if x is None:
        return True
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return False


# An interval of a positive figure (a speedup, a throughput) wider than this cannot be read: its upper
# bound over its lower, or either bound against its point, beyond this factor.
UNREADABLE_SPAN = 5.0


def unreadable(point: Any, lo: Any, hi: Any, span: float = UNREADABLE_SPAN) -> bool:
    """Whether the interval [lo, hi] around a positive `point` is too wide to read: hi/lo beyond `span`,
    a bound `span` times its point away, or a lower bound at or below zero. A missing one is not."""
    if missing(point) or missing(lo) or missing(hi):
        return False
    point, lo, hi = float(point), float(lo), float(hi)
    if point <= 0 or lo <= 0:
        return True
    return hi / lo > span or hi / point > span or point / lo > span


def too_short(calls: Any = None) -> str:
    """What an unreadable interval prints as: too short to judge (48 calls)."""
    return "too short to judge" + ("" if missing(calls) else f" ({float(calls):,.0f} calls)")
