"""Two Server searches interleaved run by run in ABBA order: the backend's and fp32's, in one process,
their bracket ends then re-judged by paired confirmation runs.

On a host whose speed moves in phases of seconds to minutes, one backend's max QPS measured in one
minute and fp32's measured in another differ by the host as much as by the backends. Here both searches
run together: each round makes one run of each, the candidate first in even rounds and fp32 first in
odd ones (C R R C C R R C ...), so every run of either sits beside a run of the other, and a drift that
is linear over two rounds falls on both sides alike. Each search is the ordinary re-judged search
(`bench.serve.qps_search.search_plan`): its own start, targets, verdicts, steal rule and budget.

Pairing the runs in time does not pair what they decide. The two searches sit at different points of
their paths when a stall or a slow phase comes, and one run's verdict often settles a bracket end (a
target judged by one clear run, or 2 of 3): a transient that fails the run at one side's end, and not
the partner's run beside it, sets that side's max for the rest of its search. So the ends are judged
again, paired:

- **Confirmation runs.** Once a side's search has ended, each of its runs is a confirmation run at one of
  its bracket ends: its max (the VALID end) and the lowest INVALID target above it, the end with fewer
  confirmations first; a side that met no load confirms its lowest target. While the other side's
  search goes on, these runs sit beside its search runs; after both searches have ended, both sides
  make confirmation runs in ABBA rounds until each end has `confirm_runs` of them, or the next round
  would take a side past its time budget (the search's and its confirmations' runs together).
- **Overturning.** An end is *reversed* when at least `confirm_runs` confirmation runs were made at it
  and a strict majority of them disagree with the search's verdict there (a VALID max failing, an
  INVALID end passing). A reversed end is overturned, and the bracket is read again from the verdicts
  (the max falls to the next VALID target below, or rises to the overturned one), unless the partner
  has an end reversed the same way in the same minutes: then the host moved both sides, the ratio
  stands, and both verdicts are kept (the record names them). A single transient on one side's
  confirmation run cannot reverse an end on its own: with two runs both must disagree.
- **Re-opening.** A side with an end overturned goes on searching from its revised bracket, with its own
  search's rules (at most `REOPEN_STEPS` more targets, the first made whatever time its budget has left),
  while its partner makes hold runs at its max beside it (they change no verdict). Without it, a max
  overturned with no VALID target below would leave the side with no max at all.

The ratio is candidate max QPS / fp32 max QPS. Its interval is what the two brackets allow together:
the candidate's limit lies in [highest VALID, lowest INVALID] and so does fp32's, so the ratio lies in
[candidate VALID / fp32 INVALID, candidate INVALID / fp32 VALID]. An end is open (None) where a bracket
is: no INVALID target above a search's max (its upper end unknown), or no VALID one (its max is 0).
A side that met no load, even at its lowest target after confirmation, has no max: the ratio is None
(not 0), and the interval says only that it lies below that target's share of the partner's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from bench.serve.qps_search import Judgment, Plan, Search, Step

CANDIDATE, REFERENCE = "candidate", "reference"
SIDES = (CANDIDATE, REFERENCE)
SEARCH, CONFIRM, HOLD = "search", "confirm", "hold"
REOPEN_STEPS = 2  # a re-opened search judges at most this many more targets
LOW, HIGH = "low", "high"  # a bracket's VALID end (the max) and its INVALID end above it
CONFIRM_DRAW = 100  # a confirmation run's LoadGen draw starts here: its schedule differs from every search run's at that target
CONFIRM_RUNS = 2  # the default of serve.confirm_runs

# run(side, qps, draw, role) -> the step; side is CANDIDATE or REFERENCE, role SEARCH, CONFIRM or HOLD
RunPaired = Callable[[str, float, int, str], Step]
Budget = tuple[float, Callable[[float], float]]  # seconds per side, and how long one run at a target lasts
# reopen(side, search, seconds left to it or None) -> the plan that goes on from the search's revised judgments
Reopen = Callable[[str, Search, Optional[float]], Plan]


def order(round_: int) -> tuple[str, str]:
    """Which side runs first in a round: the candidate in even rounds, fp32 in odd ones (ABBA)."""
    return (CANDIDATE, REFERENCE) if round_ % 2 == 0 else (REFERENCE, CANDIDATE)


def bracket_ends(search: Search) -> dict[str, Judgment]:
    """The judgments a confirmation re-judges: the max (LOW) and the INVALID target above it (HIGH, when there
    is one); for a search that met no load, its lowest target (LOW, an INVALID one)."""
    ends: dict[str, Judgment] = {}
    top = search.judgment(search.highest_valid)
    if top is not None:
        ends[LOW] = top
        above = search.judgment(search.lowest_invalid)
        if above is not None:
            ends[HIGH] = above
    elif search.judged:
        ends[LOW] = min(search.judged, key=lambda j: j.target_qps)
    return ends


def next_end(ends: dict[str, Judgment]) -> Optional[Judgment]:
    """The end a side's next confirmation run goes to: the one with fewer confirmations, its max first."""
    return min((ends[e] for e in (LOW, HIGH) if e in ends), key=lambda j: len(j.confirmations), default=None)


def reversed_by(judgment: Judgment, confirm_runs: int) -> Optional[str]:
    """The verdict a strict majority of at least `confirm_runs` confirmation runs gave against the search's
    verdict at this end; None when they did not reverse it."""
    runs = judgment.counted_confirmations
    against = [s for s in runs if s["validity"] != judgment.searched]
    if confirm_runs > 0 and len(runs) >= confirm_runs and 2 * len(against) > len(runs):
        return "VALID" if judgment.searched == "INVALID" else "INVALID"
    return None


@dataclass
class PairedSearch:
    candidate: Search
    reference: Search
    confirm_runs: int = CONFIRM_RUNS
    runs: list[dict[str, Any]] = field(default_factory=list)  # every run in the order it ran: round, side, role, target, verdict
    ends: dict[str, dict[str, Judgment]] = field(default_factory=dict)  # each side's bracket ends when its search ended
    kept: dict[str, list[float]] = field(default_factory=lambda: {CANDIDATE: [], REFERENCE: []})  # reversed, but the partner too
    reopened: dict[str, list[float]] = field(default_factory=lambda: {CANDIDATE: [], REFERENCE: []})  # targets judged after re-opening

    @property
    def max_qps(self) -> float:
        return self.candidate.highest_valid or 0.0

    @property
    def reference_max_qps(self) -> float:
        return self.reference.highest_valid or 0.0

    @property
    def ratio(self) -> Optional[float]:
        """Candidate max QPS over fp32's; None when either met no load (a 0 is not a figure: its max is below
        its lowest target, which the interval's upper end says)."""
        return self.max_qps / self.reference_max_qps if self.max_qps > 0 and self.reference_max_qps > 0 else None

    @property
    def interval(self) -> tuple[Optional[float], Optional[float]]:
        """(low, high) the two brackets allow together; None for an open end."""
        c_lo, c_hi = self.candidate.highest_valid or 0.0, self.candidate.lowest_invalid
        r_lo, r_hi = self.reference.highest_valid or 0.0, self.reference.lowest_invalid
        low = c_lo / r_hi if r_hi else None
        high = c_hi / r_lo if c_hi is not None and r_lo > 0 else None
        return low, high

    def confirmations(self, side: str) -> int:
        return sum(len(j.confirmations) for j in self.ends.get(side, {}).values())

    def needs_confirmation(self) -> bool:
        return any(len(j.confirmations) < self.confirm_runs for ends in self.ends.values() for j in ends.values())

    def judge(self) -> None:
        """Overturn each end its confirmation runs reversed, unless the partner has an end reversed the same way."""
        reversed_ = {side: [(j, reversed_by(j, self.confirm_runs)) for j in self.ends.get(side, {}).values()] for side in SIDES}
        for side, partner in ((CANDIDATE, REFERENCE), (REFERENCE, CANDIDATE)):
            partner_ways = {way for _, way in reversed_[partner] if way}
            for j, way in reversed_[side]:
                if way is None:
                    continue
                if way in partner_ways:
                    self.kept[side].append(j.target_qps)
                else:
                    j.overturned = True

    def confirm_evidence(self, side: str) -> Optional[str]:
        """'VALID 1/1 at 227, confirmed VALID 2/2; INVALID 2/2 at 239, confirmed VALID 2/2: overturned to VALID'."""
        ends = [j for j in self.ends.get(side, {}).values() if j.confirmations]
        if not ends:
            return None
        text = "; ".join(j.evidence() for j in ends)
        kept = self.kept[side]
        if kept:
            text += f" (kept at {', '.join(f'{q:g}' for q in kept)}: the partner's end moved the same way)"
        return text

    def no_load(self) -> Optional[str]:
        for side, search in ((CANDIDATE, self.candidate), (REFERENCE, self.reference)):
            if search.highest_valid is None and search.judged:
                return f"the {side} met no load, down to {min(j.target_qps for j in search.judged):g} QPS"
        return None

    def as_metrics(self) -> dict[str, Any]:
        low, high = self.interval
        return {
            "qps_ratio": self.ratio, "qps_ratio_lo": low, "qps_ratio_hi": high,
            "reference_max_qps": self.reference_max_qps,
            "method": "paired: the backend's and fp32's Server searches interleaved run by run (ABBA) in one process, "
                      f"each bracket end re-judged by {self.confirm_runs} paired confirmation runs; the interval is what both brackets allow",
            "rounds": max((r["round"] for r in self.runs), default=-1) + 1,
            "runs": self.runs,
            "confirm_runs": self.confirm_runs,
            "confirm_candidate": self.confirm_evidence(CANDIDATE), "confirm_reference": self.confirm_evidence(REFERENCE),
            "overturned": {side: [j.target_qps for j in self.ends.get(side, {}).values() if j.overturned] for side in SIDES},
            "kept": self.kept,
            "no_load": self.no_load(),
            "reopened": self.reopened,
            "confirm_steps": {side: [s for j in self.ends.get(side, {}).values() for s in j.confirmations] for side in SIDES},
        }


def interleave(candidate: Plan, reference: Plan, run: RunPaired, confirm_runs: int = CONFIRM_RUNS,
               budget: Optional[Budget] = None, reopen: Optional[Reopen] = None) -> PairedSearch:
    """Drive both search plans to their ends, one run of each per round in ABBA order, a side whose search has
    ended making confirmation runs at its bracket ends while the other goes on; then paired confirmation rounds
    until every end has `confirm_runs` of them or the next round would take a side past `budget` (seconds per
    side, its search's runs and its confirmations together); then the ends are judged again (`PairedSearch.judge`).
    With `reopen`, a side with an end overturned goes on searching from its revised bracket (`reopen` makes that
    plan: at least its first target, at most `REOPEN_STEPS` more, in the time its budget has left), its partner
    making hold runs at its max beside it (they change no verdict); nothing is confirmed a second time."""
    plans = {CANDIDATE: candidate, REFERENCE: reference}
    paired = PairedSearch(Search(), Search(), confirm_runs)
    asks: dict[str, tuple[float, int]] = {}
    done: dict[str, Search] = {}
    spent = {CANDIDATE: 0.0, REFERENCE: 0.0}

    def ended(side: str, search: Search) -> None:
        done[side] = search
        paired.ends[side] = bracket_ends(search)

    def record(round_: int, side: str, role: str, qps: float, step: Step) -> None:
        paired.runs.append({"round": round_, "side": side, "role": role, "target_qps": qps, "validity": step.get("validity")})
        spent[side] += budget[1](qps) if budget else 0.0

    def confirm(round_: int, side: str) -> None:
        j = next_end(paired.ends[side])
        if j is None:
            return
        step = run(side, j.target_qps, CONFIRM_DRAW + paired.confirmations(side), CONFIRM)
        j.confirmations.append(step)
        record(round_, side, CONFIRM, j.target_qps, step)

    for side, plan in plans.items():
        try:
            asks[side] = next(plan)
        except StopIteration as end:
            ended(side, end.value)
    round_ = 0
    while len(done) < 2:
        for side in order(round_):
            if side in done:
                confirm(round_, side)
                continue
            qps, draw = asks[side]
            step = run(side, qps, draw, SEARCH)
            record(round_, side, SEARCH, qps, step)
            try:
                asks[side] = plans[side].send(step)
            except StopIteration as end:
                ended(side, end.value)
        round_ += 1
    while paired.needs_confirmation() and fits(paired, spent, budget):
        for side in order(round_):
            confirm(round_, side)
        round_ += 1
    paired.candidate, paired.reference = done[CANDIDATE], done[REFERENCE]
    paired.judge()
    if reopen is not None:
        round_ = _reopen(paired, run, reopen, round_, record, budget, spent)
    return paired


def _reopen(paired: PairedSearch, run: RunPaired, reopen: Reopen, round_: int, record: Callable[[int, str, str, float, Step], None],
            budget: Optional[Budget], spent: dict[str, float]) -> int:
    """The re-opened searches of the sides with an end overturned, in ABBA rounds beside the partner's hold runs."""
    searches = {CANDIDATE: paired.candidate, REFERENCE: paired.reference}
    plans: dict[str, Plan] = {}
    asks: dict[str, tuple[float, int]] = {}
    before = {side: len(searches[side].judged) for side in SIDES}
    for side in SIDES:
        if any(j.overturned for j in paired.ends[side].values()):
            plan = reopen(side, searches[side], max(budget[0] - spent[side], 0.0) if budget else None)
            try:
                asks[side] = next(plan)
                plans[side] = plan
            except StopIteration:
                pass
    holds = 0
    while asks:
        for side in order(round_):
            if side in asks:
                qps, draw = asks[side]
                step = run(side, qps, draw, SEARCH)
                record(round_, side, SEARCH, qps, step)
                try:
                    asks[side] = plans[side].send(step)
                except StopIteration:
                    del asks[side]
            elif searches[side].highest_valid is not None:  # not searching (any more): a hold run at its max
                qps = searches[side].highest_valid
                step = run(side, qps, CONFIRM_DRAW + 50 + holds, HOLD)
                holds += 1
                record(round_, side, HOLD, qps, step)
        round_ += 1
    for side in plans:
        paired.reopened[side] = [j.target_qps for j in searches[side].judged[before[side]:]]
    return round_


def fits(paired: PairedSearch, spent: dict[str, float], budget: Optional[Budget]) -> bool:
    """Whether each side's next confirmation run fits in its time budget (no budget: always)."""
    if budget is None:
        return True
    limit, seconds = budget
    for side in SIDES:
        j = next_end(paired.ends[side])
        if j is not None and spent[side] + seconds(j.target_qps) > limit:
            return False
    return True
