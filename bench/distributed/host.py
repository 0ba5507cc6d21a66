"""One job at a time per host, whatever launcher started the jobs.

Parallel launchers start several jobs at once (joblib's workers; submitit's local executor starts
every job of a sweep immediately and has no limit), and timings taken while another job trains,
evaluates or times are not worth keeping. Each job therefore holds this host's job lock
(`<cache_dir>/locks/jobs-<hostname>.lock`, flock) while it runs; the others wait their turn. The
ranks of a multi-process job do not take it: the process that launched them holds it, and under
a user's own torchrun the ranks are the one job. `one_job_per_host=false` turns the lock off.

Each ok record keeps the wall-clock window the job ran in (`metrics.job_window`, epoch seconds),
so a sweep can show that no two measurements overlapped (`overlapping`).
"""

from __future__ import annotations

import fcntl
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Iterable, Iterator

from bench.config import Config
from bench.distributed.ranks import rank_env


@dataclass
class Window:
    start: float = 0.0
    end: float = 0.0

    def span(self) -> list[float]:
        return [self.start, self.end]


@contextmanager
def one_job_per_host(cfg: Config) -> Iterator[Window]:
    window = Window()
    if not cfg.one_job_per_host or rank_env() is not None:
        window.start = time.time()
        yield window
        window.end = time.time()
        return
    path = Path(cfg.cache_dir) / "locks" / f"jobs-{socket.gethostname()}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            window.start = time.time()
            yield window
            window.end = time.time()
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def overlapping(records: Iterable) -> list[tuple[str, str]]:
    """Pairs of ok records (by record_id) whose job windows overlap on the same host."""
    spans = []
    for r in records:
        window = (r.metrics or {}).get("job_window") if r.status == "ok" and not r.resumed_from else None
        if window:
            spans.append(((r.env or {}).get("hostname"), float(window[0]), float(window[1]), r.record_id))
    return [(a[3], b[3]) for a, b in combinations(spans, 2) if a[0] == b[0] and a[1] < b[2] and b[1] < a[2]]
