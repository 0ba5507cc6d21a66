"""`results_table`: one row per (workload, device, backend, batch_size), the newest record winning.

The gate and every report view read this DataFrame. Speedup and compression are relative to the
`fp32` row of the same workload and device (speedup also at the same batch size); the speedup
interval is a bootstrap over both runs' per-trial throughputs (`ratio_interval`).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Iterable

import pandas as pd

from bench.record import RunRecord
from bench.report.machine import EXTRA_COLUMNS, row_extras
from bench.stats import ratio_interval

KEY = ["workload", "device", "backend", "batch_size"]
BASELINE = "fp32"
# Backends whose order in tables is fixed; the others follow alphabetically.
LEADING_BACKENDS = ("fp32", "fp32_tbe")

COLUMNS = [
    *KEY,
    "status",
    "auc",
    "auc_delta",
    "auc_delta_lo",
    "auc_delta_hi",
    "auc_delta_p",
    "auc_fp32",
    "oracle_auc",
    "fidelity_gap",
    "n_eval",
    "logloss",
    "ne",
    "throughput",
    "speedup",
    "speedup_lo",
    "speedup_hi",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "embedding_bytes",
    "model_bytes",
    "compression",
    "peak_rss_bytes",
    "cuda_peak_bytes",
    "threads",
    "error",
    "config_hash",
    "fingerprint",
    "git_sha",
    "created_at",
    "fp32_embedding_bytes",
    *EXTRA_COLUMNS,  # where each job stood against the machine (bench.report.machine)
]

_METRICS = ["auc", "auc_delta", "auc_delta_lo", "auc_delta_hi", "auc_delta_p", "auc_fp32", "oracle_auc",
            "fidelity_gap", "n_eval", "logloss", "ne", "throughput", "embedding_bytes", "model_bytes",
            "peak_rss_bytes", "cuda_peak_bytes", "threads"]  # fmt: skip


def as_records(records: Iterable[RunRecord | dict[str, Any]]) -> list[RunRecord]:
    return [r if isinstance(r, RunRecord) else RunRecord.from_dict(r) for r in records]


def _created(record: RunRecord) -> datetime:
    try:
        return datetime.fromisoformat(record.created_at)
    except (TypeError, ValueError):
        return datetime.min


def key_of(record: RunRecord) -> tuple[str, str, str, int]:
    return (record.workload, record.device, record.backend, int(record.batch_size))


def latest_records(records: Iterable[RunRecord | dict[str, Any]]) -> dict[tuple, RunRecord]:
    """Newest record per (workload, device, backend, batch_size); on equal times the later one."""
    latest: dict[tuple, RunRecord] = {}
    for r in as_records(records):
        k = key_of(r)
        if k not in latest or _created(r) >= _created(latest[k]):
            latest[k] = r
    return latest


def backend_rank(backend: str) -> tuple[int, str]:
    if backend in LEADING_BACKENDS:
        return (LEADING_BACKENDS.index(backend), "")
    return (len(LEADING_BACKENDS), backend)


def trials(record: RunRecord | None) -> list[float]:
    """Per-trial throughputs of an ok record, or [] when there are none."""
    if record is None or record.status != "ok":
        return []
    values = (float(v) for v in record.metrics.get("throughput_trials") or [] if v is not None)
    return [v for v in values if math.isfinite(v) and v > 0]


def _num(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _row(r: RunRecord) -> dict[str, Any]:
    m = r.metrics or {}
    lat = m.get("latency_ms") or {}
    row: dict[str, Any] = {
        "workload": r.workload,
        "device": r.device,
        "backend": r.backend,
        "batch_size": int(r.batch_size),
        "status": r.status,
        "error": r.error,
        "config_hash": r.config_hash,
        "fingerprint": (r.env or {}).get("fingerprint"),
        "git_sha": (r.env or {}).get("git_sha"),
        "created_at": r.created_at,
    }
    row.update({name: _num(m.get(name)) for name in _METRICS})
    for q in ("p50", "p90", "p99"):
        row[f"latency_{q}_ms"] = _num(lat.get(q))
    row.update(row_extras(r))
    return row


def speedup(new: RunRecord, base: RunRecord) -> tuple[float, float, float]:
    """throughput(new) / throughput(base) with the trials' bootstrap interval (NaN when absent)."""
    point = _num(new.metrics.get("throughput")) / _num(base.metrics.get("throughput"))
    t_new, t_base = trials(new), trials(base)
    if not (t_new and t_base):
        return point, math.nan, math.nan
    _, lo, hi = ratio_interval(t_new, t_base)
    return point, lo, hi


def _relative_columns(df: pd.DataFrame, latest: dict[tuple, RunRecord]) -> pd.DataFrame:
    speed = {"speedup": [], "speedup_lo": [], "speedup_hi": []}
    compression, fp32_table_bytes = [], []
    fp32_bytes = {}
    for r in latest.values():  # embedding bytes do not depend on the batch size
        if r.backend == BASELINE and r.status == "ok" and r.metrics.get("embedding_bytes"):
            fp32_bytes.setdefault((r.workload, r.device), float(r.metrics["embedding_bytes"]))
    for row in df.itertuples(index=False):
        rec = latest[(row.workload, row.device, row.backend, row.batch_size)]
        base = latest.get((row.workload, row.device, BASELINE, row.batch_size))
        s = (math.nan, math.nan, math.nan)
        if rec.status == "ok" and base is not None and base.status == "ok":
            s = (1.0, 1.0, 1.0) if base is rec else speedup(rec, base)
        for name, value in zip(speed, s):
            speed[name].append(value)
        fb = fp32_bytes.get((row.workload, row.device), math.nan)
        compression.append(fb / row.embedding_bytes if row.embedding_bytes and row.embedding_bytes > 0 else math.nan)
        fp32_table_bytes.append(fb)
    return df.assign(**speed, compression=compression, fp32_embedding_bytes=fp32_table_bytes)


def results_table(records: Iterable[RunRecord | dict[str, Any]]) -> pd.DataFrame:
    """One row per (workload, device, backend, batch_size), the newest record winning.

    Rows are sorted by workload, device, backend (fp32 first, then fp32_tbe, then by name) and
    batch size. Missing metrics are NaN; `error` holds the reason of error and skipped rows.
    """
    latest = latest_records(records)
    if not latest:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.DataFrame([_row(r) for r in latest.values()])
    df = _relative_columns(df, latest)
    df["_rank"] = df["backend"].map(backend_rank)
    df = df.sort_values(["workload", "device", "_rank", "batch_size"], kind="mergesort").drop(columns="_rank")
    df = df.reset_index(drop=True)[COLUMNS]
    return df.astype({"batch_size": "int64"})
