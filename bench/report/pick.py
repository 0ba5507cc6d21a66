"""The bottom line: which backend to ship, read off the results table against one accuracy budget.

`picks` goes over each workload, device and batch size of a results table (`bench.results.table`) and
names the smallest model whose ΔAUC lies within the reader's budget (`budget_verdict`, read against
`compare.max_auc_drop`), with its paired speedup and its bytes against fp32, and the runner-up. When
no backend is inside the budget, or the pick's speed against fp32 cannot be told (its verdict
inconclusive, or its interval too wide to read), the pick says so and names nothing. `gain_source`
says where the speed comes from (table batching, quantization) with the rows the sweep has.

report.md's top and the console after a sweep both print `bottom_line`; a command that recommends
a backend reads `picks` itself. Pure functions of the table: nothing is measured here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd

from bench.metrics import EMBEDDING_BYTES, SPEEDUP
from bench.report import fmt
from bench.registry import BATCHED_BACKEND, SPLIT_BACKEND
from bench.results.key import BASELINE, UNSHARDED, shown_axes
from bench.stats import WITHIN_BUDGET

BATCHED, QUANTIZED = BATCHED_BACKEND, SPLIT_BACKEND  # the rows that split a speedup into batching and quantization
UNDECIDED_SPEED = ("inconclusive",)


@dataclass(frozen=True)
class Choice:
    """One backend's row as the bottom line quotes it."""

    backend: str
    speedup: float
    speedup_lo: float
    speedup_hi: float
    speedup_method: Optional[str]  # paired | unpaired
    speed_verdict: Optional[str]
    compression: float  # fp32 embedding bytes / its embedding bytes
    embedding_bytes: float
    auc_delta: float
    auc_delta_lo: float
    auc_delta_hi: float

    @classmethod
    def of(cls, r: Any) -> "Choice":
        return cls(r.backend, r.speedup, r.speedup_lo, r.speedup_hi, r.speedup_method, r.speed_verdict, r.compression,
                   r.embedding_bytes, r.auc_delta, r.auc_delta_lo, r.auc_delta_hi)

    @property
    def speed_undecided(self) -> bool:
        return fmt.missing(self.speedup) or not isinstance(self.speed_verdict, str) or (
            self.speed_verdict in UNDECIDED_SPEED or self.speed_verdict.startswith("too short"))

    def speed_text(self) -> str:
        ci = fmt.ratio_ci(self.speedup, self.speedup_lo, self.speedup_hi)
        method = " (unpaired: two jobs' trials)" if self.speedup_method == "unpaired" else ""
        return f"{ci} fp32's speed{method}"

    def size_text(self) -> str:
        if fmt.missing(self.compression):
            return "embedding bytes not recorded"
        if math.isclose(self.compression, 1.0, rel_tol=0.005):
            return f"fp32's embedding bytes ({fmt.megabytes(self.embedding_bytes)} MB)"
        return f"{self.compression:.2f}× smaller embeddings ({fmt.megabytes(self.embedding_bytes)} MB)"


@dataclass(frozen=True)
class Pick:
    """The bottom line of one workload, device and batch size: the choice and the runner-up, or why none."""

    workload: str
    device: str
    batch_size: int
    budget: float
    choice: Optional[Choice]
    runner_up: Optional[Choice]
    reason: Optional[str]  # why nothing is picked (choice is None), else None

    def line(self) -> str:
        where = f"{self.workload} on {self.device}, batch {self.batch_size}"
        if self.choice is None:
            return f"{where}: no pick: {self.reason}."
        c = self.choice
        text = (f"{where}: **{c.backend}**: {c.size_text()}, {c.speed_text()}, "
                f"ΔAUC {fmt.delta_ci(c.auc_delta, c.auc_delta_lo, c.auc_delta_hi)}")
        if self.runner_up is not None:
            r = self.runner_up
            text += f"; runner-up {r.backend}: {r.size_text()}, {r.speed_text()}"
        return text + "."


def _candidates(g: pd.DataFrame) -> pd.DataFrame:
    """The rows that may be shipped: ok, trained (an AUC measured), unsharded, not the reference."""
    one = (g["sharding"] == UNSHARDED[0]) & (g["world_size"] == UNSHARDED[1])
    return g[(g["status"] == "ok") & one & (g["backend"] != BASELINE) & ~g["performance_only"].astype(bool)]


def picks(df: pd.DataFrame, budget: float) -> list[Pick]:
    """For each workload, device and batch size of `df` (a `results_table` read against `budget`), the
    smallest model (fewest embedding bytes; on a tie the faster) whose ΔAUC is within the budget, and
    the runner-up; None with the reason when none is within it, when there is no ok fp32 row to read
    against, or when the smallest one's speed against fp32 is undecided."""
    out = []
    if df.empty:
        return out
    axes = shown_axes(df)  # a point of a further axis (table rows, access) is picked for on its own
    for point, g in df.groupby(["workload", "device", *axes, "batch_size"], sort=False, dropna=False):
        workload, device, bs = point[0], point[1], point[-1]
        at = ", ".join(f"{a} {fmt.word(g[a].iloc[0])}" for a in axes)
        workload = f"{workload} ({at})" if at else workload
        pick = lambda choice, runner, reason: Pick(str(workload), str(device), int(bs), budget, choice, runner, reason)  # noqa: E731
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
        inside = rows[rows["budget_verdict"] == WITHIN_BUDGET]
        if inside.empty:
            undecided = sorted(rows.loc[rows["budget_verdict"] == "inconclusive", "backend"])
            why = f"no backend is within the {budget:g} budget"
            why += f" ({', '.join(undecided)}: inconclusive against it)" if undecided else ""
            out.append(pick(None, None, why + "; stay on fp32"))
            continue
        ranked = inside.assign(_bytes=inside[EMBEDDING_BYTES].fillna(math.inf), _speed=-inside[SPEEDUP].fillna(0.0))
        ranked = ranked.sort_values(["_bytes", "_speed"], kind="mergesort")
        choices = [Choice.of(r) for r in ranked.itertuples(index=False)]
        first, runner = choices[0], (choices[1] if len(choices) > 1 else None)
        if first.speed_undecided:
            out.append(pick(None, runner, f"{first.backend} is the smallest within the {budget:g} budget "
                                          f"({first.size_text()}), but its speed against fp32 is undecided "
                                          f"({first.speed_text()}, {first.speed_verdict})"))
            continue
        out.append(pick(first, runner, None))
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
    margin = float(g["speed_margin"].dropna().iloc[0]) if g["speed_margin"].notna().any() else 0.05
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
    """The bottom line as lines of text (markdown list items after the first): the budget it used, one
    line per workload, device and batch size (`picks`), then where the gain comes from per workload and
    device (`gain_source`). [] for a table with no accuracy rows (serving-only sweeps)."""
    if df.empty or "budget_verdict" not in df.columns:
        return []
    found = picks(df, budget)
    if not found:
        return []
    lines = [f"Bottom line (accuracy budget: an AUC drop of at most {budget:g} against fp32, compare.max_auc_drop; "
             "the smallest model within it, its speedup and its embedding bytes against fp32, and the runner-up):"]
    lines += [f"- {line}" for line in _collapsed(found)]
    for (workload, device), g in df.groupby(["workload", "device"], sort=False):
        source = gain_source(g)
        if source:
            lines.append(f"- Where the gain comes from ({workload} on {device}): {source}")
    return lines
