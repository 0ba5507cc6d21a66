"""LoadGen's early-stopping rule for the Server scenario, to size a step before it runs.

LoadGen (loadgen/early_stopping.cc, results.cc) judges a Server run of n queries with t of them over
the bound as passing early stopping when n >= h + t, where h is the fewest on-time queries such that
t or fewer late ones in h + t would happen with probability at most 1 - c if each query were late with
probability 1 - p (p: the latency percentile, 0.99; c: LoadGen's fixed confidence, 0.99). That
probability is the binomial tail P[Binom(h + t, 1 - p) <= t] = I_p(h, t + 1), the regularized
incomplete beta function. The Python bindings do not expose the rule, so it is written out here from
that definition (scipy's `betainc`); tests check it against LoadGen's own figures (459 queries with
none late; "959 more queries" after 11 of 1,185 late). LoadGen still judges every run itself: this
only picks how many queries a step holds and says what that many can tell.
"""

from __future__ import annotations

from functools import lru_cache

from scipy.special import betainc
from scipy.stats import binom

CONFIDENCE = 0.99  # LoadGen's, fixed in results.cc


@lru_cache(maxsize=None)
def min_on_time(late: int, percentile: float = 0.99) -> int:
    """h: the fewest on-time queries beside `late` late ones for a run to pass early stopping."""
    lo, hi = 1, 1
    while betainc(hi, late + 1, percentile) >= 1 - CONFIDENCE:
        lo, hi = hi, hi * 2
    while lo < hi:  # the smallest h in (lo, hi] whose tail is below 1 - c
        mid = (lo + hi) // 2
        if betainc(mid, late + 1, percentile) < 1 - CONFIDENCE:
            hi = mid
        else:
            lo = mid + 1
    return lo


def tolerated_late(queries: int, percentile: float = 0.99) -> int | None:
    """The most late queries a run of `queries` can hold and still pass early stopping (None: not even zero)."""
    if queries < min_on_time(0, percentile):
        return None
    late = 0
    while min_on_time(late + 1, percentile) + late + 1 <= queries:
        late += 1
    return late


def queries_for_share(share: float, percentile: float = 0.99) -> int:
    """The fewest queries whose early stopping passes a run where `share` of the percentile's allowance
    (1 - percentile) was late: 0.3 at p99 tolerates 0.3% late queries."""
    if not 0 <= share < 1:
        raise ValueError(f"the share of the late allowance must be in [0, 1), got {share}")
    late = 0
    while True:
        n = min_on_time(late, percentile) + late
        if late >= share * (1 - percentile) * n:
            return n
        late += 1


def pass_probability(queries: int, late_rate: float, percentile: float = 0.99) -> float:
    """The chance that a run of `queries` passes early stopping when each query is late with `late_rate`."""
    t = tolerated_late(queries, percentile)
    return 0.0 if t is None else float(binom.cdf(t, queries, late_rate))


def late_rate_passing(queries: int, chance: float, percentile: float = 0.99) -> float:
    """The late rate at which a run of `queries` passes early stopping with probability `chance`."""
    lo, hi = 0.0, 1 - percentile
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pass_probability(queries, mid, percentile) >= chance else (lo, mid)
    return lo


def what_a_step_tells(queries: int, percentile: float = 0.99) -> str:
    """A step of that many queries in words: the late queries it tolerates, and the late rates it passes."""
    t = tolerated_late(queries, percentile)
    if t is None:
        return (f"a step of {queries:,} queries cannot pass LoadGen's early stopping at all "
                f"(it needs {min_on_time(0, percentile)} with none late)")
    surely, half = late_rate_passing(queries, 0.9, percentile), late_rate_passing(queries, 0.5, percentile)
    return (f"a step of {queries:,} queries passes early stopping with up to {t} late; a load with "
            f"{surely:.2%} of its queries late passes 9 times in 10, one with {half:.2%} late half the time "
            f"(the p{percentile * 100:g} bound allows {1 - percentile:.0%})")
