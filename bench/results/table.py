"""`results_table`: one row per row key (`bench.results.key`: workload, device, backend, sharding,
world_size, batch_size and any axis declared beside them), the newest record winning.

`backend` is the backend's name alone; a sharded run's axes are columns of their own (`sharding`,
`world_size`, and `route`: `single` for one unsharded process, else the sharded run's `process_group`
or `one_process`), so a pandas user filters on them. The reports' tables name a sharded row by
`label` (`int8_tbe@row_wise×2`).

The gate and every report view read this DataFrame. Speedup and compression are relative to the
`fp32` row of the same workload and device (speedup also at the same batch size). A record timed
paired (ABBA rounds against fp32 in its own process) brings its own speedup and interval
(`speedup_method` paired; the interval also covers the spread between processes when the record
carries `speedup_process_sd`); otherwise the comparison engine's ratio of the two rows' per-trial
throughputs stands in (`unpaired`: the two were timed minutes apart). Each row also carries its
noise figures, the absolute throughput's flag `stable`, and the verdict words for ΔAUC and speedup
(`auc_verdict`, `speed_verdict`: equivalent, gain, loss or inconclusive against the margins in
`auc_margin` and `speed_margin`), each read off that figure's own interval.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Iterable

import pandas as pd

from bench.comparison import finite, ratio, samples, timing_setting_text
from bench.metrics import (
    ACC,
    ACC_DELTA,
    AUC,
    AUC_DELTA,
    AUC_DELTA_P,
    AUC_FP32,
    SCORES_SATURATED,
    CUDA_GRAPH_NOTE,
    CUDA_PEAK_BYTES,
    EMBEDDING_BYTES,
    FIDELITY_GAP,
    LATENCY_CALLS,
    LATENCY_MS,
    LATENCY_P99_CALLS,
    LOGLOSS,
    MODEL_BYTES,
    NE,
    NE_DELTA,
    N_EVAL,
    ORACLE_AUC,
    POPULARITY_AUC,
    PEAK_RSS_BYTES,
    SPEEDUP,
    SPEEDUP_PROCESS_SD,
    THROUGHPUT,
    THREADS,
    THROUGHPUT_TRIALS,
    hi,
    METRICS,
    SERVING,
    lo,
    with_interval,
)
from bench.record import RunRecord, degraded_kernels, is_serving, measure_of
from bench.results.key import (AXES, BASELINE, KEY, UNSHARDED, in_context, is_reference, key_of, key_values, reference_key, row_key,
                               sharding_of, sort_key)
from bench.results.machine_columns import EXTRA_COLUMNS, row_extras
from bench.results.readable import too_short, unreadable
from bench.config import MAX_AUC_DROP
from bench import stats
from bench.stats import practical_verdict

COLUMNS = [
    *KEY,
    "route",
    "status",
    AUC,
    AUC_DELTA,
    lo(AUC_DELTA),
    hi(AUC_DELTA),
    AUC_DELTA_P,
    *with_interval(NE_DELTA),  # ΔNE and Δaccuracy beside ΔAUC, each paired over the same eval samples
    *with_interval(ACC_DELTA),
    AUC_FP32,
    ORACLE_AUC,
    POPULARITY_AUC,
    FIDELITY_GAP,
    *(f"auc_delta_{part}{end}" for part in ("embeddings", "mlp") for end in ("", "_lo", "_hi")),
    N_EVAL,
    LOGLOSS,
    NE,
    ACC,
    SCORES_SATURATED,
    "score_read",  # a probabilities model: how its scores were read (before its nn.Sigmoid, or the clamp)
    "auc_delta_layers",  # attribute_layers=true: a ΔAUC past the gate's margin named by layer (bench.pipeline.layers)
    THROUGHPUT,
    lo(THROUGHPUT),
    hi(THROUGHPUT),
    SPEEDUP,
    lo(SPEEDUP),
    hi(SPEEDUP),
    "speedup_method",
    "speedup_rounds",
    "speedup_stop",
    SPEEDUP_PROCESS_SD,
    "timing_setting",
    "auc_verdict",
    "budget_verdict",  # ΔAUC read against the reader's one budget (compare.max_auc_drop): within budget | over budget | inconclusive
    "speed_verdict",
    "speed_disagreement",  # the samples/s and the paired speedup point opposite ways: why, or "unexplained"
    "auc_margin",
    "auc_budget",  # the budget budget_verdict was read against
    "speed_margin",
    "stable",
    "unstable_reason",
    "kernel_degraded",  # degraded kernels under the row's speed (bench.devices): its speed verdict is inconclusive
    "trial_cv",
    "ratio_spread",
    "load_avg",
    "steal_share",
    "timing_distinct_batches",
    "timing_calls_per_batch",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_p99_lo_ms",
    "latency_p99_hi_ms",
    LATENCY_CALLS,
    LATENCY_P99_CALLS,
    EMBEDDING_BYTES,
    MODEL_BYTES,
    "compression",
    PEAK_RSS_BYTES,
    CUDA_PEAK_BYTES,
    "ps_twin",
    "ps_precision",  # ps_redis: the precision of the rows it pulls (fp32, int8, int4)
    "ps_cache_fraction",
    "ps_hit_rate_steady",
    "ps_pull_share",
    "error",
    "error_kind",  # "user": the error is bad input met while running, not a failed measurement
    "config_hash",
    "fingerprint",
    "git_sha",
    "created_at",
    "fp32_embedding_bytes",
    *EXTRA_COLUMNS,  # where each job stood against the machine (bench.results.machine_columns)
]

# The record's figures copied into the table as numbers: every declared metric of one value, with its
# interval's bounds (the serving figures have their own table; speedup is joined in `results_table`).
_NOT_COPIED = {SPEEDUP, THROUGHPUT_TRIALS, LATENCY_MS, THREADS}  # threads: the row key's column (the threads the job set)
_METRICS = [name for m in METRICS.values() if m.stage != SERVING and m.name not in _NOT_COPIED
            for name in (with_interval(m.name) if m.interval else (m.name,))]
_METRICS += ["ps_cache_fraction", "ps_hit_rate_steady", "ps_pull_share"]  # the parameter server's (bench.report.paramserver)
COLUMNS += [name for name in _METRICS if name not in COLUMNS]  # a newly declared metric joins the table as it is


def as_records(records: Iterable[RunRecord | dict[str, Any]]) -> list[RunRecord]:
    return [r if isinstance(r, RunRecord) else RunRecord.from_dict(r) for r in records]


def created(record: RunRecord) -> datetime:
    """When the record was made (its `created_at`), the earliest time where it is unreadable: newest wins."""
    try:
        return datetime.fromisoformat(record.created_at)
    except (TypeError, ValueError):
        return datetime.min


def route_of(record: RunRecord) -> str | None:
    """`single` for an unsharded run; a sharded run's route (`process_group`, `one_process`) when it reached one."""
    if sharding_of(record) == UNSHARDED:
        return "single"
    return ((record.metrics or {}).get("sharding") or {}).get("route")


def latest_records(records: Iterable[RunRecord | dict[str, Any]]) -> dict[tuple, RunRecord]:
    """Newest record per row key (`bench.results.key`), serving jobs left out; on equal times the later one."""
    latest: dict[tuple, RunRecord] = {}
    # serving jobs and parts of jobs have their own tables (results.serving, .parts)
    kept = [r for r in as_records(records) if not (is_serving(r) or measure_of(r))]
    for r, k in zip(kept, in_context([key_of(r) for r in kept])):
        if k not in latest or created(r) >= created(latest[k]):
            latest[k] = r
    return latest


def trials(record: RunRecord | None) -> list[float]:
    """Per-trial throughputs of an ok record, or [] when there are none."""
    if record is None or record.status != "ok":
        return []
    return samples(record.metrics.get(THROUGHPUT_TRIALS))


def _num(value: Any) -> float:
    """A table cell: the finite number, or NaN."""
    x = finite(value)
    return math.nan if x is None else x


def _row(r: RunRecord, key: tuple) -> dict[str, Any]:
    m = r.metrics or {}
    lat = m.get(LATENCY_MS) or {}
    row: dict[str, Any] = key_values(r, key)
    row.update({
        "route": route_of(r),
        "status": r.status,
        "error": r.error,
        "error_kind": r.error_kind,
        "config_hash": r.config_hash,
        "fingerprint": (r.env or {}).get("fingerprint"),
        "git_sha": (r.env or {}).get("git_sha"),
        "created_at": r.created_at,
    })
    row.update({name: _num(m.get(name)) for name in _METRICS})
    row["score_read"] = m.get("score_read")
    row["auc_delta_layers"] = m.get("auc_delta_layers_line")
    row["ps_twin"] = m.get("ps_twin")  # ps_redis: the in-memory backend with the same rows
    row[CUDA_GRAPH_NOTE] = m.get(CUDA_GRAPH_NOTE)  # timing.cuda_graphs: why a job has no graphed figures
    row["ps_precision"] = m.get("ps_precision")
    for q in ("p50", "p90", "p99", "p99_lo", "p99_hi"):
        row[f"latency_{q}_ms"] = _num(lat.get(q))
    row["timing_setting"] = timing_setting_text(m)
    noise = m.get("noise") or {}
    row.update(
        stable=m.get("stable"),  # None: the record predates noise flags, or the job did not time
        unstable_reason=m.get("unstable_reason"),
        trial_cv=_num(noise.get("trial_cv")),
        ratio_spread=_num(noise.get("ratio_spread")),
        load_avg=_num(noise.get("load_end")),
        steal_share=_num(noise.get("steal_share")),
        timing_distinct_batches=_num(m.get("timing_distinct_batches")),
        timing_calls_per_batch=_num(m.get("timing_calls_per_batch")),
        speedup_rounds=len(m["speedup_rounds"]) if m.get("speedup_rounds") else math.nan,  # paired rounds timed
        speedup_stop=m.get("speedup_stop"),  # fixed | target | max_rounds
    )
    row.update(row_extras(r))
    # degraded kernels this row's speed rests on (bench.devices): its speed rules read inconclusive
    row["kernel_degraded"] = ", ".join(v["family"] for v in degraded_kernels(r)) or None
    return row


def speedup(new: RunRecord, base: RunRecord, alpha: float = 0.05) -> tuple[float, float, float]:
    """throughput(new) / throughput(base) with the trials' bootstrap interval (NaN when absent)."""
    point = _num(new.metrics.get(THROUGHPUT)) / _num(base.metrics.get(THROUGHPUT))
    t_new, t_base = trials(new), trials(base)
    if not (t_new and t_base):
        return point, math.nan, math.nan
    f = ratio(t_new, t_base, alpha=alpha)
    return point, f.lo, f.hi


def _paired_speedup(rec: RunRecord) -> tuple[float, float, float] | None:
    """The speedup timed against fp32 in the job's own process (ABBA rounds), when the record has one."""
    values = tuple(_num(rec.metrics.get(k)) for k in (SPEEDUP, lo(SPEEDUP), hi(SPEEDUP)))
    return None if any(math.isnan(v) for v in values) else values


def _tables(key: tuple) -> tuple:
    """The point of a row key the fp32 tables' bytes depend on: the axes a row shares with its reference
    (workload, device, ...), but not the batch size."""
    return tuple(v for a, v in zip(AXES, key) if a.reference is None and a.name != "batch_size")


def _relative_columns(df: pd.DataFrame, latest: dict[tuple, RunRecord], alpha: float) -> pd.DataFrame:
    speed = {SPEEDUP: [], lo(SPEEDUP): [], hi(SPEEDUP): [], "speedup_method": []}
    compression, fp32_table_bytes = [], []
    fp32_bytes = {}
    for k, r in latest.items():  # embedding bytes do not depend on the batch size
        if r.backend == BASELINE and r.status == "ok" and r.metrics.get(EMBEDDING_BYTES):
            fp32_bytes.setdefault(_tables(k), float(r.metrics[EMBEDDING_BYTES]))
    for row in df.itertuples(index=False):
        key = row_key(row)
        rec = latest[key]
        base = latest.get(reference_key(key))  # fp32 unsharded, in one process, at the same point
        s, method = (math.nan, math.nan, math.nan), None
        paired = _paired_speedup(rec) if rec.status == "ok" else None
        if paired is not None:
            s, method = paired, "paired"
        elif rec.status == "ok" and base is not None and base.status == "ok":
            s = (1.0, 1.0, 1.0) if base is rec else speedup(rec, base, alpha)
            method = "reference" if base is rec else "unpaired"
        for name, value in zip(speed, (*s, method)):
            speed[name].append(value)
        fb = fp32_bytes.get(_tables(key), math.nan)
        compression.append(fb / row.embedding_bytes if row.embedding_bytes and row.embedding_bytes > 0 else math.nan)
        fp32_table_bytes.append(fb)
    return df.assign(**speed, compression=compression, fp32_embedding_bytes=fp32_table_bytes)


# Margins of practical equivalence when a record's config names none (compare's tolerances).
DEFAULT_AUC_MARGIN = 0.0005
DEFAULT_SPEED_MARGIN = 0.05


def margins(rec: RunRecord, default_rules: bool = False) -> tuple[float, float]:
    """(ΔAUC margin, relative speed margin) for a row's verdict words, from the record's own config:
    the backend's gate rule (max_auc_drop, else min_auc_ratio (or min_gauc_ratio) x fp32 AUC, from gate.rules or
    gate.default_rules; with `default_rules`, gate.default_rules whatever the backend) and
    compare.throughput_tolerance."""
    cfg = rec.config or {}
    gate = cfg.get("gate") or {}
    own = None if default_rules else (gate.get("rules") or {}).get(rec.backend)
    rules = own or gate.get("default_rules") or {}
    auc_margin = finite(rules.get("max_auc_drop"))
    ratio = finite(rules.get("min_auc_ratio"))
    ratio = finite(rules.get("min_gauc_ratio")) if ratio is None else ratio  # MLPerf DLRMv3's, read on the AUC's scale
    auc_fp32 = finite(rec.metrics.get(AUC_FP32))
    if (auc_margin is None or auc_margin <= 0) and ratio is not None and auc_fp32 is not None:
        auc_margin = (1 - ratio) * auc_fp32
    if auc_margin is None or auc_margin <= 0:
        auc_margin = DEFAULT_AUC_MARGIN
    speed_margin = finite((cfg.get("compare") or {}).get("throughput_tolerance")) or DEFAULT_SPEED_MARGIN
    return auc_margin, speed_margin


def _verdict_columns(df: pd.DataFrame, latest: dict[tuple, RunRecord], budget: float) -> pd.DataFrame:
    """Which of equivalent / gain / loss / inconclusive each row's ΔAUC and speedup support, and where
    its ΔAUC stands against the reader's budget.

    Sign-aware TOST readings of each figure's own 95% interval against its margin (the gate rule's for
    ΔAUC): a speedup is judged on its paired interval, whatever the absolute throughput's flag says.
    `budget_verdict` reads the same ΔAUC interval against the one budget (`budget`, the largest drop
    accepted): the verdict report.md shows. The reference row has no verdicts.
    """
    cols: dict[str, list] = {"auc_verdict": [], "speed_verdict": [], "auc_margin": [], "speed_margin": [],
                             "budget_verdict": [], "auc_budget": []}
    for row in df.itertuples(index=False):
        key = row_key(row)
        rec = latest[key]
        auc_v = speed_v = budget_v = None
        auc_m, speed_m = margins(rec)
        if rec.status == "ok" and not is_reference(key):
            if not row.performance_only:  # untrained weights: no AUC was measured, nothing to judge
                auc_v = practical_verdict(row.auc_delta_lo, row.auc_delta_hi, auc_m)
                budget_v = stats.budget_verdict(row.auc_delta_lo, row.auc_delta_hi, budget)
            if unreadable(row.speedup, row.speedup_lo, row.speedup_hi):  # an interval too wide to read supports no verdict
                speed_v = too_short(row.latency_calls)
            elif not (row.performance_only and math.isnan(row.speedup)):  # an unpaired performance-only job has no reference
                speed_v = practical_verdict(row.speedup_lo, row.speedup_hi, speed_m, null=1.0, ratio=True)
            if isinstance(row.kernel_degraded, str):  # measured on a fallback kernel: says nothing of the backend
                speed_v = "inconclusive"
        for name, value in zip(cols, (auc_v, speed_v, auc_m, speed_m, budget_v, budget)):
            cols[name].append(value)
    return df.assign(**cols)


# Fewer paired rounds than one ABBA cycle of the default timing (timing.trials) cannot hold a speedup's direction.
FEW_ROUNDS = 4
UNEXPLAINED = "unexplained"


def disagreement(row: Any, base: Any) -> str | None:
    """Why a row's absolute samples/s against fp32's and its paired speedup point opposite ways (one on
    each side of 1, apart by more than the speed margin), or UNEXPLAINED; None when they agree, or when
    there is nothing to set side by side (no paired speedup, no ok fp32 row)."""
    if base is None or row.speedup_method != "paired" or row.status != "ok" or base.status != "ok":
        return None
    ratio = row.throughput / base.throughput if base.throughput and base.throughput > 0 else math.nan
    if not (math.isfinite(ratio) and math.isfinite(row.speedup) and row.speedup > 0):
        return None
    if (ratio - 1) * (row.speedup - 1) >= 0 or abs(math.log(ratio / row.speedup)) <= math.log1p(row.speed_margin):
        return None
    reasons = []
    if isinstance(row.timing_setting, str) and isinstance(base.timing_setting, str) and row.timing_setting != base.timing_setting:
        reasons.append(f"the two jobs were timed in different modes ({row.timing_setting} against fp32's {base.timing_setting})")
    if math.isfinite(row.speedup_rounds) and row.speedup_rounds < FEW_ROUNDS:
        reasons.append(f"only {int(row.speedup_rounds)} paired round{'s' if row.speedup_rounds != 1 else ''} (fewer than {FEW_ROUNDS})")
    return "; ".join(reasons) or UNEXPLAINED


def _disagreement_column(df: pd.DataFrame) -> pd.DataFrame:
    rows = list(df.itertuples(index=False))
    base = {row_key(r): r for r in rows if is_reference(row_key(r))}
    return df.assign(speed_disagreement=[disagreement(r, base.get(reference_key(row_key(r)))) for r in rows])


def results_table(records: Iterable[RunRecord | dict[str, Any]], alpha: float = 0.05,
                  budget: float = MAX_AUC_DROP) -> pd.DataFrame:
    """One row per row key (`bench.results.key`), the newest record winning.

    Rows are sorted by workload, device, backend (fp32 first, then fp32_tbe, then by name), any further
    axis, and batch size. Missing metrics are NaN; `error` holds the reason of error and skipped rows.
    `alpha` sets the speedup interval's level (`compare.alpha`); `budget` is the reader's accuracy
    budget (`compare.max_auc_drop`) that `budget_verdict` reads each ΔAUC against.
    """
    latest = latest_records(records)
    if not latest:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.DataFrame([_row(r, k) for k, r in latest.items()])
    df = _relative_columns(df, latest, alpha)
    df = _verdict_columns(df, latest, budget)
    df = _disagreement_column(df)
    keys = [sort_key(row_key(r)) for r in df.to_dict("records")]
    order = sorted(range(len(df)), key=keys.__getitem__)
    df = df.iloc[order].reset_index(drop=True)[COLUMNS]
    for a in AXES:  # an integer axis some rows lack (a further axis) stays whole numbers, the gaps None
        if a.kind is int:
            df[a.name] = df[a.name].astype("int64") if df[a.name].notna().all() else [None if v is None or v != v else int(v) for v in df[a.name]]
    return df
