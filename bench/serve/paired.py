"""Two Server searches interleaved run by run in ABBA order, the backend's and fp32's, in one process,
then a paired up-down staircase at both sides' limits that measures the ratio of their capacities directly.

On a host whose speed moves in phases of seconds to minutes, one backend's max QPS measured in one
minute and fp32's measured in another differ by the host as much as by the backends. Here both sides
run together: each round makes one run of each, the candidate first in even rounds and fp32 first in
odd ones (C R R C C R R C ...), so every run of either sits beside a run of the other, and a drift that
is linear over two rounds falls on both sides alike. Each search is the ordinary re-judged search
(`bench.serve.qps_search.search_plan`): its own start, targets, verdicts, steal rule and budget; its
bracket is each side's absolute figure (max QPS with its ends).

Pairing the runs in time does not pair what a search decides: a slow phase that fails the run at one
side's bracket end, and not the partner's run beside it at another point of its path, sets that side's
max. So the ratio is not read from the two brackets but measured by **tracking**, a transformed
up-down staircase (Levitt's method) run by both sides in the same rounds:

- Once a side's search has ended, its *level* starts at its max (the VALID end). Each tracking run is made
  at the level (snapped like the search's targets); after a VALID run the level goes up one step
  (x (1 + `track_step`)), after an INVALID one down one step. A side that met no load does not track.
- While the other side still searches, the ended side tracks beside its search runs; after both searches
  have ended, both track in ABBA rounds until a side's time budget (its search's runs and its tracking
  runs together) would be passed by the next round, or `track_rounds` rounds of tracking were made.
- When the host slows, both sides fail in the same round and both step down: their ratio is kept. A
  transient that fails one side's run moves that side's level one step (`track_step`), and no more.
- A *disturbed* tracking run (steal over `max_steal`, bench.serve.qps_search.disturbed) is shown but does
  not move its level: a neighbour on the host, not the load, set its verdict. Its round still counts,
  since the load it ran is the level.

The ratio is measured in the *joint* rounds (both sides tracked): each round's ratio is the candidate's
load over fp32's. The estimate is the geometric mean of the per-round ratios over the joint rounds from
the round in which both sides have made their first reversal (a level's first change of direction:
before it, a level walks from where its search left it towards the limit), or over all joint rounds when
that leaves fewer than `MIN_ROUNDS`. All levels after the first reversal are averaged, not only the levels
at reversals: with the few runs a Server budget holds (a run lasts 4-5 s), a staircase has two or three
reversals, and averaging every trial after the first reversals is the less variable estimate of the same
point (the 50% point for this 1-up-1-down rule).

Its interval: staircase levels are autocorrelated (each is the last one plus or minus a step), so a
t-interval on the per-round ratios as if independent would be too narrow. The interval given is the
range (lowest, highest) of the per-round ratios it averages: every joint round's ratio, each from two
runs in the same seconds, lies in it, and it widens with the host's and the verdicts' noise rather than
narrowing as 1/sqrt(n) with runs that are not independent. It is widened to at least one step either
side of the estimate: a staircase resolves a level to a step, and in rounds where both sides give the
same verdict both move together and the per-round ratio does not change, so its range alone can be
narrower than what the method resolves (a paired int8_tbe job's eight last rounds agreed, 0.937-0.938). The brackets' interval (what both searches'
brackets allow together) is kept beside it (`qps_ratio_bracket_lo`/`_hi`); with no joint round (tracking
off, `track_rounds` 0, or no time left for it) the ratio is the two searches' max QPS over each other and
its interval what both brackets allow. A side that met no load has no ratio (None, not 0).

Since tracking re-runs the limit many times, a paired search judges each target by fewer runs
(`serve.paired_judgments`, 1 by default, instead of `serve.judgments`): the budget goes to the staircase.

Each side's tracked level (the geometric mean of its tracking loads over the same rounds) is reported
beside its bracket: an absolute figure from the same runs as the ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from bench.config.schema import MAX_STEAL
from bench.serve.qps_search import Plan, Search, Step, disturbed

CANDIDATE, REFERENCE = "candidate", "reference"
SIDES = (CANDIDATE, REFERENCE)
SEARCH, TRACK = "search", "track"
TRACK_DRAW = 100  # a tracking run's LoadGen draw starts here: its schedule differs from every search run's at that target
TRACK_STEP = 0.04  # the default of serve.track_step
TRACK_ROUNDS = 10  # the default of serve.track_rounds
MIN_ROUNDS = 3  # fewer joint rounds after the first reversals than this: all joint rounds are averaged

# run(side, qps, draw, role) -> the step; side is CANDIDATE or REFERENCE, role SEARCH or TRACK
RunPaired = Callable[[str, float, int, str], Step]
Budget = tuple[float, Callable[[float], float]]  # seconds per side, and how long one run at a target lasts


def order(round_: int) -> tuple[str, str]:
    """Which side runs first in a round: the candidate in even rounds, fp32 in odd ones (ABBA)."""
    return (CANDIDATE, REFERENCE) if round_ % 2 == 0 else (REFERENCE, CANDIDATE)


@dataclass
class Staircase:
    """One side's tracking: its level, and each run made at it (round, load, verdict, whether it moved the level)."""

    level: float
    step: float
    snap: Callable[[float], float] = float
    max_steal: Optional[float] = MAX_STEAL
    runs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)  # each tracking run's step, as LoadGen's log tells it

    @property
    def target(self) -> float:
        return self.snap(self.level)

    def move(self, round_: int, qps: float, step: Step) -> None:
        """After a run at `qps`: up one step after VALID, down one after INVALID; a disturbed run does not move it."""
        moved = 0
        if not disturbed(step, self.max_steal):
            moved = 1 if step.get("validity") == "VALID" else -1
            self.level *= (1 + self.step) ** moved
        self.runs.append({"round": round_, "target_qps": qps, "validity": step.get("validity"), "moved": moved})
        self.steps.append(step)

    @property
    def first_reversal(self) -> Optional[int]:
        """The round of the first run whose move went the other way from the first move; None before one."""
        moves = [(r["round"], r["moved"]) for r in self.runs if r["moved"]]
        first = moves[0][1] if moves else 0
        return next((round_ for round_, m in moves if m != first), None)

    @property
    def reversals(self) -> int:
        moves = [r["moved"] for r in self.runs if r["moved"]]
        return sum(1 for a, b in zip(moves, moves[1:]) if a != b)

    def at(self, round_: int) -> Optional[float]:
        return next((r["target_qps"] for r in self.runs if r["round"] == round_), None)


def geomean(values: list[float]) -> Optional[float]:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


@dataclass
class PairedSearch:
    candidate: Search
    reference: Search
    track_step: float = TRACK_STEP
    runs: list[dict[str, Any]] = field(default_factory=list)  # every run in the order it ran: round, side, role, target, verdict
    tracks: dict[str, Staircase] = field(default_factory=dict)  # the sides that track (met load)
    stop: str = ""  # why tracking ended

    @property
    def max_qps(self) -> float:
        return self.candidate.highest_valid or 0.0

    @property
    def reference_max_qps(self) -> float:
        return self.reference.highest_valid or 0.0

    @property
    def joint_rounds(self) -> list[int]:
        """The rounds in which both sides made a tracking run."""
        if len(self.tracks) < 2:
            return []
        ref = {r["round"] for r in self.tracks[REFERENCE].runs}
        return [r["round"] for r in self.tracks[CANDIDATE].runs if r["round"] in ref]

    @property
    def used_rounds(self) -> list[int]:
        """The joint rounds the estimate averages: from both sides' first reversals, or all of them when that leaves too few."""
        joint = self.joint_rounds
        firsts = [t.first_reversal for t in self.tracks.values()]
        if all(f is not None for f in firsts):
            after = [r for r in joint if r >= max(firsts)]
            if len(after) >= MIN_ROUNDS:
                return after
        return joint

    def round_ratios(self, rounds: Optional[list[int]] = None) -> list[float]:
        c, r = self.tracks.get(CANDIDATE), self.tracks.get(REFERENCE)
        return [c.at(n) / r.at(n) for n in (self.used_rounds if rounds is None else rounds)] if c and r else []

    @property
    def ratio(self) -> Optional[float]:
        """The geometric mean of the per-round ratios over the used joint rounds; with no joint round (no tracking,
        or no time left for it), the two searches' max QPS over each other; None when a side met no load."""
        ratios = self.round_ratios()
        return geomean(ratios) if ratios else self.bracket_ratio

    @property
    def interval(self) -> tuple[Optional[float], Optional[float]]:
        """(lowest, highest) per-round ratio the estimate averages, widened to at least one step either side of the
        estimate; with no joint round, what both brackets allow."""
        ratios = self.round_ratios()
        if not ratios:
            return self.bracket_interval
        point = geomean(ratios)
        return min(*ratios, point / (1 + self.track_step)), max(*ratios, point * (1 + self.track_step))

    @property
    def bracket_interval(self) -> tuple[Optional[float], Optional[float]]:
        """(low, high) the two searches' brackets allow together; None for an open end."""
        c_lo, c_hi = self.candidate.highest_valid or 0.0, self.candidate.lowest_invalid
        r_lo, r_hi = self.reference.highest_valid or 0.0, self.reference.lowest_invalid
        low = c_lo / r_hi if r_hi else None
        high = c_hi / r_lo if c_hi is not None and r_lo > 0 else None
        return low, high

    @property
    def bracket_ratio(self) -> Optional[float]:
        """The two searches' max QPS over each other, as the brackets alone would give it."""
        return self.max_qps / self.reference_max_qps if self.max_qps > 0 and self.reference_max_qps > 0 else None

    def tracked(self, side: str) -> Optional[float]:
        """A side's tracked level: the geometric mean of its tracking loads over the used joint rounds (all its
        tracking runs when there is no joint round)."""
        track = self.tracks.get(side)
        if track is None:
            return None
        rounds = set(self.used_rounds)
        return geomean([r["target_qps"] for r in track.runs if r["round"] in rounds] or [r["target_qps"] for r in track.runs])

    def track_evidence(self, side: str) -> Optional[str]:
        """'11 runs from 404: 7 VALID, 4 INVALID, 3 reversals, tracked 415'."""
        track = self.tracks.get(side)
        if track is None or not track.runs:
            return None
        valid = sum(1 for r in track.runs if r["validity"] == "VALID")
        still = sum(1 for r in track.runs if not r["moved"])
        aside = f", {still} set aside: steal" if still else ""
        return (f"{len(track.runs)} runs from {track.runs[0]['target_qps']:g}: {valid} VALID, {len(track.runs) - valid} INVALID{aside}, "
                f"{track.reversals} reversals, tracked {self.tracked(side):.4g}")

    def no_load(self) -> Optional[str]:
        for side, search in ((CANDIDATE, self.candidate), (REFERENCE, self.reference)):
            if search.highest_valid is None and search.judged:
                return f"the {side} met no load, down to {min(j.target_qps for j in search.judged):g} QPS"
        return None

    def as_metrics(self) -> dict[str, Any]:
        low, high = self.interval
        b_low, b_high = self.bracket_interval
        return {
            "qps_ratio": self.ratio, "qps_ratio_lo": low, "qps_ratio_hi": high,
            "qps_ratio_bracket": self.bracket_ratio, "qps_ratio_bracket_lo": b_low, "qps_ratio_bracket_hi": b_high,
            "reference_max_qps": self.reference_max_qps,
            "tracked_qps": self.tracked(CANDIDATE), "reference_tracked_qps": self.tracked(REFERENCE),
            "method": "paired: the backend's and fp32's Server searches interleaved run by run (ABBA) in one process, then both "
                      f"tracked by a 1-up-1-down staircase (step {self.track_step:g}) in the same rounds; the ratio is the geometric mean "
                      "of the per-round load ratios after both sides' first reversals, the interval their range",
            "rounds": max((r["round"] for r in self.runs), default=-1) + 1,
            "runs": self.runs,
            "track_step": self.track_step,
            "joint_rounds": len(self.joint_rounds), "used_rounds": len(self.used_rounds),
            "round_ratios": self.round_ratios(self.joint_rounds),
            "track_candidate": self.track_evidence(CANDIDATE), "track_reference": self.track_evidence(REFERENCE),
            "track_stop": self.stop,
            "no_load": self.no_load(),
            "track_steps": {side: t.steps for side, t in self.tracks.items()},
        }


def interleave(candidate: Plan, reference: Plan, run: RunPaired, budget: Optional[Budget] = None, track_step: float = TRACK_STEP,
               track_rounds: int = TRACK_ROUNDS, snap: Callable[[float], float] = float,
               max_steal: Optional[float] = MAX_STEAL) -> PairedSearch:
    """Drive both search plans to their ends, one run of each per round in ABBA order, a side whose search has
    ended tracking its limit (a staircase from its max, `track_step` per run, loads rounded by `snap`) beside
    the other's search runs while its budget allows; then both track in ABBA rounds until the next round would
    take a side past `budget` (seconds per side, its search's and its tracking runs together) or `track_rounds`
    rounds of joint tracking were made."""
    plans = {CANDIDATE: candidate, REFERENCE: reference}
    paired = PairedSearch(Search(), Search(), track_step)
    asks: dict[str, tuple[float, int]] = {}
    done: dict[str, Search] = {}
    spent = {CANDIDATE: 0.0, REFERENCE: 0.0}

    def seconds(qps: float) -> float:
        return budget[1](qps) if budget else 0.0

    def fits(side: str) -> bool:
        return budget is None or spent[side] + seconds(paired.tracks[side].target) <= budget[0]

    def ended(side: str, search: Search) -> None:
        done[side] = search
        if search.highest_valid is not None:
            paired.tracks[side] = Staircase(search.highest_valid, track_step, snap, max_steal)

    def record(round_: int, side: str, role: str, qps: float, step: Step) -> None:
        paired.runs.append({"round": round_, "side": side, "role": role, "target_qps": qps, "validity": step.get("validity")})
        spent[side] += seconds(qps)

    def track(round_: int, side: str) -> None:
        staircase = paired.tracks[side]
        qps = staircase.target
        step = run(side, qps, TRACK_DRAW + len(staircase.runs), TRACK)
        record(round_, side, TRACK, qps, step)
        staircase.move(round_, qps, step)

    for side, plan in plans.items():
        try:
            asks[side] = next(plan)
        except StopIteration as end:
            ended(side, end.value)
    round_ = 0
    while len(done) < 2:
        for side in order(round_):
            if side in done:
                if side in paired.tracks and fits(side):
                    track(round_, side)
                continue
            qps, draw = asks[side]
            step = run(side, qps, draw, SEARCH)
            record(round_, side, SEARCH, qps, step)
            try:
                asks[side] = plans[side].send(step)
            except StopIteration as end:
                ended(side, end.value)
        round_ += 1
    paired.candidate, paired.reference = done[CANDIDATE], done[REFERENCE]
    if len(paired.tracks) < 2:
        paired.stop = paired.no_load() or "a side met no load"
        return paired
    joint = 0
    while True:
        if joint >= track_rounds:
            paired.stop = f"{track_rounds} rounds of tracking (serve.track_rounds)"
            break
        late = [side for side in SIDES if not fits(side)]
        if late:
            paired.stop = f"the next round would take the {late[0]} past {budget[0]:g} s (serve.max_search_s)"
            break
        for side in order(round_):
            track(round_, side)
        round_ += 1
        joint += 1
    return paired
