"""What a served batch costs beyond the model call a paired offline job times: `path_cost(...) -> PathCost`.

The offline job times the prepared module on batches built before its clock starts, in the backend's own input
form (`Backend.timed_inputs`: a toolkit runtime's feeds, a compiled twin's id matrices). A served batch pays more,
in the function the SUT's workers call (bench.serve.sut.predict): gathering its samples' rows from the query set
into a new batch (dense rows, ids and a new KJT), converting that batch to the runtime's input form inside the
call, rows that are not in cache yet, and the scores' copy out. So both are timed on the same packed batches of
the real query set, the way the batcher packs them under load (random samples up to the batcher's rows), one
right after the other, and the extra of each batch is the served time less the offline-form call. Its medians by
size, as a line in pairs (intercept + slope x pairs), are the extra a queue estimate adds to the offline batch
times (bench.recommend.speed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from bench.batch import Batch
from bench.serve.queries import QuerySet
from bench.serve.sut import predict

BATCHES = 12  # packed batches timed per batcher size (after one untimed)


@dataclass(frozen=True)
class PathCost:
    """A served batch's extra over the offline-form call: intercept_ms + ms_per_pair x pairs."""

    intercept_ms: float
    ms_per_pair: float

    def ms(self, pairs: float) -> float:
        return self.intercept_ms + self.ms_per_pair * pairs

    def as_metrics(self) -> dict[str, Any]:
        return {"intercept_ms": round(self.intercept_ms, 3), "ms_per_1000_pairs": round(self.ms_per_pair * 1000, 3)}

    @classmethod
    def fit(cls, pairs: np.ndarray, extra_ms: np.ndarray) -> "PathCost":
        """The line through the medians of each batcher size's extras (an extra below 0, from noise, counts as 0)."""
        pairs, extra_ms = np.asarray(pairs, dtype=float), np.maximum(np.asarray(extra_ms, dtype=float), 0.0)
        xs = np.unique(pairs)
        ys = np.asarray([np.median(extra_ms[pairs == x]) for x in xs])
        if len(xs) >= 2:
            slope, intercept = np.polyfit(xs, ys, 1)
        else:
            slope, intercept = float(ys[0] / xs[0]), 0.0
        return cls(max(float(intercept), 0.0), max(float(slope), 0.0))


def packed(queries: QuerySet, max_rows: int, rng: np.random.Generator) -> list[int]:
    """Random samples in draw order up to max_rows rows (at least one), as the batcher packs them under load."""
    out, rows = [], 0
    while True:
        i = int(rng.integers(len(queries)))
        if out and rows + int(queries.sizes[i]) > max_rows:
            return out
        out.append(i)
        rows += int(queries.sizes[i])


def path_times(module: nn.Module, timed_form: Callable[[Batch], tuple], queries: QuerySet, device: torch.device,
               max_rows: int, batches: int = BATCHES, seed: int = 0,
               clock: Callable[[], float] = time.perf_counter) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pairs, served ms, offline-form ms) of `batches` packed batches at `max_rows`: `predict` on the samples, then
    the module on the same rows in the form `timed_form` builds (before its clock) from their batch."""
    rng = np.random.default_rng(seed)
    pairs, served, offline = [], [], []
    for k in range(batches + 1):
        indices = packed(queries, max_rows, rng)
        start = clock()
        predict(module, queries, indices, device, max_rows)
        served_ms = (clock() - start) * 1000
        args = timed_form(queries.inputs(indices).to(device))
        with torch.inference_mode():
            start = clock()
            module(*args)
            offline_ms = (clock() - start) * 1000
        if k:  # the first batch warms both up
            pairs.append(int(queries.sizes[indices].sum()))
            served.append(served_ms)
            offline.append(offline_ms)
    return np.asarray(pairs, dtype=float), np.asarray(served), np.asarray(offline)


def path_cost(module: nn.Module, timed_form: Callable[[Batch], tuple], queries: QuerySet, device: torch.device,
              sizes: list[int], batches: int = BATCHES, clock: Callable[[], float] = time.perf_counter) -> PathCost:
    """The served batch's extra over the offline-form call, fitted over the batcher sizes `sizes`."""
    pairs, extra = [], []
    for size in sizes:
        p, served, offline = path_times(module, timed_form, queries, device, size, batches, clock=clock)
        pairs.append(np.full(len(p), float(np.median(p))))  # one point per size: its batches' pairs vary a little
        extra.append(served - offline)
    return PathCost.fit(np.concatenate(pairs), np.concatenate(extra))
