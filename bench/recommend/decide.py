"""The funnel's decisions, as pure functions of what the stages measured: nothing is measured here.

    inside_budget     stage 1: a backend passes when its ΔAUC is within the budget (the one rule, stats.budget_verdict)
    within_memory     stage 2: its prepared model's MB against the limit
    dominated         stage 3: a candidate beaten beyond both intervals, at no cost in ΔAUC, MB or threads
    pick              stage 4: among the confirmed that meet the bound (and the target rate), the answer
    pareto_front      the candidates no other beats on QPS under the bound, ΔAUC and model MB at once
    what_would_change the budget, limit, target or recommend.confirm that would let a stopped candidate in
    below_the_bound   stage 3 puts every candidate below the p99 bound: the funnel stops before LoadGen
    nearest_miss      with no pick: the candidate closest to the constraints, and what it would need
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Optional

from bench.report.fmt import DASH
from bench.report.shipping_rank import Shippable, rank
from bench import stats
from bench.stats import FP32_EQUIVALENT, fp32_equivalent

ACCURACY, MEMORY, SPEED, CONFIRM, RUNNABLE = "1 accuracy", "2 memory", "3 offline speed", "4 Server confirmation", "0 runnable"


def times(x: Optional[float]) -> str:
    """A ratio as the answer prints it: `1.38x`, or — where there is none (fp32's estimate or search gave 0)."""
    return DASH if x is None or not math.isfinite(x) else f"{x:.2f}x"


def ratio_text(x: Optional[float], lo: Optional[float], hi: Optional[float]) -> str:
    """`1.38x [1.34, 1.43]`; the interval left out where an end is missing; — without a ratio."""
    if x is None or not math.isfinite(x):
        return DASH
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return times(x)
    return f"{x:.2f}x [{lo:.2f}, {hi:.2f}]"


@dataclass(frozen=True)
class Candidate:
    """One deployment: a backend, the serving batcher's most rows per call, and torch's threads."""

    backend: str
    batch_size: int
    threads: int

    def label(self) -> str:
        return f"{self.backend} bs={self.batch_size} threads={self.threads}"


@dataclass
class Facts:
    """What stages 1 and 2 know of a backend: its ΔAUC against fp32 with the paired 95% interval (ΔNE and, for a
    workload served by request, ΔGAUC beside it, shown, not judged), its model MB; or why it cannot run here."""

    backend: str
    auc_delta: float = math.nan
    auc_delta_lo: float = math.nan
    auc_delta_hi: float = math.nan
    auc_fp32: float = math.nan
    model_mb: float = math.nan
    embedding_mb: float = math.nan
    skipped: Optional[str] = None
    ne_delta: float = math.nan
    ne_delta_lo: float = math.nan
    ne_delta_hi: float = math.nan
    gauc_delta: float = math.nan  # a workload served by request: MLPerf DLRMv3's AUC, each request's own, averaged
    gauc_delta_lo: float = math.nan
    gauc_delta_hi: float = math.nan
    not_applicable: bool = False  # skipped because the backend cannot take this model (NotApplicable), not for the machine

    @property
    def fp32_equivalent(self) -> bool:
        return fp32_equivalent(self.auc_delta_lo, self.auc_delta_hi)


@dataclass
class Estimate:
    """Stage 3: the queue estimate of a candidate's max QPS under the bound, from its served batch times timed in
    turn with fp32's (or, where those could not be, its paired offline batch times): absolute, and relative to
    fp32's from the same timings, each with the interval the paired
    speedups give)."""

    qps: float
    qps_lo: float
    qps_hi: float
    relative: float
    relative_lo: float
    relative_hi: float
    fp32_qps: float
    points: dict = field(default_factory=dict)  # batch rows -> (fp32 ms, speedup, lo, hi) behind it
    served: dict = field(default_factory=dict)  # batch rows -> the serving function's times behind it (bench.serve.path)
    idle_p99_ms: float = math.nan  # the simulated p99 at no load (each query alone), at the interval's fast end: the least bound it can meet


@dataclass
class Confirmation:
    """Stage 4: LoadGen Server's max QPS under the bound (the highest VALID target; the bracket up to the lowest
    INVALID) for the candidate and for fp32 at the same batcher and threads, and their ratio with its interval."""

    max_qps: float
    max_qps_lo: Optional[float]
    max_qps_hi: Optional[float]
    fp32_max_qps: float
    relative: float
    relative_lo: float
    relative_hi: float
    p99_ms: Optional[float]
    method: str
    records: list[str] = field(default_factory=list)
    not_enough_runs: Optional[str] = None  # the paired search's word where its budget bought no ratio (bench.serve.paired)
    withheld: Optional[str] = None  # why the host's doing left the job without an answer (bench.record.withheld)


@dataclass
class Rejection:
    what: str  # a backend, or a candidate's label
    stage: str
    reason: str
    needs: Optional[str] = None  # what would let it through (a budget, a limit, a rate)


def budget_shortfall(f: Facts, budget: float) -> float:
    """How far the ΔAUC interval's low end lies below the lowest ΔAUC the budget accepts (0 or less: inside)."""
    return stats.budget_floor(budget) - f.auc_delta_lo


def inside_budget(f: Facts, budget: float) -> Optional[Rejection]:
    """Stage 1: None when the ΔAUC interval is within the budget (`budget_verdict`, the one accuracy rule report.md,
    the gate and tune read); else the rejection, saying by how much."""
    if math.isnan(f.auc_delta_lo):
        return Rejection(f.backend, ACCURACY, "no ΔAUC was measured (no accuracy to judge)")
    if stats.budget_verdict(f.auc_delta_lo, f.auc_delta_hi, budget) == stats.WITHIN_BUDGET:
        return None
    short = budget_shortfall(f, budget)
    return Rejection(f.backend, ACCURACY,
                     f"ΔAUC {_small(f.auc_delta, '+')} [{_small(f.auc_delta_lo, '+')}, {_small(f.auc_delta_hi, '+')}]: its interval "
                     f"reaches {_small(short)} past the {budget:g} budget", needs=f"accuracy.max_auc_drop={_small(-f.auc_delta_lo)}")


def _small(x: float, sign: str = "") -> str:
    """Five decimals; two significant digits below 1e-4, where five decimals would print a loss as 0.00000."""
    return f"{x:{sign}.5f}" if x == 0 or abs(x) >= 1e-4 else f"{x:{sign}.2g}"


def within_memory(f: Facts, max_mb: Optional[float]) -> Optional[Rejection]:
    """Stage 2: None when the prepared model fits the limit (or there is none)."""
    if max_mb is None or f.model_mb <= max_mb:
        return None
    return Rejection(f.backend, MEMORY, f"its model holds {f.model_mb:.2f} MB, {f.model_mb - max_mb:.2f} MB over the {max_mb:g} MB limit",
                     needs=f"memory.max_model_mb={math.ceil(f.model_mb * 100) / 100:g}")


def anchored_estimates(rows: list[tuple[Candidate, Estimate, Facts]]) -> dict[Candidate, tuple[float, float, float]]:
    """Each estimate's QPS read through its ratio to fp32: (point, low, high) = the ratio and its interval times fp32's
    median estimate at the same batcher size and threads. A ratio is only comparable to another over the same fp32
    (fp32 at batcher 1024 is not fp32 at 4096); read through one fp32 level per configuration, candidates at different
    batcher sizes compare in QPS, and the host's speed still cancels in each ratio. Without an fp32 estimate: its own."""
    levels: dict[tuple[int, int], list[float]] = {}
    for c, e, _ in rows:
        if e.fp32_qps > 0:
            levels.setdefault((c.batch_size, c.threads), []).append(e.fp32_qps)
    out = {}
    for c, e, _ in rows:
        level = levels.get((c.batch_size, c.threads))
        if level and math.isfinite(e.relative):
            m = statistics.median(level)
            out[c] = (e.relative * m, e.relative_lo * m, e.relative_hi * m)
        else:
            out[c] = (e.qps, e.qps_lo, e.qps_hi)
    return out


def beats(b: tuple[Candidate, Estimate, Facts], a: tuple[Candidate, Estimate, Facts],
          qps: dict[Candidate, tuple[float, float, float]]) -> bool:
    """b beats a beyond the intervals: at the same threads, b's QPS interval read through its ratio to fp32
    (`anchored_estimates`) lies wholly above a's, b's ΔAUC interval reaches no lower than a's (it may give up no more
    accuracy), and b holds no more MB."""
    (cb, eb, fb), (ca, ea, fa) = b, a
    return (cb.threads == ca.threads and qps[cb][1] > qps[ca][2] and fb.auc_delta_lo >= fa.auc_delta_lo
            and fb.model_mb <= fa.model_mb)


def dominated(rows: list[tuple[Candidate, Estimate, Facts]]) -> dict[Candidate, Rejection]:
    """Stage 3: each candidate another beats beyond both intervals, with the one that beats it."""
    qps = anchored_estimates(rows)
    out = {}
    for a in rows:
        winner = next((b for b in rows if b[0] != a[0] and beats(b, a, qps)), None)
        if winner is not None:
            cb = winner[0]
            (pa, la, ha), (pb, lb, hb) = qps[a[0]], qps[cb]
            out[a[0]] = Rejection(a[0].label(), SPEED,
                                  f"dominated by {cb.label()}: an estimated {pa:,.0f} QPS [{la:,.0f}, {ha:,.0f}] against {pb:,.0f} "
                                  f"[{lb:,.0f}, {hb:,.0f}] (each its ratio to fp32 times fp32's estimate at its batcher size), "
                                  "with a ΔAUC interval reaching no lower and no more MB")
    return out


def confirm_order(rows: list[tuple[Candidate, Estimate, Facts]], qps_target: Optional[float]) -> list[tuple[Candidate, Estimate, Facts]]:
    """The order stage 4 confirms in: the highest estimate (read through its ratio to fp32, `anchored_estimates`)
    first; with a target rate, those whose estimate reaches it first, fewest threads first among them."""
    qps = anchored_estimates(rows)

    def key(row):
        c, e, f = row
        point, _, high = qps[c]
        if qps_target is None:
            return (-point, -f.auc_delta, f.model_mb)
        return (high < qps_target, c.threads if high >= qps_target else 0, -point, -f.auc_delta)
    return sorted(rows, key=key)


def confirmation_fails(conf: Confirmation, qps_target: Optional[float], bound_ms: float) -> Optional[str]:
    """Why a confirmed candidate is out: no load met the bound, or its max QPS falls short of the target."""
    if not conf.max_qps > 0:
        return f"no target QPS met the {bound_ms:g} ms p99 bound under LoadGen's Server scenario"
    if qps_target is not None and conf.max_qps < qps_target:
        return f"its Server max QPS {conf.max_qps:g} under {bound_ms:g} ms falls {qps_target / conf.max_qps:.2f}x short of slo.qps={qps_target:g}"
    return None


def open_bracket(conf: Confirmation) -> Optional[str]:
    """Why a served candidate's Server figure is not closed, or None when it is: its own bracket (the highest VALID
    target with an INVALID one above it) and fp32's (through the ratio's interval) must both be closed. An open
    bracket is a lower bound that the search's budget or steps cut off, not a capacity, and a ratio with an open side
    has no interval to rank by."""
    why = []
    if conf.max_qps_lo is None or conf.max_qps_hi is None:
        why.append(f"its own Server search found no INVALID target above {conf.max_qps:,.4g} QPS (the bracket is open: "
                   "a lower bound, not its max)")
    if conf.not_enough_runs:
        why.append(f"the paired search beside fp32 gave no ratio: {conf.not_enough_runs}")
    elif math.isnan(conf.relative_lo) or math.isnan(conf.relative_hi):
        why.append(f"fp32's search beside it found no INVALID target above {conf.fp32_max_qps:,.4g} QPS, so its ratio "
                   f"{times(conf.relative)} has no interval")
    return "; ".join(why) or None


def anchored_qps(confirmed: list[tuple[Candidate, Confirmation, Facts]]) -> dict[Candidate, tuple[float, float, float]]:
    """Each confirmed candidate's Server max QPS read through its paired ratio to fp32: (point, low, high) = the ratio
    and its interval times fp32's median max QPS at the same batcher size and threads over the closed confirmations
    (the ratio, paired run by run, cancels the host's speed phases; one fp32 level per configuration sets the scale
    between configurations). Without a closed fp32 level or a ratio interval: its own max QPS and bracket."""
    levels: dict[tuple[int, int], list[float]] = {}
    for c, conf, _ in confirmed:
        if conf.fp32_max_qps > 0 and open_bracket(conf) is None:
            levels.setdefault((c.batch_size, c.threads), []).append(conf.fp32_max_qps)
    out = {}
    for c, conf, _ in confirmed:
        level = levels.get((c.batch_size, c.threads))
        if level and open_bracket(conf) is None:
            m = statistics.median(level)
            out[c] = (conf.relative * m, conf.relative_lo * m, conf.relative_hi * m)
        else:
            out[c] = (conf.max_qps, conf.max_qps_lo or conf.max_qps, conf.max_qps_hi or math.inf)
    return out


def ranked(confirmed: list[tuple[Candidate, Confirmation, Facts]], qps_target: Optional[float]) -> list[tuple[Candidate, Confirmation, Facts]]:
    """The confirmed that passed, best first, by the one pick rule report.md's bottom line ranks with too
    (`bench.report.shipping_rank.rank`), its measure the Server QPS: closed ones (`open_bracket` None) always rank
    above open ones; with a target rate the fewest threads first; then the Server QPS interval read through the paired
    ratio (`anchored_qps`): those whose interval reaches the highest low end (`speed_ties`: the speed cannot tell them
    apart) first, in the rule's own order (the smaller ΔAUC drop, fewer MB, the name), then the rest by their low end
    (what the evidence guarantees, not its point). Their budget was read at stage 1 by the same rule."""
    qps = anchored_qps(confirmed)
    tied = speed_ties(confirmed, qps_target)

    def server_qps(s: Shippable) -> tuple:
        c, conf, _ = s.item
        if c in tied:  # the speed cannot tell it from the fastest: the rule's own order decides among them
            return (*_tier(c, conf, qps_target), 0, 0.0)
        return (*_tier(c, conf, qps_target), 1, -qps[c][1])
    rows = [Shippable(r, r[0].label(), r[2].auc_delta, r[2].auc_delta_lo, r[2].auc_delta_hi, r[2].model_mb) for r in confirmed]
    return [s.item for s in rank(rows, None, server_qps)]


def _tier(c: Candidate, conf: Confirmation, qps_target: Optional[float]) -> tuple:
    """Closed brackets before open ones; with a target rate, the fewest threads first."""
    return (open_bracket(conf) is not None, c.threads if qps_target is not None else 0)


def speed_ties(confirmed: list[tuple[Candidate, Confirmation, Facts]], qps_target: Optional[float]) -> set[Candidate]:
    """The candidates of the first tier whose Server QPS interval reaches the highest low end there: the evidence
    cannot tell them from the fastest, so the pick among them is not read off their points or low ends (which trade
    places between two identical runs) but by the rule's next keys, the smaller ΔAUC drop and the fewer MB,
    which no re-run moves. A single candidate, or one whose interval lies wholly above the others', ties alone."""
    if not confirmed:
        return set()
    qps = anchored_qps(confirmed)
    best = min(_tier(c, conf, qps_target) for c, conf, _ in confirmed)
    first = [c for c, conf, _ in confirmed if _tier(c, conf, qps_target) == best]
    lead = max(qps[c][1] for c in first)
    return {c for c in first if qps[c][2] >= lead}


def pick(confirmed: list[tuple[Candidate, Confirmation, Facts]], qps_target: Optional[float]) -> Optional[tuple[Candidate, Confirmation, Facts]]:
    """The answer: the first of `ranked`. A candidate whose bracket is open is picked only when no closed one passed."""
    order = ranked(confirmed, qps_target)
    return order[0] if order else None


def why_pick(confirmed: list[tuple[Candidate, Confirmation, Facts]], qps_target: Optional[float]) -> list[str]:
    """Why the pick beat the runner-up, in the intervals the rule used; and a warning when the pick itself is open."""
    order = ranked(confirmed, qps_target)
    if not order:
        return []
    qps = anchored_qps(confirmed)
    c0, conf0, _ = order[0]
    q0 = qps[c0]
    lines = []
    why_open = open_bracket(conf0)
    if why_open is not None:
        lines.append(f"the pick is not confirmed: {why_open}; no candidate with closed brackets met the constraints")
    if len(order) > 1:
        c1, conf1, _ = order[1]
        q1 = qps[c1]
        said = f"{c0.label()} {q0[0]:,.4g} [{q0[1]:,.4g}, {_end(q0[2])}] QPS against the runner-up {c1.label()} {q1[0]:,.4g} [{q1[1]:,.4g}, {_end(q1[2])}]"
        if open_bracket(conf1) is not None and why_open is None:
            lines.append(f"why: {said}; the runner-up is not confirmed ({open_bracket(conf1)}), and a closed bracket outranks an open one")
        elif qps_target is not None and c0.threads < c1.threads:
            lines.append(f"why: {c0.threads} thread{'s' if c0.threads > 1 else ''} hold slo.qps={qps_target:g} against the runner-up's {c1.threads}; {said}")
        elif c1 in speed_ties(confirmed, qps_target):
            lines.append(f"why: the Server QPS intervals read through the paired ratio to fp32 overlap ({said}): the speed cannot "
                         "tell them apart, so the smaller ΔAUC drop, then the fewer MB, decide")
        else:
            lines.append(f"why: the higher low end of the Server QPS interval read through the paired ratio to fp32: {said}; "
                         "the intervals are apart")
    return lines


def _end(x: float) -> str:
    return "-" if math.isinf(x) else f"{x:,.4g}"


def runner_up_lines(chosen: tuple[Candidate, Confirmation, Facts], confirmed: list[tuple[Candidate, Confirmation, Facts]]) -> list[str]:
    """For each other confirmed candidate, which tighter constraint would have made it the pick instead."""
    c0, _, f0 = chosen
    lines = []
    for c, conf, f in confirmed:
        if c == c0:
            continue
        ends = math.isfinite(conf.relative_lo) and math.isfinite(conf.relative_hi)
        ratio = "" if math.isnan(conf.relative) else f", {times(conf.relative)} fp32's" + (
            f" [{conf.relative_lo:.2f}, {conf.relative_hi:.2f}]" if ends else "")
        said = f"{c.label()} ({conf.max_qps:,.4g} QPS under the bound{ratio}, ΔAUC {f.auc_delta:+.5f}, {f.model_mb:.2f} MB)"
        if f.auc_delta_lo > f0.auc_delta_lo:
            lines.append(f"with a budget below {-f0.auc_delta_lo:.5f} (the pick's ΔAUC interval reaches {f0.auc_delta_lo:+.5f}): {said}")
        elif f.model_mb < f0.model_mb:
            lines.append(f"with memory.max_model_mb below {f0.model_mb:.2f} (the pick's model): {said}")
        else:
            lines.append(f"runner-up, no tighter constraint favours it: {said}")
    return lines


@dataclass(frozen=True)
class Point:
    """One candidate on the front: QPS under the bound (stage 3's estimate; 0 where Server met the bound at no load), ΔAUC, MB."""

    candidate: Candidate
    qps: float
    auc_delta: float
    model_mb: float
    confirmed: bool


def pareto_front(points: list[Point]) -> list[Point]:
    """The points no other point matches or beats on all three (more QPS, higher ΔAUC, fewer MB) and beats on one."""
    def dominates(b: Point, a: Point) -> bool:
        ge = b.qps >= a.qps and b.auc_delta >= a.auc_delta and b.model_mb <= a.model_mb
        return ge and (b.qps > a.qps or b.auc_delta > a.auc_delta or b.model_mb < a.model_mb)
    front = [a for a in points if not any(dominates(b, a) for b in points if b is not a)]
    return sorted(front, key=lambda p: -p.qps)


def what_would_change(chosen: Optional[Point], rejections: list[Rejection], front: list[Point], facts: dict[str, Facts],
                      points: Optional[list[Point]] = None) -> list[str]:
    """Sentences on what would move the pick: the candidates `recommend.confirm` left unserved (or untimed at more
    threads), each with the setting that would take it on (a stage-3 or stage-4 rejection's `needs`); a front
    candidate estimated faster than the pick that LoadGen did not serve; a wider budget or limit letting a stopped
    backend in. `points`: every estimated candidate (for the unserved ones' figures)."""
    lines = []
    at = {p.candidate.label(): p for p in points or front}
    named = set()
    for r in rejections:
        if r.stage in (SPEED, CONFIRM) and r.needs and r.needs.startswith("recommend.confirm="):
            p = at.get(r.what)
            said = f" ({p.model_mb:.2f} MB, ΔAUC {p.auc_delta:+.5f}, estimated {p.qps:,.0f} QPS{_against(p, chosen)})" if p else ""
            done = "served under LoadGen too" if r.stage == CONFIRM else "timed too, and could be served"
            lines.append(f"with {r.needs}, {r.what}{said} would be {done}; recommend.confirm left it "
                         + ("unserved" if r.stage == CONFIRM else "untimed at these threads"))
            named.add(r.what)
    if chosen is not None:
        for p in front:
            if p.candidate == chosen.candidate or p.qps <= chosen.qps or p.confirmed or p.candidate.label() in named:
                continue
            lines.append(f"serving more candidates (recommend.confirm): {p.candidate.label()} ({p.model_mb:.2f} MB, ΔAUC {p.auc_delta:+.5f}) "
                         f"is estimated at {times(p.qps / chosen.qps if chosen.qps > 0 else math.nan)} the pick's QPS but was not served under LoadGen")
    for r in rejections:
        if r.stage in (ACCURACY, MEMORY) and r.needs:
            f = facts.get(r.what)
            size = f" ({f.model_mb:.2f} MB)" if f is not None and not math.isnan(f.model_mb) else ""
            lines.append(f"with {r.needs}, {r.what}{size} would pass stage {r.stage.split()[0]}; its speed was not measured")
    return lines


def _against(p: Point, chosen: Optional[Point]) -> str:
    return f", {times(p.qps / chosen.qps)} the pick's" if chosen is not None and chosen.qps > 0 else ""


def below_the_bound(estimates: dict[Candidate, Estimate]) -> bool:
    """Stage 3 puts every candidate below the p99 bound: no simulated rate meets it, even at the fast end of the
    interval. LoadGen, whose Server runs cost a search each, cannot do better than the served batches allow."""
    return bool(estimates) and all(not e.qps_hi > 0 for e in estimates.values())


def nearest_estimate(estimates: dict[Candidate, Estimate], bound_ms: float, max_wait_ms: Optional[float] = None) -> str:
    """With every estimate below the bound: the candidate whose no-load p99 comes closest, against the bound."""
    c, e = min(estimates.items(), key=lambda kv: (math.isnan(kv[1].idle_p99_ms), kv[1].idle_p99_ms))
    if math.isnan(e.idle_p99_ms):
        return f"nearest miss: {c.label()}: stage 3 estimates no load within p99 <= {bound_ms:g} ms; it would need a looser slo.p99_ms"
    over = e.idle_p99_ms / bound_ms
    wait = f"the batcher's {max_wait_ms:g} ms wait" if max_wait_ms is not None else "the batcher's wait"
    times = f"{over:,.0f}x" if over >= 10 else f"{over:.2f}x"
    return (f"nearest miss: {c.label()}: at no load, each query alone, stage 3 estimates a p99 of {e.idle_p99_ms:.3g} ms against the "
            f"{bound_ms:g} ms bound ({times} it") + (
            f"; from its served batch times at the fast end of their interval, {wait} included); it would need slo.p99_ms above "
            f"{e.idle_p99_ms:.3g}, a shorter serve.max_wait_ms or a smaller batcher size")


def nearest_miss(rejections: list[Rejection], confirmations: dict[Candidate, Confirmation], qps_target: Optional[float],
                 facts: dict[str, Facts], budget: float, estimates: Optional[dict[Candidate, Estimate]] = None,
                 bound_ms: Optional[float] = None, max_wait_ms: Optional[float] = None) -> str:
    """With no pick: the candidate that came closest, and what it would need. Where stage 3 put every candidate below
    the bound (`below_the_bound`, nothing served), the one whose no-load p99 comes closest."""
    if not confirmations and estimates and bound_ms is not None and below_the_bound(estimates):
        return nearest_estimate(estimates, bound_ms, max_wait_ms)
    if confirmations:
        c, conf = max(confirmations.items(), key=lambda kv: kv[1].max_qps)
        if conf.max_qps > 0 and qps_target is not None:
            return (f"nearest miss: {c.label()} holds {conf.max_qps:g} QPS under the bound ({qps_target / conf.max_qps:.2f}x short of "
                    f"slo.qps={qps_target:g}); it would need slo.qps={conf.max_qps:g} or lower, more threads (recommend.threads) "
                    "or a looser slo.p99_ms")
        return f"nearest miss: {c.label()}: no load met the bound; it would need a looser slo.p99_ms or a smaller batcher size"
    accuracy = [r for r in rejections if r.stage == ACCURACY and r.what in facts]
    if accuracy:
        r = min(accuracy, key=lambda r: budget_shortfall(facts[r.what], budget))
        return f"nearest miss: {r.what}: {r.reason}; it would need {r.needs}"
    memory = [r for r in rejections if r.stage == MEMORY and r.what in facts]
    if memory:
        r = min(memory, key=lambda r: facts[r.what].model_mb)
        return f"nearest miss: {r.what}: {r.reason}; it would need {r.needs}"
    first = rejections[0] if rejections else None
    return f"nearest miss: {first.what}: {first.reason}" if first else "no candidate ran"
