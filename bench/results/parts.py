"""The parts of jobs recommend's plan runs (`measure`: facts, served), read back from their records.

A `facts` record holds a backend's ΔAUC against fp32 with its interval and its model's bytes (bench.routes.facts);
a `served` record the serving function's batch times at its batcher size beside fp32's (bench.routes.served). They
are records like every job's (the store, resume, `python -m bench.report`), keyed by the results key
(bench.results.key: threads among its axes) and the part measured; they never join the results table, whose rows
are whole jobs. `measured_table` is their table, the newest record winning per key; `facts_of` and
`served_of` read one record's figures as recommend's stages use them.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional

import pandas as pd

from bench.config import FACTS, SERVED
from bench.metrics import AUC_DELTA, AUC_FP32, EMBEDDING_BYTES, GAUC_DELTA, MODEL_BYTES, NE_DELTA, hi, lo
from bench.record import RunRecord, measure_of
from bench.results.key import KEY, in_context, key_of, sort_key
from bench.results.table import as_records, created
from bench.serve.path import ServedTimes

MB = 1e6
COLUMNS = [*KEY, "measure", "status", AUC_DELTA, lo(AUC_DELTA), hi(AUC_DELTA), AUC_FP32, "model_mb", "embedding_mb",
           "served_pairs", "served_ms", "fp32_served_ms", "residue", "error", "config_hash", "created_at", "record_id"]


def why_not(record: RunRecord) -> Optional[str]:
    """Why a part of a job has no figures (its record skipped or errored: the first line of its reason), or None."""
    if record.status == "ok":
        return None
    first = (record.error or "").splitlines()[0] if record.error else "no reason recorded"
    return first if record.status == "skipped" else f"it failed here: {first}"


def facts_of(record: RunRecord) -> dict[str, Any]:
    """A facts record's figures: auc_delta, ne_delta and gauc_delta with their intervals, auc_fp32, model_mb and
    embedding_mb (NaN where absent: a record stored before ΔNE was, a workload not served by request's ΔGAUC)."""
    m = record.metrics if record.status == "ok" else {}

    def num(key: str, scale: float = 1.0) -> float:
        value = m.get(key)
        return math.nan if value is None else float(value) / scale
    return {AUC_DELTA: num(AUC_DELTA), lo(AUC_DELTA): num(lo(AUC_DELTA)), hi(AUC_DELTA): num(hi(AUC_DELTA)),
            NE_DELTA: num(NE_DELTA), lo(NE_DELTA): num(lo(NE_DELTA)), hi(NE_DELTA): num(hi(NE_DELTA)),
            GAUC_DELTA: num(GAUC_DELTA), lo(GAUC_DELTA): num(lo(GAUC_DELTA)), hi(GAUC_DELTA): num(hi(GAUC_DELTA)),
            AUC_FP32: num(AUC_FP32), "model_mb": num(MODEL_BYTES, MB), "embedding_mb": num(EMBEDDING_BYTES, MB)}


def served_of(record: RunRecord) -> Optional[ServedTimes]:
    """A served record's batch times at its batcher size, the backend's beside fp32's; None where it has none."""
    times = (record.metrics or {}).get(SERVED) if record.status == "ok" else None
    return ServedTimes(**times) if times else None


def measured_table(records: Iterable[RunRecord | dict[str, Any]]) -> pd.DataFrame:
    """One row per (results key, part measured), the newest record winning: facts rows with their ΔAUC and MB, served
    rows with their batch times beside fp32's."""
    latest: dict[tuple, RunRecord] = {}
    parts = [r for r in as_records(records) if measure_of(r) in (FACTS, SERVED)]
    for r, k in zip(parts, in_context([(*key_of(r), measure_of(r)) for r in parts], [*KEY, "measure"])):
        if k not in latest or created(r) >= created(latest[k]):
            latest[k] = r
    rows = []
    for k, r in sorted(latest.items(), key=lambda kv: (sort_key(kv[0][:-1]), kv[0][-1])):
        # each axis as the job ran (a served job's threads), whatever its key in the set
        row: dict[str, Any] = {**dict(zip(KEY, key_of(r))), "measure": k[-1], "status": r.status, "error": why_not(r),
                               "config_hash": r.config_hash, "created_at": r.created_at, "record_id": r.record_id}
        if k[-1] == FACTS:
            row.update(facts_of(r))
        times = served_of(r)
        if times is not None:
            row.update(served_pairs=times.pairs, served_ms=times.ms, fp32_served_ms=times.fp32_ms, residue=times.residue())
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=COLUMNS)
