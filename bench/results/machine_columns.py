"""The results table's columns of where each job stood against the machine, read from the stored records:
the roofline shares, the embedding traffic, build time, page faults per call, what the timed batches
touched, the kernels each backend ran, and whether the row has accuracy at all (untrained models are
performance only). `bench.report.machine` renders them.
"""

from __future__ import annotations

import math
from typing import Any

from bench.metrics import PREPARE_SECONDS
from bench.record import RunRecord

EXTRA_COLUMNS = [
    "performance_only", "embedding_share", "embedding_gbps", "dense_share", PREPARE_SECONDS,
    "page_faults_per_call", "pool_batches", "pool_samples", "unique_ids_per_batch", "rows_touched",
    "working_set_bytes", "llc_bytes", "rss_start_bytes", "embedding_kernel", "gemm_kernel",
]  # fmt: skip


def _num(value: Any) -> float:
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def row_extras(r: RunRecord) -> dict[str, Any]:
    m = r.metrics or {}
    roof = m.get("roofline") or {}
    access = m.get("access") or {}
    pool = m.get("timing_pool") or {}
    kernels = m.get("kernels") or {}
    return {
        "performance_only": str(m.get("accuracy", "")).startswith("performance only"),
        "embedding_share": _num(roof.get("embedding_share")),
        "embedding_gbps": _num(roof.get("embedding_bytes_per_s")) / 1e9,
        "dense_share": _num(roof.get("dense_share")),
        PREPARE_SECONDS: _num(m.get(PREPARE_SECONDS)),
        "page_faults_per_call": _num(m.get("page_faults_per_call")),
        "pool_batches": _num(pool.get("batches")),
        "pool_samples": _num(pool.get("samples")),
        "unique_ids_per_batch": _num(access.get("unique_ids_per_batch_mean")),
        "rows_touched": _num(access.get("rows_touched_fraction_mean")),
        "working_set_bytes": _num(access.get("working_set_bytes")),
        "llc_bytes": _num(access.get("llc_bytes")),
        "rss_start_bytes": _num(m.get("rss_start_bytes")),
        "embedding_kernel": " + ".join(kernels.get("embedding") or []) or None,
        "gemm_kernel": " + ".join(kernels.get("gemm") or []) or None,
    }
