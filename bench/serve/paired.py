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
  have ended, both track in ABBA rounds until the ratio has its evidence (below), or a cap comes first:
  `track_rounds` joint rounds, or the next round passing a side's time budget (its search's runs and its
  tracking runs together).
- When the host slows, both sides fail in the same round and both step down: their ratio is kept. A
  transient that fails one side's run moves that side's level one step (`track_step`), and no more.
- A *disturbed* tracking run (steal over `max_steal`, or served slower than the host's usual pace:
  bench.serve.qps_search.disturbed, bench.serve.pace) is shown but does not move its level: the host, not
  the load, set its verdict. Its round is left out of the estimate and of the evidence: a slow phase of the
  host can move the ratio itself (a short request loses more of its speed than a long one), so a round
  made in one does not stand for the host's usual state. A job whose rounds are all disturbed reaches a
  cap before its evidence, and gives no ratio.

**Reading the ratio** (`serve.ratio_fit`). By default (`logistic`) both sides' limits are fitted to the verdicts
of their tracking runs that moved a level (a logistic function of load, with a host state shared by the runs of
a round; a side's limit is the load judged VALID half the time, the point this 1-up-1-down rule tracks:
bench.serve.limit_fit), and the ratio is the candidate's limit over fp32's.
With `levels` (what records before the fit measured) the ratio is read from the *joint* rounds (both sides
tracked): each round's ratio is the candidate's load over fp32's, and the estimate is their geometric mean
from the round in which both sides have made their first reversal (a level's first change of direction:
before it, a level walks from where its search left it towards the limit). A search that ended in a slow
phase leaves its staircase far below the limit, and one transient reversal then lets the climb back into that
mean; the fit gives the climb's VALID runs, far below the limit, little weight (measured: docs/serving.md).

**Evidence, not seconds.** Tracking runs until the ratio has its evidence: `min_rounds` joint rounds after
both first reversals and `min_reversals` reversals on each side, however long each LoadGen run lasts on
this machine (at most `track_rounds` joint rounds). While a side's level is still walking (its last
`STILL_WALKING` moves all one way: its limit moved, the host's speed changed during the job), tracking goes on
past the evidence until the level turns; a cap that comes first ends it with the ratio given and `still_walking`
said beside it. The time budget (`serve.max_search_s`, each side's
search and tracking runs together, counted on `clock` when one is given) is a cap: when it is reached, or
the round cap, before that evidence, the job has **no ratio** ("not enough runs", `shortfall`), not a
ratio from one or two runs that looks as sure as one from ten.

Its interval is a prediction interval for a re-run's estimate, not the spread of this run's rounds. For the
fit, the spread of the fitted log ratio is a delete-one-block jackknife over ABBA blocks of rounds (rounds
2j and 2j + 1: a block in which the host moved both sides moves both fits), with Student's t on the blocks
less one and the same run-to-run term as below. For the levels, the
used rounds' log ratios are grouped in consecutive pairs (one ABBA block, C R R C or R C C R, in which a
linear drift cancels; an odd first round is left out of the blocks), and with k blocks of sample variance
s2 the half-width (in log ratio) is sqrt(t^2 * 2 s2 / k + z^2 * 2 * rerun_spread^2): t is Student's 97.5%
quantile with k - 1 degrees of freedom, so few rounds give a wide interval (t is 4.3 at k = 3, 2.3 at 10);
2/k because the re-run's estimate has an error of its own; `rerun_spread` is the run-to-run standard
deviation of a job's log ratio that the rounds of one job cannot see (the host's phases longer than a
job, each job's own warm-up and start): serve.rerun_spread (measured between whole sweeps, docs/serving.md)
weighed with what re-runs of paired Server jobs on this machine measured (bench.pipeline.reruns.serve_spread;
the runner passes it in, `Evidence.rerun_from` says where it came from). It is at least
one step (`track_step`) either side: a staircase resolves a level to a step. The brackets' interval (what
both searches' brackets allow together) is kept beside it (`qps_ratio_bracket_lo`/`_hi`); with tracking off
(`track_rounds` 0) the ratio is the two searches' max QPS over each other and its interval what both
brackets allow. A side that met no load has no ratio (None, not 0).

Since tracking re-runs the limit many times, a paired search judges each target by fewer runs
(`serve.paired_judgments`, 1 by default, instead of `serve.judgments`): the budget goes to the staircase.

Each side's tracked level (the geometric mean of its tracking loads over the same rounds) is reported
beside its bracket: an absolute figure from the same runs as the ratio.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from bench.config.schema import MAX_STEAL
from bench.serve.limit_fit import Fit, Run, fit_limits, jackknife, prediction_half_width
from bench.serve.qps_search import Plan, Search, Step, aside_words, disturbed

CANDIDATE, REFERENCE = "candidate", "reference"
SIDES = (CANDIDATE, REFERENCE)
SEARCH, TRACK = "search", "track"
TRACK_DRAW = 100  # a tracking run's LoadGen draw starts here: its schedule differs from every search run's at that target
# The defaults of serve.track_step, serve.track_rounds, serve.min_rounds, serve.min_reversals, serve.rerun_spread
TRACK_STEP = 0.04
TRACK_ROUNDS = 24  # the most joint rounds: the evidence below usually ends tracking well before
MIN_ROUNDS = 6  # joint rounds after both sides' first reversals: three ABBA blocks
MIN_REVERSALS = 2  # per side
RERUN_SPREAD = 0.03  # run-to-run SD of a job's log ratio beyond its rounds' own spread
CONFIDENCE = 0.95  # of the interval for a re-run's ratio
NOT_ENOUGH = "not enough runs"
# A level whose last moves all went one way, this many or more, was still walking when tracking stopped: a staircase
# settled at its limit ends so by chance 2 x 0.5^6 = 1 time in 32 (each move up or down as likely).
STILL_WALKING = 6
# serve.ratio_fit: how the ratio is read from the tracking runs (bench.serve.limit_fit), the default first
LOGISTIC, LEVELS = "logistic", "levels"

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

    @property
    def final_walk(self) -> int:
        """The level's last moves that went one way, signed: +6 after six steps up in a row at the end (a run set aside
        does not move the level and does not break the walk), -2 after two down; 0 before any move."""
        moves = [r["moved"] for r in self.runs if r["moved"]]
        walk = 0
        for m in reversed(moves):
            if m != moves[-1]:
                break
            walk += 1
        return walk * (moves[-1] if moves else 0)


def geomean(values: list[float]) -> Optional[float]:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def block_variance(ratios: list[float]) -> tuple[float, int]:
    """The variance of the mean log ratio from one job's per-round ratios, and the number of ABBA blocks behind
    it: the log ratios in consecutive pairs (an odd first round left out), the block means' sample variance over
    their count; (inf, k) with fewer than two blocks."""
    logs = [math.log(r) for r in ratios]
    paired = logs[len(logs) % 2:]
    blocks = [(a + b) / 2 for a, b in zip(paired[::2], paired[1::2])]
    return (statistics.variance(blocks) / len(blocks), len(blocks)) if len(blocks) >= 2 else (math.inf, len(blocks))


def rerun_interval(ratios: list[float], rerun_spread: float = RERUN_SPREAD, step: float = TRACK_STEP,
                   confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Where a re-run's ratio should fall, from one job's per-round ratios (at least two ABBA blocks): Student's t
    over the k block means (`block_variance`) for a new estimate's error and this one's (2/k), plus `rerun_spread`
    (a run-to-run SD the rounds cannot see) for both runs; at least one `step` either side of the estimate."""
    variance, k = block_variance(ratios)
    if not math.isfinite(variance):
        return 0.0, math.inf
    point = sum(math.log(r) for r in ratios) / len(ratios)
    half = prediction_half_width(variance, k, rerun_spread, step, confidence)
    return math.exp(point - half), math.exp(point + half)


@dataclass
class Evidence:
    """What a paired job's ratio needs before it is given: joint rounds after both first reversals, reversals a side."""

    min_rounds: int = MIN_ROUNDS
    min_reversals: int = MIN_REVERSALS
    rerun_spread: float = RERUN_SPREAD
    # where rerun_spread came from: serve.rerun_spread alone, or weighed with this machine's re-runs (bench.pipeline.reruns)
    rerun_from: str = "serve.rerun_spread"


@dataclass
class PairedSearch:
    candidate: Search
    reference: Search
    track_step: float = TRACK_STEP
    evidence: Evidence = field(default_factory=Evidence)
    tracking: bool = True  # false: track_rounds 0, the ratio is the brackets'
    fit: str = LOGISTIC  # how the ratio is read from the tracking runs: LOGISTIC or LEVELS (serve.ratio_fit)
    runs: list[dict[str, Any]] = field(default_factory=list)  # every run in the order it ran: round, side, role, target, verdict
    tracks: dict[str, Staircase] = field(default_factory=dict)  # the sides that track (met load)
    spent: dict[str, float] = field(default_factory=dict)  # seconds each side's runs took (or were expected to)
    stop: str = ""  # why tracking ended
    # each fit made (bench.serve.limit_fit: about a hundred cost evaluations) by the block left out and the runs it saw:
    # the ratio, its interval, the record and the withheld check read the same fit instead of making it again
    _fits: dict[tuple[Optional[int], int], Optional[Fit]] = field(default_factory=dict, repr=False)

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
        """The joint rounds the estimate averages: from both sides' first reversals (none before both have one),
        less the rounds in which either side's run was set aside (`aside_rounds`)."""
        firsts = [t.first_reversal for t in self.tracks.values()]
        if len(firsts) < 2 or any(f is None for f in firsts):
            return []
        aside = set(self.aside_rounds)
        return [r for r in self.joint_rounds if r >= max(firsts) and r not in aside]

    @property
    def aside_rounds(self) -> list[int]:
        """The joint rounds in which either side's tracking run was set aside (disturbed: it did not move its level)."""
        still = {r["round"] for t in self.tracks.values() for r in t.runs if not r["moved"]}
        return [r for r in self.joint_rounds if r in still]

    def reversals(self) -> dict[str, int]:
        return {side: t.reversals for side, t in self.tracks.items()}

    def shortfall(self) -> Optional[str]:
        """Why the tracking has not the evidence a ratio needs ('4 joint rounds after the first reversals, of 6;
        fp32 1 reversal, of 2'), or None when it has (or when tracking is off: the brackets' ratio)."""
        if not self.tracking or len(self.tracks) < 2:
            return None
        short = []
        used = len(self.used_rounds)
        if used < self.evidence.min_rounds:
            aside = len(self.aside_rounds)
            left = f"; {aside} rounds left out, a run set aside" if aside else ""
            short.append(f"{used} joint rounds after both first reversals, of {self.evidence.min_rounds} (serve.min_rounds){left}")
        for side, n in self.reversals().items():
            if n < self.evidence.min_reversals:
                name = "fp32" if side == REFERENCE else "the backend"
                short.append(f"{name} {n} reversals, of {self.evidence.min_reversals} (serve.min_reversals)")
        return "; ".join(short) or None

    def withheld(self) -> Optional[str]:
        """Why the host withheld the ratio ('no paired ratio, its rounds set aside: not enough runs: ...'): tracking
        ended without its evidence while rounds were set aside (steal, a slow host); None otherwise."""
        if not self.tracking or len(self.tracks) < 2 or self.ratio is not None or not self.aside_rounds:
            return None
        return f"no paired ratio, its rounds set aside: {NOT_ENOUGH}: {self.shortfall()} ({self.stop})"

    def walking(self) -> list[tuple[str, int]]:
        """Each side whose level's last `STILL_WALKING` or more moves went one way, with its signed walk: its limit is
        still moving (`interleave` tracks on while one is, within its caps)."""
        return [(side, t.final_walk) for side, t in self.tracks.items() if abs(t.final_walk) >= STILL_WALKING]

    def still_walking(self) -> Optional[str]:
        """Where a side's level ended `STILL_WALKING` or more steps one way in a row: its limit was still moving when
        a cap stopped the tracking (the host's speed changed during the job), so the estimate mixes the host's states.
        Said beside the ratio: the ratio and its evidence are as they were."""
        walks = self.walking()
        if not self.tracking or len(self.tracks) < 2 or not walks or self.ratio is None:  # a caveat on a ratio given
            return None
        said = "; ".join(f"{'fp32' if side == REFERENCE else 'the backend'}'s level ended {abs(w)} steps {'up' if w > 0 else 'down'} "
                         "in a row" for side, w in walks)
        return (f"{said}: its limit was still moving when tracking stopped (the host's speed changed during the job), so the "
                f"ratio mixes the host's states (a level settled at its limit ends {STILL_WALKING} or more steps one way 1 "
                f"time in {2 ** (STILL_WALKING - 1)})")

    @property
    def enough(self) -> bool:
        return self.shortfall() is None

    def round_ratios(self, rounds: Optional[list[int]] = None) -> list[float]:
        c, r = self.tracks.get(CANDIDATE), self.tracks.get(REFERENCE)
        return [c.at(n) / r.at(n) for n in (self.used_rounds if rounds is None else rounds)] if c and r else []

    def fitted(self, leave_out: Optional[int] = None) -> Optional[Fit]:
        """Both sides' limits fitted to their tracking runs that moved a level (bench.serve.limit_fit: a disturbed
        run says nothing of the load); `leave_out`, an ABBA block (round // 2) whose runs are left out. None
        unless both sides track."""
        if len(self.tracks) < 2:
            return None
        runs = [Run(r["round"], i, r["target_qps"], r["validity"] == "VALID") for i, side in enumerate(SIDES)
                for r in self.tracks[side].runs if r["moved"] and (leave_out is None or r["round"] // 2 != leave_out)]
        key = (leave_out, sum(len(t.runs) for t in self.tracks.values()))  # a new tracking run makes a new fit
        if key not in self._fits:
            self._fits[key] = fit_limits(runs)
        return self._fits[key]

    def fitted_log_ratio(self, leave_out: Optional[int] = None) -> Optional[float]:
        """ln(the candidate's fitted limit / fp32's), `leave_out` as `fitted`'s; None where there is no fit."""
        fit = self.fitted(leave_out)
        return None if fit is None else math.log(fit.ratio)

    @property
    def levels_ratio(self) -> Optional[float]:
        """The geometric mean of the per-round ratios over the used joint rounds (serve.ratio_fit=levels)."""
        return geomean(self.round_ratios()) if self.enough and len(self.tracks) == 2 else None

    @property
    def ratio(self) -> Optional[float]:
        """The candidate's fitted limit over fp32's (serve.ratio_fit=logistic), or the levels' ratio (levels); with
        tracking off, the two searches' max QPS over each other; None when a side met no load or the tracking has
        not the evidence."""
        if not self.tracking:
            return self.bracket_ratio
        if self.fit == LEVELS or self.levels_ratio is None:
            return self.levels_ratio
        log = self.fitted_log_ratio()
        return None if log is None else math.exp(log)

    @property
    def interval(self) -> tuple[Optional[float], Optional[float]]:
        """Where a re-run's ratio should fall: `rerun_interval` of the levels, or a delete-one-ABBA-block jackknife
        of the fitted ratio (bench.serve.limit_fit), with the same run-to-run spread and step floor; with tracking
        off, what both brackets allow; (None, None) with no ratio."""
        if not self.tracking:
            return self.bracket_interval
        ratio = self.ratio
        if ratio is None:
            return None, None
        if self.fit == LEVELS:
            return rerun_interval(self.round_ratios(), self.evidence.rerun_spread, self.track_step)
        variance, count = self.log_variance()
        half = prediction_half_width(variance, count, self.evidence.rerun_spread, self.track_step, CONFIDENCE)
        return math.exp(math.log(ratio) - half), math.exp(math.log(ratio) + half)

    def log_variance(self) -> tuple[float, int]:
        """The variance of the log ratio that this job's rounds show, and the ABBA blocks behind it: a delete-one-block
        jackknife of the fit, or the levels' block variance (`block_variance`); (inf, k) with fewer than two blocks."""
        if self.fit == LEVELS:
            return block_variance(self.round_ratios())
        blocks = sorted({r["round"] // 2 for t in self.tracks.values() for r in t.runs if r["moved"]})
        return jackknife(blocks, self.fitted_log_ratio)

    @property
    def log_se(self) -> Optional[float]:
        """The standard error of the log ratio from this job's rounds (what a re-run log's `round_se` holds: the part
        of two runs' difference their rounds explain); None with no tracked ratio or fewer than two blocks."""
        if not self.tracking or self.ratio is None:
            return None
        variance = self.log_variance()[0]
        return math.sqrt(variance) if math.isfinite(variance) else None

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
        tracking runs when there is none)."""
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
        words = aside_words([s for r, s in zip(track.runs, track.steps) if not r["moved"]], track.max_steal)
        aside = f", {words}" if words else ""
        return (f"{len(track.runs)} runs from {track.runs[0]['target_qps']:g}: {valid} VALID, {len(track.runs) - valid} INVALID{aside}, "
                f"{track.reversals} reversals, tracked {self.tracked(side):.4g}")

    def side_runs(self) -> dict[str, int]:
        """Each side's LoadGen runs, search and tracking."""
        return {side: sum(1 for r in self.runs if r["side"] == side) for side in SIDES}

    def no_load(self) -> Optional[str]:
        for side, search in ((CANDIDATE, self.candidate), (REFERENCE, self.reference)):
            if search.highest_valid is None and search.judged:
                return f"the {side} met no load, down to {min(j.target_qps for j in search.judged):g} QPS"
        return None

    def method(self) -> str:
        """How the ratio and its interval were read, in words."""
        if not self.tracking:
            return "paired, not tracked (serve.track_rounds=0): the two searches' max QPS over each other, the interval what both brackets allow"
        read = ("the ratio is the two sides' limits fitted to their tracking runs' verdicts (a logistic function of load, "
                "with a host state shared by a round's runs: bench.serve.limit_fit), the interval where a re-run's ratio should fall "
                f"({CONFIDENCE:.0%}: a jackknife over ABBA blocks of rounds, Student's t, plus a run-to-run spread of "
                f"{self.evidence.rerun_spread:.3g} from {self.evidence.rerun_from})") if self.fit == LOGISTIC else (
                "the ratio is the geometric mean of the per-round load ratios after both first reversals, the interval where a "
                f"re-run's ratio should fall ({CONFIDENCE:.0%}: Student's t over ABBA blocks, plus a run-to-run spread of "
                f"{self.evidence.rerun_spread:.3g} from {self.evidence.rerun_from})")
        return ("paired: the backend's and fp32's Server searches interleaved run by run (ABBA) in one process, then both "
                f"tracked by a 1-up-1-down staircase (step {self.track_step:g}) in the same rounds until {self.evidence.min_rounds} "
                f"joint rounds after both first reversals and {self.evidence.min_reversals} reversals a side; {read}")

    def as_metrics(self) -> dict[str, Any]:
        low, high = self.interval
        b_low, b_high = self.bracket_interval
        short = self.shortfall()
        fit = self.fitted() if self.tracking and self.ratio is not None else None  # no limits where the ratio is withheld
        return {
            "qps_ratio": self.ratio, "qps_ratio_lo": low, "qps_ratio_hi": high, "ratio_fit": self.fit if self.tracking else None,
            "qps_ratio_levels": self.levels_ratio,  # the levels' ratio, beside a fitted one
            "fitted_qps": fit and dict(zip(SIDES, fit.limits)), "fit_width": fit and fit.width, "fit_host_sd": fit and fit.host_sd,
            "qps_ratio_bracket": self.bracket_ratio, "qps_ratio_bracket_lo": b_low, "qps_ratio_bracket_hi": b_high,
            "reference_max_qps": self.reference_max_qps,
            "tracked_qps": self.tracked(CANDIDATE), "reference_tracked_qps": self.tracked(REFERENCE),
            "method": self.method(),
            "rounds": max((r["round"] for r in self.runs), default=-1) + 1,
            "runs": self.runs,
            "track_step": self.track_step,
            "min_rounds": self.evidence.min_rounds, "min_reversals": self.evidence.min_reversals, "rerun_spread": self.evidence.rerun_spread,
            "rerun_spread_from": self.evidence.rerun_from, "ratio_log_se": self.log_se,
            "joint_rounds": len(self.joint_rounds), "used_rounds": len(self.used_rounds), "aside_rounds": len(self.aside_rounds),
            "round_ratios": self.round_ratios(self.joint_rounds),
            "side_runs": self.side_runs(), "reversals": self.reversals(),
            "seconds": {side: round(self.spent.get(side, 0.0), 3) for side in SIDES},
            "not_enough_runs": f"{NOT_ENOUGH}: {short} ({self.stop})" if short else None,
            "track_candidate": self.track_evidence(CANDIDATE), "track_reference": self.track_evidence(REFERENCE),
            "track_stop": self.stop,
            "no_load": self.no_load(),
            "track_steps": {side: t.steps for side, t in self.tracks.items()},
            "track_walk": {side: t.final_walk for side, t in self.tracks.items()}, "still_walking": self.still_walking(),
        }


def interleave(candidate: Plan, reference: Plan, run: RunPaired, budget: Optional[Budget] = None, track_step: float = TRACK_STEP,
               track_rounds: int = TRACK_ROUNDS, snap: Callable[[float], float] = float,
               max_steal: Optional[float] = MAX_STEAL, evidence: Optional[Evidence] = None,
               clock: Optional[Callable[[], float]] = None, fit: str = LOGISTIC) -> PairedSearch:
    """Drive both search plans to their ends, one run of each per round in ABBA order, a side whose search has
    ended tracking its limit (a staircase from its max, `track_step` per run, loads rounded by `snap`) beside
    the other's search runs while its budget allows; then both track in ABBA rounds until the ratio has its
    `evidence` (joint rounds after both first reversals, reversals a side), `track_rounds` joint rounds were
    made, or the next round would take a side past `budget` (seconds per side, its search's and its tracking
    runs together, and how long a run at a target is expected to last). With `clock` (seconds, monotonic) a run
    counts the time it took; without, its expected length. `fit`: how the ratio is read (LOGISTIC or LEVELS)."""
    plans = {CANDIDATE: candidate, REFERENCE: reference}
    paired = PairedSearch(Search(), Search(), track_step, evidence or Evidence(), track_rounds > 0, fit=fit)
    asks: dict[str, tuple[float, int]] = {}
    done: dict[str, Search] = {}
    spent = paired.spent
    spent.update({CANDIDATE: 0.0, REFERENCE: 0.0})

    ran = {CANDIDATE: 0, REFERENCE: 0}

    def seconds(qps: float) -> float:
        return budget[1](qps) if budget else 0.0

    def fits(side: str) -> bool:
        """The side's next tracking run fits its budget: its expected length, or (on a clock) what its runs took on average, if longer."""
        if budget is None:
            return True
        took = spent[side] / ran[side] if clock and ran[side] else 0.0
        return spent[side] + max(seconds(paired.tracks[side].target), took) <= budget[0]

    def ended(side: str, search: Search) -> None:
        done[side] = search
        if search.highest_valid is not None:
            paired.tracks[side] = Staircase(search.highest_valid, track_step, snap, max_steal)

    def timed(side: str, qps: float, draw: int, role: str) -> Step:
        began = clock() if clock else 0.0
        step = run(side, qps, draw, role)
        spent[side] += clock() - began if clock else seconds(qps)
        ran[side] += 1
        return step

    def record(round_: int, side: str, role: str, qps: float, step: Step) -> None:
        paired.runs.append({"round": round_, "side": side, "role": role, "target_qps": qps, "validity": step.get("validity")})

    def track(round_: int, side: str) -> None:
        staircase = paired.tracks[side]
        qps = staircase.target
        step = timed(side, qps, TRACK_DRAW + len(staircase.runs), TRACK)
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
                if side in paired.tracks and paired.tracking and fits(side):
                    track(round_, side)
                continue
            qps, draw = asks[side]
            step = timed(side, qps, draw, SEARCH)
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
    joint = len(paired.joint_rounds)
    while True:
        # a level still walking (its limit moving: the host's speed changed) is followed until it turns or a cap comes
        walking = "; a level still walking" if paired.enough and paired.walking() else ""
        if paired.enough and not walking:
            paired.stop = (f"the evidence: {len(paired.used_rounds)} joint rounds after both first reversals, reversals "
                           f"{paired.reversals()[CANDIDATE]} (backend) and {paired.reversals()[REFERENCE]} (fp32)"
                           if paired.tracking else "tracking off (serve.track_rounds=0)")
            break
        if joint >= track_rounds:
            paired.stop = f"{track_rounds} joint rounds of tracking (serve.track_rounds){walking}"
            break
        late = [side for side in SIDES if not fits(side)]
        if late:
            paired.stop = f"the next round would take the {late[0]} past {budget[0]:g} s (serve.max_search_s){walking}"
            break
        for side in order(round_):
            track(round_, side)
        round_ += 1
        joint += 1
    return paired
