"""The highest Server load that meets the latency bound: a bracketed search over LoadGen's target QPS.

Each run is a whole LoadGen run at one target QPS, judged VALID or INVALID by LoadGen itself (its p99
bound with early stopping, its minimum duration and query count). A target's verdict is a judgment:
its first run settles it when the run is clear (VALID with no query over the bound and p99 within
CLEAR_P99 of the bound; INVALID with at least CLEAR_LATE times the late share the percentile allows,
not counting the queries that sat behind a stall);
otherwise, near the boundary, the target runs again, up to `judgments` runs, until a majority agrees.
Every target is judged by that one rule, the bracket's ends included. Each rerun draws a fresh
LoadGen schedule (its seeds derived from the run's number at that target), so a verdict holds for the
load, not for one draw of arrival times: rerunning the same schedule would replay the same bursts.

From the first target the search moves up (after VALID) or down (after INVALID) by a factor until the
judged verdict flips, then tries the geometric middle of the bracket until its ends are within the
resolution, `max_steps` targets were judged, or the next run would take it past the time budget. The
answer is monotone: the max QPS is the highest VALID target below every INVALID one, and a VALID
target above an INVALID one (the machine's load changed) is reported (`monotonic` false), not taken.

Budget: `max_steps` counts targets, however many runs each took; the time budget counts every run. A
judgment once begun runs to its majority, so a search can pass the budget by at most `judgments - 1`
runs (`2 * judgments - 1` when runs were set aside, below); a new target starts only when its first run fits.

A run during which the hypervisor took more than `max_steal` of the CPU time (`serve.max_steal`, default
5%; steal, measured over the run) is *disturbed*: a neighbour on the host, not the backend, set its latencies.
So is a run the host served slower than its usual pace here (`serve.max_slowdown`, bench.serve.pace). A disturbed run is
kept and shown but does not count toward its target's majority, and its target runs again, up to
twice `judgments` runs in all; when every run at a target was disturbed, they all count (the search
says so in the evidence: "1 set aside: steal", "2 set aside: slow host").

LoadGen's own FindPeakPerformance mode is not used: it judges its probes on the p99 bound without
early stopping and reports only the peak, where this search keeps every run's verdict and percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Optional

from bench.config.schema import MAX_STEAL
from bench.metrics import LATENCY_MS, MAX_QPS, SAMPLES_PER_S, hi, lo

Step = dict[str, Any]  # one LoadGen run (bench.serve.loadgen.read_step), with `target_qps` and `validity`

CLEAR_P99 = 0.5  # a VALID first run with no late query and p99 within this share of the bound settles its target
CLEAR_LATE = 10.0  # an INVALID first run with this many times the allowed late share (10% at p99) settles its target


@dataclass
class Judgment:
    """The runs at one target and the verdict their majority gave."""

    target_qps: float
    runs: list[Step] = field(default_factory=list)
    max_steal: Optional[float] = MAX_STEAL  # None: no run is set aside for steal

    def disturbed(self, step: Step) -> bool:
        return disturbed(step, self.max_steal)

    @property
    def counted(self) -> list[Step]:
        """The runs the verdict stands on: the undisturbed ones, or every run when all were disturbed."""
        return [s for s in self.runs if not self.disturbed(s)] or self.runs

    @property
    def set_aside(self) -> int:
        return len(self.runs) - len(self.counted)

    @property
    def valid_runs(self) -> int:
        return sum(1 for s in self.counted if s["validity"] == "VALID")

    @property
    def verdict(self) -> str:
        """The verdict of the runs, by their majority."""
        return "VALID" if 2 * self.valid_runs > len(self.counted) else "INVALID"

    def agreeing(self) -> int:
        """The search's runs that agree with its own majority."""
        return self.valid_runs if self.verdict == "VALID" else len(self.counted) - self.valid_runs

    def evidence(self) -> str:
        aside = f" ({aside_words([s for s in self.runs if self.disturbed(s)], self.max_steal)})" if self.set_aside else ""
        return f"{self.verdict} {self.agreeing()}/{len(self.counted)} at {self.target_qps:g}{aside}"

    def settled(self, judgments: int, percentile: float) -> bool:
        if len(self.runs) == 1 and not self.disturbed(self.runs[0]) and clear(self.runs[0], percentile):
            return True
        if len(self.runs) >= 2 * judgments:  # the cap, disturbed runs included
            return True
        undisturbed = sum(1 for s in self.runs if not self.disturbed(s))
        return undisturbed > 0 and (self.agreeing() * 2 > judgments or undisturbed >= judgments)

    def as_metrics(self) -> dict[str, Any]:
        return {"target_qps": self.target_qps, "verdict": self.verdict, "runs": len(self.runs),
                "valid_runs": self.valid_runs, "set_aside": self.set_aside, "evidence": self.evidence()}


def disturbed(step: Step, max_steal: Optional[float] = MAX_STEAL) -> bool:
    """A run set aside: the hypervisor took more than `max_steal` of the CPU time (its `machine.steal_share`), or
    the host served the model slower than its usual pace here (`machine.host_slow`, bench.serve.pace)."""
    return aside_cause(step, max_steal) is not None


def aside_cause(step: Step, max_steal: Optional[float] = MAX_STEAL) -> Optional[str]:
    """Why a run is set aside ('steal', 'slow host'), None when it counts."""
    machine = step.get("machine") or {}
    steal = machine.get("steal_share")
    if max_steal is not None and steal is not None and steal > max_steal:
        return "steal"
    return "slow host" if machine.get("host_slow") else None


def aside_words(steps: list[Step], max_steal: Optional[float] = MAX_STEAL) -> str:
    """'2 set aside: steal', '3 set aside: slow host', '3 set aside: 1 steal, 2 slow host'; '' when none was."""
    causes = [c for c in (aside_cause(s, max_steal) for s in steps) if c]
    if not causes:
        return ""
    kinds = {c: causes.count(c) for c in dict.fromkeys(causes)}
    detail = next(iter(kinds)) if len(kinds) == 1 else ", ".join(f"{n} {c}" for c, n in kinds.items())
    return f"{len(causes)} set aside: {detail}"


def clear(step: Step, percentile: float = 0.99) -> bool:
    """A run whose verdict a rerun would not overturn: far inside the bound, or far beyond it."""
    late, queries, p99 = step.get("overlatency_queries"), step.get("queries"), (step.get(LATENCY_MS) or {}).get("p99")
    bound = step.get("bound_ms")
    if late is None or not queries:
        return True  # nothing to judge again on (a stand-in or a hopeless step)
    if step["validity"] == "VALID":
        return late == 0 and p99 is not None and bound is not None and p99 <= CLEAR_P99 * bound
    # Late queries behind a stall (bench.serve.late) say nothing of the load: one long pause can put more
    # queries over the bound than this threshold, so they do not make a run clear; it is judged again.
    behind_stalls = ((step.get("late") or {}).get("causes") or {}).get("stall", 0)
    return late - behind_stalls >= round(CLEAR_LATE * (1 - percentile) * queries, 6)


@dataclass
class Search:
    judged: list[Judgment] = field(default_factory=list)
    stop: str = ""  # why the search ended

    @property
    def steps(self) -> list[Step]:
        return [s for j in self.judged for s in j.runs]

    @property
    def invalid(self) -> list[float]:
        return [j.target_qps for j in self.judged if j.verdict != "VALID"]

    @property
    def lowest_invalid(self) -> Optional[float]:
        return min(self.invalid, default=None)

    @property
    def valid(self) -> list[float]:
        """VALID targets below every INVALID one: what the search concludes the machine holds."""
        hi = self.lowest_invalid
        return [j.target_qps for j in self.judged if j.verdict == "VALID" and (hi is None or j.target_qps < hi)]

    @property
    def highest_valid(self) -> Optional[float]:
        return max(self.valid, default=None)

    @property
    def monotonic(self) -> bool:
        hi = self.lowest_invalid
        return hi is None or all(j.target_qps < hi for j in self.judged if j.verdict == "VALID")

    def judgment(self, qps: Optional[float]) -> Optional[Judgment]:
        return next((j for j in self.judged if j.target_qps == qps), None)

    def at_max(self) -> Optional[Step]:
        """The last VALID run at the max QPS, or, when none was VALID, the last run at the lowest load tried."""
        j = self.judgment(self.highest_valid)
        if j is not None:
            return ([s for s in j.runs if s["validity"] == "VALID"] or j.runs)[-1]
        low = min(self.judged, key=lambda j: j.target_qps, default=None)
        return low.runs[-1] if low else None

    def evidence(self) -> str:
        """'VALID 3/3 at 410, INVALID 2/3 at 454': the judgments at the bracket's ends."""
        ends = [self.judgment(q) for q in (self.highest_valid, self.lowest_invalid)]
        return ", ".join(j.evidence() for j in ends if j is not None)

    def as_metrics(self) -> dict[str, Any]:
        at = self.at_max() or {}
        return {
            MAX_QPS: self.highest_valid if self.highest_valid is not None else 0.0,  # 0: no load met the bound
            lo(MAX_QPS): self.highest_valid,
            hi(MAX_QPS): self.lowest_invalid,
            "monotonic": self.monotonic,
            "search_stop": self.stop,
            "evidence": self.evidence(),
            "judgments": [j.as_metrics() for j in self.judged],
            LATENCY_MS: at.get(LATENCY_MS),
            SAMPLES_PER_S: at.get(SAMPLES_PER_S),
            "steps": self.steps,
        }


def find_max_qps(run_step: Callable[[float, int], Step], start: float, factor: float, resolution: float, max_steps: int,
                 min_qps: float, snap: Callable[[float], float] = float, hopeless: Optional[str] = None,
                 budget: Optional[tuple[float, Callable[[float], float]]] = None, judgments: int = 1,
                 percentile: float = 0.99, max_steal: Optional[float] = MAX_STEAL) -> Search:
    """`run_step(qps, n)` runs LoadGen at qps for the n-th time at that target (0 first); `snap` rounds each
    next target; `hopeless` (a reason) ends the search at its first INVALID target instead of stepping down,
    when no lower load can meet the bound; `budget` (seconds, and a run's expected length at a target) ends
    it before a target whose first run would go past the seconds; `judgments` is the most runs per target;
    a run over `max_steal` steal is set aside (None: none is)."""
    return drive(search_plan(start, factor, resolution, max_steps, min_qps, snap, hopeless, budget, judgments, percentile, max_steal),
                 run_step)


Plan = Generator[tuple[float, int], Step, Search]  # asks (qps, n), is sent each run's step, returns the Search


def drive(plan: Plan, run_step: Callable[[float, int], Step]) -> Search:
    """Run a search plan to its end, each run it asks for made by `run_step(qps, n)`."""
    try:
        ask = next(plan)
        while True:
            ask = plan.send(run_step(*ask))
    except StopIteration as done:
        return done.value


def search_plan(start: float, factor: float, resolution: float, max_steps: int, min_qps: float, snap: Callable[[float], float] = float,
                hopeless: Optional[str] = None, budget: Optional[tuple[float, Callable[[float], float]]] = None, judgments: int = 1,
                percentile: float = 0.99, max_steal: Optional[float] = MAX_STEAL) -> Plan:
    """The search of `find_max_qps` as a generator: it yields each run it needs, (qps, n: the run's number at
    that target), is sent the run's step, and returns the Search. Another driver can interleave two plans
    run by run (bench.serve.paired)."""
    search = Search()
    qps, spent = start, 0.0
    while True:
        judgment = Judgment(qps, max_steal=max_steal)
        search.judged.append(judgment)
        while True:
            judgment.runs.append((yield qps, len(judgment.runs)))
            spent += budget[1](qps) if budget else 0.0
            if judgment.settled(judgments, percentile):
                break
        if hopeless and judgment.verdict != "VALID":
            search.stop = hopeless
            return search
        qps, stop = next_target(search, factor, resolution, max_steps, min_qps, snap)
        if qps is not None and budget and spent + budget[1](qps) > budget[0]:
            qps, stop = None, f"the next target ({qps:g} QPS) would take the search past {budget[0]:g} s (serve.max_search_s)"
        if qps is None:
            search.stop = stop
            return search


def next_target(search: Search, factor: float, resolution: float, max_steps: int, min_qps: float,
                snap: Callable[[float], float] = float) -> tuple[Optional[float], str]:
    """The next target a search's judgments ask for, or None and why the search ends there."""
    lo, hi = search.highest_valid, search.lowest_invalid
    if not search.monotonic:
        return None, (f"a load of {hi:g} QPS was judged INVALID below a VALID "
                      f"{max(j.target_qps for j in search.judged if j.verdict == 'VALID'):g} QPS: the machine's load changed between runs")
    if lo is not None and hi is not None:
        if hi / lo <= 1 + resolution:
            return None, f"bracket within {resolution:.0%}"
        qps = snap(math.sqrt(lo * hi))
    elif lo is None:
        qps = snap(hi / factor)
        if qps < min_qps:
            return None, f"no target QPS down to {hi:g} met the bound (serve.min_qps={min_qps:g})"
    else:
        qps = snap(lo * factor)
    if search.judgment(qps) is not None:
        return None, f"the next target rounds to {qps:g} QPS, already judged"
    if len(search.judged) >= max_steps:
        return None, f"{max_steps} targets (serve.max_steps)"
    return qps, ""
