"""The highest Server load that meets the latency bound: a bracketed search over LoadGen's target QPS.

Each step is a whole LoadGen run at one target QPS, judged VALID or INVALID by LoadGen itself (its p99
bound with early stopping, its minimum duration and query count). From the first target the search
moves up (after VALID) or down (after INVALID) by a factor until the verdict flips, then tries the
geometric middle of the bracket until its ends are within the resolution or the steps are spent. The
answer is the bracket: the highest VALID target and the lowest INVALID one. On a busy machine a lower
load can fail where a higher one passed; the bracket then says so (`monotonic` false) instead of
hiding a step.

LoadGen's own FindPeakPerformance mode is not used: it judges its probes on the p99 bound without
early stopping and reports only the peak, where this search keeps every step's verdict and percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from bench.metrics import LATENCY_MS, MAX_QPS, SAMPLES_PER_S, hi, lo

Step = dict[str, Any]  # one LoadGen run (bench.serve.loadgen.read_step), with `target_qps` and `validity`


@dataclass
class Search:
    steps: list[Step] = field(default_factory=list)
    stop: str = ""  # why the search ended

    @property
    def valid(self) -> list[float]:
        return [s["target_qps"] for s in self.steps if s["validity"] == "VALID"]

    @property
    def invalid(self) -> list[float]:
        return [s["target_qps"] for s in self.steps if s["validity"] != "VALID"]

    @property
    def highest_valid(self) -> Optional[float]:
        return max(self.valid, default=None)

    @property
    def lowest_invalid(self) -> Optional[float]:
        return min(self.invalid, default=None)

    @property
    def monotonic(self) -> bool:
        lo, hi = self.highest_valid, self.lowest_invalid
        return lo is None or hi is None or lo < hi

    def at_max(self) -> Optional[Step]:
        """The step at the highest VALID target, or, when none was VALID, the lowest load tried."""
        if self.highest_valid is not None:
            return next(s for s in self.steps if s["validity"] == "VALID" and s["target_qps"] == self.highest_valid)
        return min(self.steps, key=lambda s: s["target_qps"], default=None)

    def as_metrics(self) -> dict[str, Any]:
        at = self.at_max() or {}
        return {
            MAX_QPS: self.highest_valid if self.highest_valid is not None else 0.0,  # 0: no load met the bound
            lo(MAX_QPS): self.highest_valid,
            hi(MAX_QPS): self.lowest_invalid,
            "monotonic": self.monotonic,
            "search_stop": self.stop,
            LATENCY_MS: at.get(LATENCY_MS),
            SAMPLES_PER_S: at.get(SAMPLES_PER_S),
            "steps": self.steps,
        }


def find_max_qps(run_step: Callable[[float], Step], start: float, factor: float, resolution: float, max_steps: int,
                 min_qps: float, snap: Callable[[float], float] = float, hopeless: Optional[str] = None,
                 budget: Optional[tuple[float, Callable[[float], float]]] = None) -> Search:
    """`snap` rounds each next target; `hopeless` (a reason) ends the search at its first INVALID step
    instead of stepping down, when no lower load can meet the bound; `budget` (seconds, and a run's
    expected length at a target) ends it before a step that would go past the seconds."""
    search = Search()
    qps, spent = start, 0.0
    while True:
        step = run_step(qps)
        search.steps.append(step)
        spent += budget[1](qps) if budget else 0.0
        lo, hi = search.highest_valid, search.lowest_invalid
        if hopeless and step["validity"] != "VALID":
            search.stop = hopeless
            return search
        if lo is not None and hi is not None:
            if lo >= hi:
                search.stop = f"a load of {hi:g} QPS was INVALID below a VALID {lo:g} QPS: the machine's load changed between steps"
                return search
            if hi / lo <= 1 + resolution:
                search.stop = f"bracket within {resolution:.0%}"
                return search
            qps = snap(math.sqrt(lo * hi))
        elif lo is None:
            qps = snap(hi / factor)
            if qps < min_qps:
                search.stop = f"no target QPS down to {hi:g} met the bound (serve.min_qps={min_qps:g})"
                return search
        else:
            qps = snap(lo * factor)
        if len(search.steps) >= max_steps:
            search.stop = f"{max_steps} steps (serve.max_steps)"
            return search
        if budget and spent + budget[1](qps) > budget[0]:
            search.stop = f"the next step ({qps:g} QPS) would take the search past {budget[0]:g} s (serve.max_search_s)"
            return search
