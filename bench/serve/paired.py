"""Two Server searches interleaved run by run in ABBA order: the backend's and fp32's, in one process.

On a host whose speed moves in phases of seconds to minutes, one backend's max QPS measured in one
minute and fp32's measured in another differ by the host as much as by the backends. Here both searches
run together: each round makes one run of each, the candidate first in even rounds and fp32 first in
odd ones (C R R C C R R C ...), so every run of either sits beside a run of the other, and a drift that
is linear over two rounds falls on both sides alike. Each search is the ordinary re-judged search
(`bench.serve.qps_search.search_plan`): its own start, targets, verdicts, steal rule and budget.

When one search has ended and the other goes on, the ended side's partner runs are *hold* runs: one
run at its max QPS, on a fresh schedule, so each of the other side's runs still sits beside a run of it
(none when the ended side met no load: it has no max to hold). A hold run does not change its side's verdict; the
record keeps it and says how many held ("fp32 held its max in 3/3 hold runs").

The ratio is candidate max QPS / fp32 max QPS. Its interval is what the two brackets allow together:
the candidate's limit lies in [highest VALID, lowest INVALID] and so does fp32's, so the ratio lies in
[candidate VALID / fp32 INVALID, candidate INVALID / fp32 VALID]. An end is open (None) where a bracket
is: no INVALID target above a search's max (its upper end unknown), or no VALID one (its max is 0).
Both brackets were found in the same minutes, so the host's speed phases move both ends together
instead of moving one backend's figure against the other's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from bench.serve.qps_search import Plan, Search, Step

CANDIDATE, REFERENCE = "candidate", "reference"
SEARCH, HOLD = "search", "hold"
HOLD_DRAW = 100  # a hold run's LoadGen draw starts here: its schedule differs from every search run's at that target

# run(side, qps, draw, role) -> the step; side is CANDIDATE or REFERENCE, role SEARCH or HOLD
RunPaired = Callable[[str, float, int, str], Step]


def order(round_: int) -> tuple[str, str]:
    """Which side runs first in a round: the candidate in even rounds, fp32 in odd ones (ABBA)."""
    return (CANDIDATE, REFERENCE) if round_ % 2 == 0 else (REFERENCE, CANDIDATE)


@dataclass
class PairedSearch:
    candidate: Search
    reference: Search
    runs: list[dict[str, Any]] = field(default_factory=list)  # every run in the order it ran: round, side, role, target, verdict
    holds: dict[str, list[Step]] = field(default_factory=lambda: {CANDIDATE: [], REFERENCE: []})

    @property
    def max_qps(self) -> float:
        return self.candidate.highest_valid or 0.0

    @property
    def reference_max_qps(self) -> float:
        return self.reference.highest_valid or 0.0

    @property
    def ratio(self) -> Optional[float]:
        """Candidate max QPS over fp32's; None when fp32 met no load."""
        return self.max_qps / self.reference_max_qps if self.reference_max_qps > 0 else None

    @property
    def interval(self) -> tuple[Optional[float], Optional[float]]:
        """(low, high) the two brackets allow together; None for an open end."""
        c_lo, c_hi = self.candidate.highest_valid or 0.0, self.candidate.lowest_invalid
        r_lo, r_hi = self.reference.highest_valid or 0.0, self.reference.lowest_invalid
        low = c_lo / r_hi if r_hi else None
        high = c_hi / r_lo if c_hi is not None and r_lo > 0 else None
        return low, high

    def hold_evidence(self, side: str) -> Optional[str]:
        steps = self.holds[side]
        if not steps:
            return None
        held = sum(1 for s in steps if s.get("validity") == "VALID")
        return f"held {held}/{len(steps)} at {steps[0]['target_qps']:g}"

    def as_metrics(self) -> dict[str, Any]:
        low, high = self.interval
        return {
            "qps_ratio": self.ratio, "qps_ratio_lo": low, "qps_ratio_hi": high,
            "reference_max_qps": self.reference_max_qps,
            "method": "paired: the backend's and fp32's Server searches interleaved run by run (ABBA) in one process; "
                      "the interval is what both brackets allow",
            "rounds": max((r["round"] for r in self.runs), default=-1) + 1,
            "runs": self.runs,
            "hold_candidate": self.hold_evidence(CANDIDATE), "hold_reference": self.hold_evidence(REFERENCE),
            "hold_steps": {side: steps for side, steps in self.holds.items() if steps},
        }


def interleave(candidate: Plan, reference: Plan, run: RunPaired) -> PairedSearch:
    """Drive both search plans to their ends, one run of each per round in ABBA order, a side whose search
    has ended making hold runs while the other goes on."""
    plans = {CANDIDATE: candidate, REFERENCE: reference}
    asks: dict[str, Optional[tuple[float, int]]] = {}
    done: dict[str, Search] = {}
    for side, plan in plans.items():
        try:
            asks[side] = next(plan)
        except StopIteration as end:
            done[side] = end.value
    paired = PairedSearch(Search(), Search())
    round_ = 0
    while len(done) < 2:
        active = {side for side in plans if side not in done}  # sides with a search run to make this round
        for side in order(round_):
            if side in active:
                qps, draw = asks[side]
                step = run(side, qps, draw, SEARCH)
                try:
                    asks[side] = plans[side].send(step)
                except StopIteration as end:
                    done[side] = end.value
                role = SEARCH
            else:
                qps = hold_target(done[side])
                if qps is None:
                    continue
                step = run(side, qps, HOLD_DRAW + len(paired.holds[side]), HOLD)
                paired.holds[side].append(step)
                role = HOLD
            paired.runs.append({"round": round_, "side": side, "role": role, "target_qps": qps, "validity": step.get("validity")})
        round_ += 1
    paired.candidate, paired.reference = done[CANDIDATE], done[REFERENCE]
    return paired


def hold_target(search: Search) -> Optional[float]:
    """Where an ended search's hold runs go: its max QPS; None (no hold runs) when no target was VALID: there is
    no max to hold, and a run at a low target is long (its queries / QPS)."""
    return search.highest_valid
