"""A served batch's time, the candidate's beside fp32's: `paired_served_times(...) -> ServedTimes`.

A paired offline job times the prepared module on batches built before its clock starts, in the backend's own
input form (`Backend.timed_inputs`: a toolkit runtime's feeds, a compiled twin's id matrices). A served batch pays
more, in the function the SUT's workers call (bench.serve.sut.predict): gathering its samples' rows from the query
set into a new batch (dense rows, ids and a new KJT), converting it to the runtime's input form inside the call,
rows not yet in cache, and the scores' copy out; and that extra is much the same for every backend, so it also
pulls the ratios to fp32 toward 1 (benchmarks/scripts/serve_batch_breakdown.py times it stage by stage). So
stage 3 of a recommend times `predict` itself on packed batches of the real query set, the way the batcher packs
them under load (random samples up to the batcher's rows), the candidate and fp32 on the same samples one after
the other, the order alternating batch by batch so that the host's speed phases hit both alike.

The alternation (C R, R C, C R, ...) puts every other batch of each right after its own previous one, first on its
samples, as a server serves it; the others run right after the other module, second on the same samples. Each
module's time is the median of its own-order batches, and the other-order medians check the instrument: a runtime
whose threads keep spinning after a call (ONNX Runtime's default) slowed the fp32 batch right after it 2x on a
2-core host, which would have read as a 2x faster candidate (`ServedTimes.residue`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn

from bench import registry
from bench.backends.backend import Backend
from bench.batch import Batch
from bench.config.compose import compose
from bench.pipeline.shared import SharedWork
from bench.serve.queries import QuerySet
from bench.serve.sut import predict

BATCHES = 16  # packed batches timed per batcher size (after one untimed): 8 in each order


@dataclass(frozen=True)
class ServedTimes:
    """At one batcher size: the median pairs of its packed batches, and the median ms `predict` took on them, the
    candidate's and fp32's, each timed right after its own previous batch (`ms`, `fp32_ms`) and right after the
    other's on the same samples (`ms_after_other`, `fp32_ms_after_other`)."""

    pairs: float
    ms: float
    fp32_ms: float
    ms_after_other: float
    fp32_ms_after_other: float

    def residue(self) -> float:
        """How much slower a module ran right after the other than after itself, the worse of the two (1 for none):
        what one module's leftover work (spinning threads, evicted caches) costs the next."""
        return max(self.ms_after_other / self.ms, self.fp32_ms_after_other / self.fp32_ms)

    def as_metrics(self) -> dict[str, Any]:
        return {"pairs": round(self.pairs, 1), "ms": round(self.ms, 4), "fp32_ms": round(self.fp32_ms, 4),
                "ms_after_other": round(self.ms_after_other, 4), "fp32_ms_after_other": round(self.fp32_ms_after_other, 4)}


def packed(queries: QuerySet, max_rows: int, rng: np.random.Generator) -> list[int]:
    """Random samples in draw order up to max_rows rows (at least one), as the batcher packs them under load."""
    out, rows = [], 0
    while True:
        i = int(rng.integers(len(queries)))
        if out and rows + int(queries.sizes[i]) > max_rows:
            return out
        out.append(i)
        rows += int(queries.sizes[i])


def paired_served_times(candidate: nn.Module, reference: nn.Module, queries: QuerySet, device: torch.device,
                        max_rows: int, batches: int = BATCHES, seed: int = 0,
                        clock: Callable[[], float] = time.perf_counter) -> ServedTimes:
    """`predict` on `batches` packed batches at `max_rows` (after one untimed), the candidate and `reference` on the
    same samples, first one then the other in turn. With `reference` the candidate itself, each batch runs twice."""
    rng = np.random.default_rng(seed)
    pairs: list[int] = []
    own: dict[str, list[float]] = {"candidate": [], "fp32": []}  # right after its own previous batch
    other: dict[str, list[float]] = {"candidate": [], "fp32": []}  # right after the other's, on the same samples

    def timed(module: nn.Module, indices: list[int]) -> float:
        start = clock()
        predict(module, queries, indices, device, max_rows)
        return (clock() - start) * 1000

    modules = {"candidate": candidate, "fp32": reference}
    for k in range(batches + 1):
        indices = packed(queries, max_rows, rng)
        first, second = ("candidate", "fp32") if k % 2 == 0 else ("fp32", "candidate")
        a = timed(modules[first], indices)
        b = timed(modules[second], indices)
        if k:  # the first batch warms both up
            pairs.append(int(queries.sizes[indices].sum()))
            own[first].append(a)  # the batch before it (k - 1) ended with this same module
            other[second].append(b)
    return ServedTimes(float(np.median(pairs)), float(np.median(own["candidate"])), float(np.median(own["fp32"])),
                       float(np.median(other["candidate"])), float(np.median(other["fp32"])))


def unknown_backend(names: list[str]) -> Optional[str]:
    """The benchmark scripts' check of their `--backends`, which takes every word after it (so an override given
    after it lands there): the message for the first name that is no backend, or None."""
    bad = next((name for name in names if name not in registry.names("backend")), None)
    return None if bad is None else f"unknown backend {bad!r}: name backends after --backends and overrides (key=value) before it"


@dataclass
class ServingBench:
    """What the benchmark scripts time served batches on: each backend and its prepared module (on the CPU), the
    query set a serving job cuts and the eval split's batches."""

    backends: dict[str, Backend]
    modules: dict[str, nn.Module]
    queries: QuerySet
    eval_batches: list[Batch]


def serving_bench(names: list[str], batch_size: int, overrides: list[str], threads: Optional[int] = None) -> ServingBench:
    """`names`' modules prepared as a serving job of `overrides` at `batch_size` (and `threads`) would prepare them."""
    work, device = SharedWork(), torch.device("cpu")
    backends, modules, queries, batches = {}, {}, None, []
    for name in names:
        cfg = compose([f"backend={name}", "+sweep=serve", f"batch_size={batch_size}",
                       *([f"threads={threads}"] if threads else []), *overrides])
        workload = work.workload(cfg)
        backends[name] = registry.get("backend", name).factory(cfg.backend)
        modules[name] = work.prepared(cfg, backends[name], work.model(cfg, workload), workload, device)
        if queries is None:
            batches = work.split_batches(cfg, workload, "eval")
            queries = QuerySet.from_eval(batches, cfg.serve, cfg.seed, workload.sequences)
    return ServingBench(backends, modules, queries, batches)
