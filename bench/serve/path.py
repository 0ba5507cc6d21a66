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
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from bench.serve.queries import QuerySet
from bench.serve.sut import predict

BATCHES = 12  # packed batches timed per batcher size (after one untimed)


@dataclass(frozen=True)
class ServedTimes:
    """At one batcher size: the median pairs of its packed batches, and the median ms `predict` took on them, the
    candidate's and fp32's."""

    pairs: float
    ms: float
    fp32_ms: float

    def as_metrics(self) -> dict[str, Any]:
        return {"pairs": round(self.pairs, 1), "ms": round(self.ms, 4), "fp32_ms": round(self.fp32_ms, 4)}


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
    pairs, ms, fp32_ms = [], [], []

    def timed(module: nn.Module, indices: list[int]) -> float:
        start = clock()
        predict(module, queries, indices, device, max_rows)
        return (clock() - start) * 1000

    for k in range(batches + 1):
        indices = packed(queries, max_rows, rng)
        if k % 2:
            b, a = timed(reference, indices), timed(candidate, indices)
        else:
            a, b = timed(candidate, indices), timed(reference, indices)
        if k:  # the first batch warms both up
            pairs.append(int(queries.sizes[indices].sum()))
            ms.append(a)
            fp32_ms.append(b)
    return ServedTimes(float(np.median(pairs)), float(np.median(ms)), float(np.median(fp32_ms)))
