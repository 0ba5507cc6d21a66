"""The bottom line: which backend to ship, read off the results table against one accuracy budget.

`picks` goes over each workload, device and batch size of a results table (`bench.results.table`) and
names the smallest model whose ΔAUC lies within the reader's budget (`budget_verdict`, read against
`compare.max_auc_drop`), by the one pick rule `recommend` ranks with too (`bench.report.shipping_rank`,
whose measure here is the embedding bytes), with its bytes and its paired speedup against fp32; beside
it the fastest backend within the budget, a zero-loss choice (ΔAUC within ±`FP32_EQUIVALENT` of 0: fp32_tbe,
fp16_tbe) where one is faster than the pick, and the runner-up. When no backend is inside the budget,
or there is no ok fp32 row, the pick says so and names nothing. `gain_source` says where the speed
comes from (table batching, quantization) with the rows the sweep has.

Why the pick holds between runs. Which backend is named reads nothing timed: the budget verdict of
ΔAUC (the same cached model and eval set give the same ΔAUC every run) and the embedding bytes, ties
broken by ΔAUC and then by name, never by speed. Its speed is then read as non-inferiority
(`bench.stats.noninferiority_verdict`) against 1 − the row's speed margin (`speed_margin`,
compare.throughput_tolerance, 5%): `not slower` when the speedup's whole interval lies at or above
it, `slower` when wholly below, `borderline` when the interval crosses it. A model that is smaller,
within the budget and not slower is the decision; whether its interval also clears 1 + margin (a
gain, what the pick used to need) is noise. Two runs that differ only by noise therefore name the
same pick; their speed words can differ only across `borderline` (one run `not slower` or `slower`,
the other `borderline`), never `not slower` in one and `slower` in the other unless one interval
misses the true speedup. A speed that cannot be read (a degraded kernel, an interval too wide, none
recorded) leaves the pick named and says its speed was not judged, so a noisy kernel probe cannot
turn a run's bottom line into "no pick".

report.md's top and the console after a sweep both print `bottom_line`; a command that recommends
a backend reads `picks` itself. Pure functions of the table: nothing is measured here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd

from bench.report import fmt
from bench.report.shipping_rank import Shippable, rank
from bench.registry import BATCHED_BACKEND, SPLIT_BACKEND
from bench.results.key import BASELINE, UNSHARDED, shown_axes
from bench.results.readable import too_short, unreadable
from bench.results.table import DEFAULT_SPEED_MARGIN
from bench.stats import (BORDERLINE, FP32_EQUIVALENT, INCONCLUSIVE, NOT_SLOWER, SLOWER, fp32_equivalent,
                         noninferiority_verdict)

BATCHED, QUANTIZED = BATCHED_BACKEND, SPLIT_BACKEND  # the rows that split a speedup into batching and quantization
NOT_JUDGED = "not judged"


def _num(value: Any) -> float:
    return math.nan if fmt.missing(value) else float(value)


@dataclass(frozen=True)
class Choice:
    """One backend's row as the bottom line quotes it."""

    backend: str
    speedup: float
    speedup_lo: float
    speedup_hi: float
    speedup_method: Optional[str]  # paired | unpaired
    speed_verdict: Optional[str]
    speed_margin: float  # relative: the non-inferiority bound is 1 - speed_margin
    kernel_degraded: Optional[str]  # degraded kernels under its timing: its speed says nothing of the backend
    compression: float  # fp32 embedding bytes / its embedding bytes
    embedding_bytes: float
    auc_delta: float
    auc_delta_lo: float
    auc_delta_hi: float

    @classmethod
    def of(cls, r: Any) -> "Choice":
        margin = _num(getattr(r, "speed_margin", math.nan))
        degraded = getattr(r, "kernel_degraded", None)
        return cls(r.backend, _num(r.speedup), _num(r.speedup_lo), _num(r.speedup_hi), r.speedup_method, r.speed_verdict,
                   DEFAULT_SPEED_MARGIN if math.isnan(margin) else margin, degraded if isinstance(degraded, str) else None,
                   _num(r.compression), _num(r.embedding_bytes), _num(r.auc_delta), _num(r.auc_delta_lo), _num(r.auc_delta_hi))

    @property
    def bound(self) -> float:
        return 1.0 - self.speed_margin

    @property
    def unreadable(self) -> bool:
        return unreadable(self.speedup, self.speedup_lo, self.speedup_hi)

    def too_short(self) -> str:
        return self.speed_verdict if isinstance(self.speed_verdict, str) and self.speed_verdict.startswith("too short") else too_short()

    def unjudged(self) -> Optional[str]:
        """Why its speed cannot be read against fp32, or None when it can."""
        if self.kernel_degraded:
            return f"timed on a degraded kernel ({self.kernel_degraded})"
        if math.isnan(self.speedup):
            return "no speedup recorded"
        if self.unreadable:
            return self.too_short()
        if math.isnan(self.speedup_lo) or math.isnan(self.speedup_hi):
            return "no interval"
        return None

    @property
    def reading(self) -> str:
        """not slower | borderline | slower (`noninferiority_verdict` against 1 − speed_margin), or not judged."""
        if self.unjudged() is not None:
            return NOT_JUDGED
        verdict = noninferiority_verdict(self.speedup_lo, self.speedup_hi, self.speed_margin)
        return NOT_JUDGED if verdict == INCONCLUSIVE else verdict

    @property
    def zero_loss(self) -> bool:
        return fp32_equivalent(self.auc_delta_lo, self.auc_delta_hi)

    def speed_text(self) -> str:
        if self.unreadable:
            return f"speed against fp32 {self.too_short()}"
        ci = fmt.ratio_ci(self.speedup, self.speedup_lo, self.speedup_hi)
        method = " (unpaired: two jobs' trials)" if self.speedup_method == "unpaired" else ""
        return f"{ci} fp32's speed{method}"

    def reading_text(self) -> str:
        """The speed text with its non-inferiority reading, as the pick is quoted."""
        if self.unreadable and not self.kernel_degraded:
            return f"speed not judged: {self.too_short()}"
        words = {NOT_SLOWER: "not slower", BORDERLINE: f"borderline: its interval crosses {self.bound:.2f}",
                 SLOWER: f"slower: its interval lies below {self.bound:.2f}"}
        reading = self.reading
        return f"{self.speed_text()}, " + (words[reading] if reading in words else f"speed not judged: {self.unjudged()}")

    def size_text(self) -> str:
        if fmt.missing(self.compression):
            return "embedding bytes not recorded"
        if math.isclose(self.compression, 1.0, rel_tol=0.005):
            return f"fp32's embedding bytes ({fmt.megabytes(self.embedding_bytes)} MB)"
        return f"{self.compression:.2f}× smaller embeddings ({fmt.megabytes(self.embedding_bytes)} MB)"

    def brief(self) -> str:
        return f"{self.backend}: {self.size_text()}, {self.speed_text()}"


@dataclass(frozen=True)
class Pick:
    """The bottom line of one workload, device and batch size: the choice, the fastest within the budget and
    a faster zero-loss choice where they are other backends, and the runner-up; or why none."""

    workload: str
    device: str
    batch_size: int
    budget: float
    choice: Optional[Choice]
    runner_up: Optional[Choice]
    reason: Optional[str]  # why nothing is picked (choice is None), else None
    fastest: Optional[Choice] = None  # the fastest within the budget, when not the choice
    zero_loss: Optional[Choice] = None  # the smallest zero-loss choice faster than the pick, when not the fastest
    rivals: tuple[str, ...] = ()  # within the budget, not told apart from the fastest (intervals reach its low end)

    @property
    def reading(self) -> Optional[str]:
        """The pick's speed word (not slower | borderline | slower | not judged), None without a pick."""
        return None if self.choice is None else self.choice.reading

    def line(self) -> str:
        where = f"{self.workload} on {self.device}, batch {self.batch_size}"
        if self.choice is None:
            return f"{where}: no pick: {self.reason}."
        c = self.choice
        text = (f"{where}: **{c.backend}**: {c.size_text()}, {c.reading_text()}, "
                f"ΔAUC {fmt.delta_ci(c.auc_delta, c.auc_delta_lo, c.auc_delta_hi)}")
        runner = self.runner_up
        apart = f" (not told apart from {', '.join(self.rivals)}: their intervals reach its low end)" if self.rivals else ""
        if self.fastest is not None:
            f = self.fastest
            role = "runner-up and fastest" if runner is not None and runner.backend == f.backend else "fastest"
            text += f"; {role} within the budget{', at zero loss' if f.zero_loss else ''}: {f.brief()}{apart}"
            runner = None if role != "fastest" else runner
        elif c.reading != NOT_JUDGED:
            text += f"; also the fastest within the budget{apart}"
        if self.zero_loss is not None:
            text += f"; a zero-loss choice is faster than the pick: {self.zero_loss.brief()} (ΔAUC within ±{FP32_EQUIVALENT:g} of 0)"
        if runner is not None:
            text += f"; runner-up {runner.brief()}"
        return text + "."


def _candidates(g: pd.DataFrame) -> pd.DataFrame:
    """The rows that may be shipped: ok, trained (an AUC measured), unsharded, not the reference."""
    one = (g["sharding"] == UNSHARDED[0]) & (g["world_size"] == UNSHARDED[1])
    return g[(g["status"] == "ok") & one & (g["backend"] != BASELINE) & ~g["performance_only"].astype(bool)]


def _beside(choices: list[Choice]) -> tuple[Optional[Choice], Optional[Choice], tuple[str, ...]]:
    """(the fastest of `choices` whose speed can be read, the smallest zero-loss one faster than the pick, the
    others whose speedup interval reaches the fastest's low end: not told apart from it), `choices` being the
    backends within the budget in pick order, the pick first: the fastest None where it is the pick, the
    zero-loss one None where there is none or it is the fastest (named once)."""
    first = choices[0]
    judged = [c for c in choices if c.reading != NOT_JUDGED]
    fastest = max(judged, key=lambda c: c.speedup, default=None)  # ties: the smaller (choices are in pick order)
    rivals = tuple(c.backend for c in judged if fastest is not None and c is not fastest and c.speedup_hi >= fastest.speedup_lo)
    zero = None
    if first.reading != NOT_JUDGED and not first.zero_loss:
        zero = next((c for c in judged if c.zero_loss and c.speedup > first.speedup), None)  # the smallest such
    fastest = None if fastest is None or fastest.backend == first.backend else fastest
    zero = None if zero is None or (fastest is not None and zero.backend == fastest.backend) else zero
    return fastest, zero, rivals


def shippable(r: Any) -> Shippable[Choice]:
    """A results row as the one pick rule reads it (`bench.report.shipping_rank`): its ΔAUC and embedding bytes."""
    c = Choice.of(r)
    return Shippable(c, c.backend, c.auc_delta, c.auc_delta_lo, c.auc_delta_hi, c.embedding_bytes)


def picks(df: pd.DataFrame, budget: float) -> list[Pick]:
    """For each workload, device and batch size of `df` (a `results_table` read against `budget`), the
    smallest model (fewest embedding bytes; on a tie the higher ΔAUC, then the name: nothing timed) whose
    ΔAUC is within the budget (the one pick rule, `shipping_rank.rank`, with its default measure), its
    speed read as non-inferiority (`Choice.reading`), the fastest within the budget and a faster zero-loss choice beside it, and the runner-up; None with the reason when none
    is within the budget, or when there is no ok fp32 row to read against."""
    out = []
    if df.empty:
        return out
    axes = shown_axes(df)  # a point of a further axis (table rows, access) is picked for on its own
    for point, g in df.groupby(["workload", "device", *axes, "batch_size"], sort=False, dropna=False):
        workload, device, bs = point[0], point[1], point[-1]
        at = ", ".join(f"{a} {fmt.word(g[a].iloc[0])}" for a in axes)
        workload = f"{workload} ({at})" if at else workload

        def pick(choice, runner, reason, fastest=None, zero=None, rivals=()):
            return Pick(str(workload), str(device), int(bs), budget, choice, runner, reason, fastest, zero, rivals)

        base = g[(g["backend"] == BASELINE) & (g["status"] == "ok")]
        rows = _candidates(g)
        if (g["status"] == "skipped").all():
            out.append(pick(None, None, "every job skipped: " + fmt.first_line(g["error"].iloc[0])))
            continue
        if base.empty:
            out.append(pick(None, None, "no ok fp32 row to read speed and accuracy against"))
            continue
        if rows.empty:
            why = "no other backend ran with a measured AUC" if not (g["backend"] != BASELINE).any() or g["performance_only"].any() \
                else "no other backend finished"
            out.append(pick(None, None, why))
            continue
        choices = [s.item for s in rank([shippable(r) for r in rows.itertuples(index=False)], budget)]
        if not choices:
            undecided = sorted(rows.loc[rows["budget_verdict"] == INCONCLUSIVE, "backend"])
            why = f"no backend is within the {budget:g} budget"
            why += f" ({', '.join(undecided)}: inconclusive against it)" if undecided else ""
            out.append(pick(None, None, why + "; stay on fp32"))
            continue
        fastest, zero, rivals = _beside(choices)
        out.append(pick(choices[0], choices[1] if len(choices) > 1 else None, None, fastest, zero, rivals))
    return out


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}×" if math.isclose(lo, hi, rel_tol=0.005) else f"{lo:.2f}-{hi:.2f}×"


def gain_source(g: pd.DataFrame) -> Optional[str]:
    """One sentence on where the speed of one workload and device comes from, from the paired speedups of
    fp32_tbe (table batching) and int8_tbe (batching and quantization) at each batch size the sweep has
    both; the quantization part is the ratio of those two paired speedups. None without those rows."""
    ok = g[(g["status"] == "ok") & (g["sharding"] == UNSHARDED[0]) & (g["world_size"] == UNSHARDED[1])]
    speed = {(r.backend, r.batch_size): r.speedup for r in ok.itertuples(index=False) if not fmt.missing(r.speedup)}
    verdict = {(r.backend, r.batch_size): r.speed_verdict for r in ok.itertuples(index=False)}
    sizes = sorted(bs for (b, bs) in speed if b == BATCHED and (QUANTIZED, bs) in speed)
    if not sizes:
        return None
    margin = float(g["speed_margin"].dropna().iloc[0]) if g["speed_margin"].notna().any() else DEFAULT_SPEED_MARGIN
    batching = [speed[(BATCHED, bs)] for bs in sizes]
    quant = [speed[(QUANTIZED, bs)] / speed[(BATCHED, bs)] for bs in sizes]
    where = f"batch {sizes[0]}" if len(sizes) == 1 else f"batch sizes {', '.join(map(str, sizes))}"
    paired = all(m == "paired" for m in ok.loc[ok["backend"].isin((BATCHED, QUANTIZED)), "speedup_method"])
    how = "paired speedups" if paired else "speedups, not all paired"
    text = (f"table batching ({BATCHED} vs fp32) {_span(batching)} and quantization on top ({QUANTIZED} / {BATCHED}, "
            f"the ratio of their {how}) {_span(quant)} at {where}")
    up, down = 1 + margin, 1 / (1 + margin)
    parts = []
    gained = [bs for bs in sizes if verdict.get((BATCHED, bs)) == "gain"]  # read off each speedup's own interval
    if len(gained) == len(sizes):
        parts.append("the speed comes from table batching")
    elif gained:
        parts.append(f"table batching is a gain beyond noise at batch {', '.join(map(str, gained))} only")
    elif max(batching) < down:
        parts.append("table batching costs speed here")
    if all(down <= q <= up for q in quant):
        parts.append("quantization adds no speed beyond ±" + f"{margin:.0%}" + " and buys memory")
    elif min(quant) > up:
        parts.append("quantization adds speed of its own")
    elif max(quant) < down:
        parts.append("quantization costs speed and buys memory")
    else:
        parts.append("quantization's part varies across batch sizes")
    memory = ok[(ok["backend"] == QUANTIZED) & ok["compression"].notna()]["compression"]
    if not memory.empty:
        parts[-1] += f" ({QUANTIZED}'s tables {float(memory.iloc[0]):.2f}× smaller)"
    return f"{text}: {'; '.join(parts)}."


def _collapsed(found: list[Pick]) -> list[str]:
    """One line per pick; the batch sizes of one workload and device that name nothing for one reason share a line."""
    lines: list[str] = []
    runs: list[list[Pick]] = []
    for p in found:
        last = runs[-1][-1] if runs else None
        same = last is not None and last.choice is None and p.choice is None and last.runner_up is None and p.runner_up is None \
            and (last.workload, last.device, last.reason) == (p.workload, p.device, p.reason)
        runs[-1].append(p) if same else runs.append([p])
    for run in runs:
        if len(run) == 1:
            lines.append(run[0].line())
        else:
            sizes = ", ".join(str(p.batch_size) for p in run)
            lines.append(f"{run[0].workload} on {run[0].device}, batch sizes {sizes}: no pick: {run[0].reason}.")
    return lines


def bottom_line(df: pd.DataFrame, budget: float) -> list[str]:
    """The bottom line as lines of text (markdown list items after the first): the budget and the speed
    bound it used, one line per workload, device and batch size (`picks`), then where the gain comes from
    per workload and device (`gain_source`). [] for a table with no accuracy rows (serving-only sweeps)."""
    if df.empty or "budget_verdict" not in df.columns:
        return []
    found = picks(df, budget)
    if not found:
        return []
    margins = df["speed_margin"].dropna() if "speed_margin" in df.columns else pd.Series(dtype=float)
    margin = float(margins.iloc[0]) if not margins.empty else DEFAULT_SPEED_MARGIN
    lines = [f"Bottom line (accuracy budget: an AUC drop of at most {budget:g} against fp32, compare.max_auc_drop; "
             "the smallest model within it, its embedding bytes and speedup against fp32, its speed read as not slower "
             f"when the speedup's interval lies at or above {1 - margin:.2f} (1 − the {margin:.0%} speed margin, "
             "compare.throughput_tolerance) and borderline when it crosses that bound; beside it the fastest backend "
             "within the budget, a zero-loss choice where one is faster, and the runner-up):"]
    lines += [f"- {line}" for line in _collapsed(found)]
    for (workload, device), g in df.groupby(["workload", "device"], sort=False):
        source = gain_source(g)
        if source:
            lines.append(f"- Where the gain comes from ({workload} on {device}): {source}")
    return lines
