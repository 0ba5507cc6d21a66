"""The system under test: a dynamic batcher feeding worker threads that run the prepared backend.

LoadGen hands samples to `issue` (one per query in the Server scenario, every sample of the one
query in Offline) and waits for `QuerySamplesComplete`. The batcher holds them until a worker is free;
the worker takes the waiting samples in arrival order, up to `max_rows` rows, once the oldest has
waited `max_wait_s` or that many rows are there. A sample larger than `max_rows` runs alone, in model
calls of `max_rows` rows. Each response is the sample's predictions and labels in the layout MLPerf's accuracy
script for the benchmark reads (bench.serve.response: DLRM's [prediction, label] pairs for groups of pairs, DLRMv3's
for a request). A worker that fails answers its samples with no data, so LoadGen
is never left waiting, and `stop()` raises the failure. Every query's issue, batch start and batch end
go into the run's timeline (bench.serve.timeline).

`serve.test_stall_ms` (test-only) sleeps that long inside one model call, the STALL_AT-th of the job's
first run, so a test can plant a single stall in an easy step.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import mlperf_loadgen as lg
import numpy as np
import torch
from torch import nn

from bench.batch import take_rows
from bench.serve.queries import QuerySet
from bench.serve.response import answers
from bench.serve.timeline import Timeline

STALL_AT = 20  # the model call of the job's first run that a planted stall (serve.test_stall_ms) delays


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
    clock: Callable[[], float] = time.perf_counter
    _pending: deque = field(default_factory=deque)  # (sample, arrival time), oldest first
    _pending_rows: int = 0
    _closed: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def put(self, samples: list) -> None:
        now = self.clock()
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
        taken = self.take_timed()
        return None if taken is None else [s for s, _ in taken]

    def take_timed(self) -> list | None:
        """`take`, each sample with the time it was put."""
        with self._cond:
            while True:
                if self._pending:
                    wait = self._pending[0][1] + self.max_wait_s - self.clock()
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
            taken.append(self._pending.popleft())
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
                 workers: int, stall_s: float | None = None) -> None:
        self.module, self.queries, self.device, self.max_rows = module, queries, device, max_rows
        self.batcher = DynamicBatcher(queries.sizes, max_rows, max_wait_s)
        self.n_workers = workers
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.timeline = Timeline()
        self.stall_s = stall_s  # test-only: one planted sleep in the job, then None
        self.worker_threads: list[int] = []  # torch intra-op threads each worker saw

    def issue(self, query_samples) -> None:
        self.timeline.issue_threads.add(threading.get_native_id())
        self.batcher.put(list(query_samples))

    def flush(self) -> None:
        pass  # the batcher's wait bound already flushes a partial batch

    def start(self) -> None:
        self.batcher = DynamicBatcher(self.queries.sizes, self.max_rows, self.batcher.max_wait_s)
        self.timeline, self.worker_threads = Timeline(), []
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

    def threads_used(self) -> dict[str, Any]:
        """Who ran on which threads in the last run, and the cores this process may use."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        torch_threads = max(self.worker_threads, default=torch.get_num_threads())
        issue = len(self.timeline.issue_threads)
        busy = self.n_workers * torch_threads + issue
        return {"workers": self.n_workers, "torch_threads_per_worker": torch_threads, "loadgen_issue_threads": issue,
                "cores": cores, "share_a_core": busy > (cores or 1)}

    def _work(self) -> None:
        self.worker_threads.append(torch.get_num_threads())
        while (taken := self.batcher.take_timed()) is not None:
            samples = [s for s, _ in taken]
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                out = predict(self.module, self.queries, [s.index for s in samples], self.device, self.max_rows)
                self._planted_stall()
            except BaseException as exc:  # noqa: BLE001 - answered below, raised by stop()
                self.errors.append(exc)
                lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])
                continue
            self.timeline.batch(taken, start, time.perf_counter(), time.thread_time() - cpu,
                                [int(self.queries.sizes[s.index]) for s in samples])
            self._respond(samples, out)

    def _planted_stall(self) -> None:
        if self.stall_s is not None and self.timeline.batches == STALL_AT:
            seconds, self.stall_s = self.stall_s, None
            time.sleep(seconds)

    def _respond(self, taken: list, out: np.ndarray) -> None:
        # Each response points into `buffer`, which stays alive until LoadGen has copied what it logs.
        buffer, spans = answers(self.queries.layout, out, [s.index for s in taken], self.queries.sizes)
        base = buffer.ctypes.data
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, base + at, size) for s, (at, size) in zip(taken, spans)])
