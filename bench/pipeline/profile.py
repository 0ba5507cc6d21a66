"""Where a job stands against the machine: what its timed batches touched, which operators ran,
and what share of the roofline its embedding traffic and matrix products reached.

Every figure is recorded so a reader can tell a fast backend from a cache-resident working set:
the timing pool (distinct batches and samples, calls timed, passes over the pool), the access
profile (ids per sample, unique ids per batch, rows touched per table, the working set at this
backend's row width against the last-level cache), the embedding and GEMM operators of one call,
and the roofline shares, against the limits of the job's device (the host's on CPU, the GPU's own on CUDA: bench.devices).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench import devices, hardware
from bench.backends.tables import table_precisions, table_storage
from bench.config import Config
from bench.errors import one_line
from bench.measure.working_set import working_set_bytes
from bench.measure.environment import environment
from bench.measure.operators import OperatorLog, families, operators
from bench.devices.roofline import roofline_metrics
from bench.measure.lookups import lookup_timing
from bench.measure.timing import CLOCKS, Timing
from bench.pipeline.shared import SharedWork
from bench.workloads.workload import Workload


def job_profile(cfg: Config, prepared: nn.Module, inputs: list[tuple], workload: Workload, timing: Timing,
                device: torch.device, shared: SharedWork) -> dict[str, Any]:
    access = shared.timing_access(cfg, workload, device)
    storage = table_storage(prepared)
    row_bytes = {name: int(info["row_bytes"]) for name, info in storage.items()}
    calls = sum(len(trial) for trial in timing.latency_ms)
    try:
        ops, why_not = operators(prepared, inputs[0]), {}
    except Exception as exc:  # noqa: BLE001 - the operator log is extra: a module that cannot run under a
        # dispatch mode (AMD Quark's fake-quant kernel is a torch.compile(fullgraph=True) function) keeps its job
        ops, why_not = OperatorLog(), {"kernels_error": f"the operators of one call could not be recorded: {one_line(exc)}"}
    metrics: dict[str, Any] = {
        **why_not,
        "timing_pool": {
            "batches": access["pool_batches"],
            "samples": access["pool_samples"],
            "calls_timed": calls,
            "passes": calls / access["pool_batches"],  # how often the timed calls went round the pool
        },
        "access": {
            **{k: v for k, v in access.items() if k not in ("pool_batches", "pool_samples")},
            "working_set_bytes": working_set_bytes(access, row_bytes),
            "llc_bytes": hardware.llc_bytes(),
        },
        **ops.as_metrics(cfg.batch_size),
        # which kernel families the call ran, so a degraded one (env.kernel_health) is tied to this job
        "kernel_families": families(ops, {info["dtype"] for info in storage.values()}),
        # each table's stored type, pooled (EmbeddingBagCollection) or sequence (EmbeddingCollection)
        "table_precisions": table_precisions(prepared),
    }
    if device.type == "cpu" and row_bytes:  # the lookups alone, per id and per distinct row (bench.measure.lookups); host-clocked, so the CPU's only
        try:
            lookups_alone = lookup_timing(prepared, inputs, CLOCKS.get(cfg.timing.clock, CLOCKS["wall"]))
        except Exception as exc:  # noqa: BLE001 - extra, as the operator log: a collection that cannot be called alone keeps its job
            lookups_alone = {"error": f"the lookups could not be timed alone: {one_line(exc)}"}
        if lookups_alone:
            metrics["lookups"] = lookups_alone
    if row_bytes:
        limits = devices.get(cfg.device).limits(cfg.cache_dir, environment(device)["fingerprint"], device).ensure(row_bytes.values())
        lookups = {name: p["lookups_per_sample"] for name, p in access["tables"].items() if name in row_bytes}
        args = (timing.throughput, lookups, row_bytes, metrics["dense_flops_per_sample"], metrics["dense_int8_fraction"])
        half = metrics.get("dense_half_fraction", 0.0)
        metrics["roofline"] = roofline_metrics(*args, limits, half)
        if metrics["roofline"]["dense_share"] > 1:  # the cached GEMM limit was measured on a busy machine
            metrics["roofline"] = roofline_metrics(*args, limits.raise_gemm(), half)
    return metrics

