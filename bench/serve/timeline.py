"""The SUT's own clock on every query of a run: when LoadGen issued it, when its batch started and ended.

LoadGen's latency of a query runs from its issue to `QuerySamplesComplete`; the SUT sees the same span
split in two: the wait (issue to the start of the model call that serves it) and the service (that
call). Each batch also keeps its worker thread's CPU time: a batch whose CPU time falls well short of
its wall time was descheduled (another thread held the core). Written per run beside LoadGen's logs
(`sut_queries.csv`) and read by bench.serve.late to say why queries were late.
"""

from __future__ import annotations

import csv
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FILE = "sut_queries.csv"
COLUMNS = ("issue_s", "start_s", "finish_s", "pairs", "batch", "batch_pairs", "batch_samples", "batch_cpu_ms")


@dataclass
class Timeline:
    """Appended to by the issue callback and the workers; read once the run has ended."""

    rows: list = field(default_factory=list)  # one tuple (COLUMNS, the times absolute) per query
    batches: int = 0
    issue_threads: set = field(default_factory=set)  # native ids of the threads LoadGen issued from
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def batch(self, taken: list, start: float, finish: float, cpu_s: float, pairs: list[int]) -> None:
        """One model call: `taken` as (sample, issue time) pairs, their pairs, and its thread's CPU seconds."""
        with self._lock:
            number, self.batches = self.batches, self.batches + 1
            total = int(sum(pairs))
            for (_, issued), n in zip(taken, pairs):
                self.rows.append((issued, start, finish, int(n), number, total, len(taken), cpu_s * 1000))

    def frame(self) -> dict[str, np.ndarray]:
        """Column name -> array, times in seconds from the first issue, queries in issue order."""
        rows = sorted(self.rows)
        if not rows:
            return {c: np.empty(0) for c in COLUMNS}
        cols = {c: np.asarray([r[i] for r in rows], dtype=float) for i, c in enumerate(COLUMNS)}
        origin = cols["issue_s"][0]
        for c in ("issue_s", "start_s", "finish_s"):
            cols[c] = cols[c] - origin
        for c in ("pairs", "batch", "batch_pairs", "batch_samples"):
            cols[c] = cols[c].astype(np.int64)
        return cols

    def write(self, path: Path) -> None:
        cols = self.frame()
        with open(path, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(COLUMNS)
            for i in range(len(cols["issue_s"])):
                out.writerow([f"{cols[c][i]:.6f}" if c.endswith("_s") or c.endswith("_ms") else int(cols[c][i]) for c in COLUMNS])


def read(path: Path) -> dict[str, np.ndarray]:
    """A written timeline back as column arrays."""
    data = np.genfromtxt(path, delimiter=",", names=True, ndmin=1)
    return {c: np.asarray(data[c]) for c in COLUMNS}
