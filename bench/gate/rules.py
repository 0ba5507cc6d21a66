"""Rules: one function per rule reads a measure off a results row; one judge turns it into a verdict.

Most rules judge rows of the results table (one per workload, device, backend, batch size); the
serving rules (`min_qps_at_sla`, `min_qps_ratio`, `max_p99_ms`) judge rows of the serving table
(`bench.results.serving_table`, one per backend, scenario and bound): each rule names the rows it judges.

A rule is registered by name (the same name is a `RuleSet` field and the YAML key). Its measure
returns the value and, where the row has one, the 95% interval of that value, as the comparison
engine's `Figure` (`bench.comparison`: the speedup interval is the engine's bootstrap over both
runs' trials; the AUC interval is the run's paired ΔAUC interval). The judge compares both with
the threshold:

- pass: the point estimate is on the allowed side and the interval does not reach past it;
- fail: the point estimate crosses the threshold;
- inconclusive: the point is allowed but the interval straddles the threshold (fails when
  `inconclusive_fails`), or the metric is missing.

A speed rule is decided by its interval alone: the speedup's interval covers what a re-run would
measure (rounds in the job's process and the spread between processes), so the rule passes when
the whole interval is on the allowed side, fails when the whole interval is past the threshold,
and reads inconclusive while the interval straddles it, wherever the point lies. How steady the
absolute throughput was (`stable`) is its own flag and does not enter the ratio's verdict.

The `max_auc_drop` rule reads its threshold as an accuracy budget through the one accuracy rule
(`bench.stats.budget_verdict`, which report.md, tune and recommend read too): pass when the ΔAUC
interval is within it, fail when over it or when the point alone is over, inconclusive otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional

from bench import stats
from bench.comparison import Figure, finite
from bench.metrics import ACC, ACC_DELTA, AUC, AUC_DELTA, EMBEDDING_BYTES, GAUC, GAUC_DELTA, MAX_QPS, NE, NE_DELTA, SPEEDUP, hi, lo

PASS, FAIL, INCONCLUSIVE, SKIPPED = "pass", "fail", "inconclusive", "skipped"
VERDICTS = (FAIL, INCONCLUSIVE, SKIPPED, PASS)  # display order: failing rows first

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Measure:
    value: Optional[float]
    interval: Optional[tuple[float, float]] = None
    missing: str = ""  # why there is no value
    # Decided by the interval alone: pass or fail only when the whole interval is on one side.
    by_interval: bool = False
    # An AUC drop read by the one accuracy rule (`bench.stats.budget_verdict`) against the threshold as a budget.
    by_budget: bool = False
    label: str = ""  # what the value is, where the rule read another figure than its label names


JOB_ROWS = ("job",)  # rows of the results table (bench.results.table)
SERVER, OFFLINE = "server", "offline"  # rows of the serving table (bench.results.serving_table), by scenario


@dataclass(frozen=True)
class Rule:
    name: str
    bound: str  # "max": value must be <= threshold; "min": value must be >= threshold
    label: str  # what the value is, for reasons
    measure: Callable[[Row], Measure]
    fmt: Callable[[float], str]
    rows: tuple[str, ...] = JOB_ROWS  # the kinds of row it judges (`row_kind`); other rows skip it


RULES: dict[str, Rule] = {}


def rule(name: str, bound: str, label: str, fmt: Callable[[float], str], rows: tuple[str, ...] = JOB_ROWS) -> Callable:
    def decorate(measure: Callable[[Row], Measure]) -> Callable[[Row], Measure]:
        if name in RULES:
            raise ValueError(f"gate rule {name!r} is registered twice")
        RULES[name] = Rule(name, bound, label, measure, fmt, rows)
        return measure

    return decorate


def row_kind(row: Row) -> str:
    """`job` for a results-table row; the scenario (server, offline) for a serving-table row."""
    scenario = row.get("scenario")
    return scenario if isinstance(scenario, str) else JOB_ROWS[0]


def figure(row: Row, value: str, lo: Optional[str] = None, hi: Optional[str] = None) -> Figure:
    """A results cell (and its interval cells) as the comparison engine's figure."""
    return Figure.of(row.get(value), row.get(lo) if lo else None, row.get(hi) if hi else None)


def _measure(f: Figure) -> Measure:
    return Measure(f.value, f.interval)


def fmt_auc(v: float) -> str:
    """Five decimals, for AUC drops and AUC ratios alike."""
    return f"{round(v, 5) + 0.0:.5f}"  # + 0.0: no "-0.00000"


def fmt_speedup(v: float) -> str:
    return "∞" if v == float("inf") else f"{v:.2f}x"


def fmt_bytes(v: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= size:
            return f"{v / size:.2f} {unit}"
    return f"{v:.0f} B"


_NO_REF = "auc_delta is missing (no fp32 row at this workload/device/batch?)"


@rule("max_auc_drop", "max", "AUC drop vs fp32", fmt_auc)
def auc_drop(row: Row) -> Measure:
    delta = figure(row, AUC_DELTA, lo(AUC_DELTA), hi(AUC_DELTA))  # paired, from the run's scores
    if delta.value is None:
        return Measure(None, missing=_NO_REF)
    drop = delta.scaled(-1.0)
    return Measure(drop.value, drop.interval, by_budget=True)


def _ratio_to_fp32(row: Row, value: str, delta: str, label: str) -> Measure:
    """value / fp32's value, fp32's recovered as value - delta (the paired delta on the same eval samples).
    The paired CI is of the delta; fp32's value is taken as fixed, as the threshold is a fraction of it."""
    own, d = finite(row.get(value)), figure(row, delta, lo(delta), hi(delta))
    if own is None:
        return Measure(None, missing=f"{value} is missing")
    if d.value is None:
        return Measure(None, missing=f"{delta} is missing (no fp32 row at this workload/device/batch, or a record "
                                     "written before it was measured?)")
    ref = own - d.value
    if ref <= 0:
        return Measure(None, missing=f"fp32 {label} {ref:.4f} is not positive")
    return _measure(d.scaled(1 / ref, 1.0))  # value / ref = 1 + delta / ref


@rule("min_auc_ratio", "min", "AUC / fp32 AUC", fmt_auc)
def auc_ratio(row: Row) -> Measure:
    return _ratio_to_fp32(row, AUC, AUC_DELTA, "AUC")


@rule("min_gauc_ratio", "min", "grouped AUC / fp32 grouped AUC", fmt_auc)
def gauc_ratio(row: Row) -> Measure:
    # MLPerf DLRMv3's AUC: each request's AUC over its candidates, averaged (its accuracy script's lifetime_gauc, what
    # its submission checker reads as DLRM_AUC). A workload not served by request is one group: the AUC over every pair.
    if finite(row.get(GAUC)) is None:  # a record of a workload without requests, or written before gauc was measured
        return replace(_ratio_to_fp32(row, AUC, AUC_DELTA, "AUC"), label="AUC / fp32 AUC (no grouped AUC in the record: every pair one group)")
    return _ratio_to_fp32(row, GAUC, GAUC_DELTA, "grouped AUC")


@rule("min_acc_ratio", "min", "accuracy / fp32 accuracy", fmt_auc)
def acc_ratio(row: Row) -> Measure:
    # MLPerf DLRMv3: accuracy at 0.5 on the probability within 99.9% of the reference's
    return _ratio_to_fp32(row, ACC, ACC_DELTA, "accuracy")


@rule("max_ne_ratio", "max", "NE / fp32 NE", fmt_auc)
def ne_ratio(row: Row) -> Measure:
    # MLPerf DLRMv3: NE (lower is better) at most 100.1% of the reference's
    return _ratio_to_fp32(row, NE, NE_DELTA, "NE")


@rule("min_speedup", "min", "speedup vs fp32", fmt_speedup)
def speedup(row: Row) -> Measure:
    # Paired against fp32 in the job's process when the record has it; else the engine's ratio of the
    # two rows' trials (the results table says which in `speedup_method`).
    if row.get("kernel_degraded"):  # a figure measured on a fallback kernel is not the backend's speed
        return Measure(None, missing=f"Kernel health: {row['kernel_degraded']} degraded on this stack (report.md says "
                                     "why and how to fix it): the speed measured is the fallback kernel's")
    value = figure(row, SPEEDUP, lo(SPEEDUP), hi(SPEEDUP))
    if value.value is None:
        return Measure(None, missing="speedup is missing (no fp32 throughput at this workload/device/batch?)")
    return Measure(value.value, value.interval, by_interval=True)


@rule("max_embedding_bytes", "max", "embedding bytes", fmt_bytes)
def embedding_bytes(row: Row) -> Measure:
    value = finite(row.get(EMBEDDING_BYTES))
    return Measure(None, missing="embedding_bytes is missing") if value is None else Measure(value)


def fmt_qps(v: float) -> str:
    return f"{v:g} QPS"


def fmt_ms(v: float) -> str:
    return f"{v:.1f} ms"


@rule("min_qps_at_sla", "min", "max QPS at the p99 bound", fmt_qps, rows=(SERVER,))
def qps_at_sla(row: Row) -> Measure:
    # The highest target LoadGen judged VALID; 0 when none was (the search's bracket is in serve.md).
    value = finite(row.get(MAX_QPS))
    return Measure(None, missing="max_qps is missing") if value is None else Measure(value)


@rule("min_qps_ratio", "min", "QPS / fp32 QPS", fmt_speedup, rows=(SERVER, OFFLINE))
def qps_ratio(row: Row) -> Measure:
    # Server: max QPS at the bound; Offline: samples/s; against fp32's with the same scenario, bound and batcher.
    # A Server job paired with fp32 (serve.paired): the ratio to the fp32 search run beside it, with the interval
    # both brackets allow (an open end reaches to 0 or infinity): a ratio whose interval straddles the threshold
    # is inconclusive.
    value = finite(row.get("qps_ratio"))
    if value is None:
        short = row.get("ratio_evidence")  # a paired job whose cap came before the ratio's evidence says so
        return Measure(None, missing=short if isinstance(short, str) else "qps_ratio is missing (no ok fp32 serving row with this scenario, "
                       "bound and batcher, or a side of a paired search met no load)")
    if row.get("ratio_method") != "paired":
        return Measure(value)
    low, high = finite(row.get("qps_ratio_lo")), finite(row.get("qps_ratio_hi"))
    return Measure(value, (0.0 if low is None else low, float("inf") if high is None else high))


@rule("max_p99_ms", "max", "p99 latency at max QPS", fmt_ms, rows=(SERVER,))
def p99_ms(row: Row) -> Measure:
    # At the highest VALID target; where none was VALID, at the lowest load tried.
    value = finite(row.get("latency_p99_ms"))
    return Measure(None, missing="latency_p99_ms is missing") if value is None else Measure(value)


def judge(r: Rule, threshold: float, m: Measure, inconclusive_fails: bool) -> tuple[str, str]:
    """(verdict, reason) for one rule over one row."""
    if m.value is None:
        return _inconclusive(m.missing, inconclusive_fails)
    t = float(threshold)
    allowed = "<=" if r.bound == "max" else ">="
    crosses = m.value > t if r.bound == "max" else m.value < t
    straddles = False
    if m.interval is not None:
        lo, hi = m.interval
        # Part of the interval lies past the threshold and part does not.
        straddles = (lo <= t < hi) if r.bound == "max" else (lo < t <= hi)
    shown = f"{m.label or r.label} {r.fmt(m.value)}" + (f" (95% CI {r.fmt(m.interval[0])} .. {r.fmt(m.interval[1])})" if m.interval else "")
    if m.by_budget:
        return _by_budget(m, t, shown, allowed, r.fmt(t), inconclusive_fails)
    if m.by_interval and m.interval is not None:
        lo, hi = m.interval
        past = hi < t if r.bound == "min" else lo > t  # the whole interval lies past the threshold
        if past:
            return FAIL, f"{shown}, allowed {allowed} {r.fmt(t)}; the whole interval is past it"
        if not straddles and not crosses:
            return PASS, f"{shown} {allowed} {r.fmt(t)}"
        return _inconclusive(f"{shown} against {allowed} {r.fmt(t)}: undecided, the interval straddles the threshold",
                             inconclusive_fails)
    if crosses:
        note = "; the CI straddles the threshold, so the crossing is not distinguishable from noise" if straddles else ""
        return FAIL, f"{shown}, allowed {allowed} {r.fmt(t)}{note}"
    if straddles:
        return _inconclusive(f"{shown} straddles the threshold {r.fmt(t)}", inconclusive_fails)
    return PASS, f"{shown} {allowed} {r.fmt(t)}"


def _by_budget(m: Measure, t: float, shown: str, allowed: str, t_text: str, inconclusive_fails: bool) -> tuple[str, str]:
    """An AUC drop (and its interval) against the threshold `t` as an accuracy budget, by the one rule
    (`stats.budget_verdict` on the ΔAUC interval): pass within it, fail over it; where the interval straddles
    it, fail when the point itself is over (the point's own reading by the same rule), else inconclusive."""
    lo, hi = m.interval if m.interval is not None else (m.value, m.value)
    reading = stats.budget_verdict(-hi, -lo, t)  # the drop's interval back as ΔAUC's
    if reading == stats.WITHIN_BUDGET:
        return PASS, f"{shown} {allowed} {t_text}"
    if stats.budget_verdict(-m.value, -m.value, t) == stats.OVER_BUDGET:
        note = "; the CI straddles the threshold, so the crossing is not distinguishable from noise" if reading != stats.OVER_BUDGET else ""
        return FAIL, f"{shown}, allowed {allowed} {t_text}{note}"
    return _inconclusive(f"{shown} straddles the threshold {t_text}", inconclusive_fails)


def _inconclusive(reason: str, inconclusive_fails: bool) -> tuple[str, str]:
    if inconclusive_fails:
        return FAIL, f"inconclusive (counted as a failure: gate.inconclusive_fails=true): {reason}"
    return INCONCLUSIVE, reason
