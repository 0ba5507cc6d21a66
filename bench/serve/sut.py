"""The system under test: a dynamic batcher feeding worker threads that run the prepared backend.

LoadGen hands samples to `issue` (one per query in the Server scenario, every sample of the one
query in Offline) and waits for `QuerySamplesComplete`. The batcher holds them until a worker is free;
the worker takes the waiting samples in arrival order, up to `max_rows` rows, once the oldest has
waited `max_wait_s` or that many rows are there. A sample larger than `max_rows` runs alone, in model
calls of `max_rows` rows. Each response is the sample's [prediction, label] float32 pairs, the layout
MLPerf's DLRM accuracy script reads. A worker that fails answers its samples with no data, so LoadGen
is never left waiting, and `stop()` raises the failure.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import mlperf_loadgen as lg
import numpy as np
import torch
from torch import nn

from bench.batch import take_rows
from bench.serve.queries import QuerySet


@dataclass
class BatchStats:
    batches: int = 0
    samples: int = 0
    rows: int = 0

    def as_metrics(self) -> dict[str, Any]:
        return {"batches": self.batches, "samples_per_batch": self.samples / self.batches if self.batches else None,
                "rows_per_batch": self.rows / self.batches if self.batches else None}


@dataclass
class DynamicBatcher:
    sizes: np.ndarray  # rows (pairs) of each sample, by sample index
    max_rows: int
    max_wait_s: float
    stats: BatchStats = field(default_factory=BatchStats)
    _pending: deque = field(default_factory=deque)  # (sample, arrival time), oldest first
    _pending_rows: int = 0
    _closed: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def put(self, samples: list) -> None:
        now = time.perf_counter()
        with self._cond:
            for s in samples:
                self._pending.append((s, now))
                self._pending_rows += int(self.sizes[s.index])
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def take(self) -> list | None:
        """The next batch of samples (blocks until one is due), or None once closed and drained."""
        with self._cond:
            while True:
                if self._pending:
                    wait = self._pending[0][1] + self.max_wait_s - time.perf_counter()
                    if self._pending_rows >= self.max_rows or wait <= 0 or self._closed:
                        return self._pop()
                    self._cond.wait(wait)
                elif self._closed:
                    return None
                else:
                    self._cond.wait()

    def _pop(self) -> list:
        taken, rows = [], 0
        while self._pending:
            size = int(self.sizes[self._pending[0][0].index])
            if taken and rows + size > self.max_rows:
                break
            taken.append(self._pending.popleft()[0])
            rows += size
        self._pending_rows -= rows
        self.stats.batches += 1
        self.stats.samples += len(taken)
        self.stats.rows += rows
        return taken


def predict(module: nn.Module, queries: QuerySet, indices: list[int], device: torch.device, max_rows: int) -> np.ndarray:
    """[rows, 2] float32: each row's predicted click probability and its label, samples in order."""
    batch = queries.inputs(indices)
    scores = []
    with torch.inference_mode():
        for lo in range(0, len(batch), max_rows):
            part = batch if len(batch) <= max_rows else take_rows(batch, torch.arange(lo, min(lo + max_rows, len(batch))))
            logits = module(*part.to(device).model_inputs()).reshape(-1).float()
            scores.append(torch.sigmoid(logits).cpu())
    probs = torch.cat(scores) if len(scores) > 1 else scores[0]
    if probs.numel() != len(batch):
        raise RuntimeError(f"model returned {probs.numel()} scores for {len(batch)} rows")
    return np.ascontiguousarray(np.stack([probs.numpy(), batch.labels.numpy().astype(np.float32)], axis=1))


class ServingSystem:
    """The SUT LoadGen drives: `issue` and `flush` are its callbacks; `start`/`stop` run the workers."""

    def __init__(self, module: nn.Module, queries: QuerySet, device: torch.device, max_rows: int, max_wait_s: float,
                 workers: int) -> None:
        self.module, self.queries, self.device, self.max_rows = module, queries, device, max_rows
        self.batcher = DynamicBatcher(queries.sizes, max_rows, max_wait_s)
        self.n_workers = workers
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def issue(self, query_samples) -> None:
        self.batcher.put(list(query_samples))

    def flush(self) -> None:
        pass  # the batcher's wait bound already flushes a partial batch

    def start(self) -> None:
        self.batcher = DynamicBatcher(self.queries.sizes, self.max_rows, self.batcher.max_wait_s)
        self.threads = [threading.Thread(target=self._work, name=f"serve-worker-{i}", daemon=True) for i in range(self.n_workers)]
        for t in self.threads:
            t.start()

    def stop(self) -> dict[str, Any]:
        """Drain and join the workers; their batch statistics, or the first failure raised."""
        self.batcher.close()
        for t in self.threads:
            t.join()
        if self.errors:
            raise self.errors[0]
        return self.batcher.stats.as_metrics()

    def _work(self) -> None:
        while (taken := self.batcher.take()) is not None:
            try:
                out = predict(self.module, self.queries, [s.index for s in taken], self.device, self.max_rows)
            except BaseException as exc:  # noqa: BLE001 - answered below, raised by stop()
                self.errors.append(exc)
                lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in taken])
                continue
            self._respond(taken, out)

    def _respond(self, taken: list, out: np.ndarray) -> None:
        # Each response points into `out`, which stays alive until LoadGen has copied what it logs.
        base, row_bytes, responses, row = out.ctypes.data, out.strides[0], [], 0
        for s in taken:
            n = int(self.queries.sizes[s.index])
            responses.append(lg.QuerySampleResponse(s.id, base + row * row_bytes, n * row_bytes))
            row += n
        lg.QuerySamplesComplete(responses)
