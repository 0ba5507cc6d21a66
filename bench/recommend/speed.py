"""Stage 3: paired offline speed at the batch sizes the batcher forms, turned into a queue estimate of the max
QPS under the bound (bench.serve.queue).

Each backend is timed by its paired offline job (fp32 and the backend alternate in one process) at a query's
typical rows (`QUERY_ROWS`) and at each batcher size. A job gives fp32's batch time at that size (its
reference throughput) and the backend's speedup with its interval. The backend's batch time is fp32's divided
by the speedup; a line through those times (bench.serve.queue.ServiceModel) feeds the simulated batcher and
worker on Poisson arrivals of the query set's sizes, whose highest rate within the p99 bound is the estimate.
The interval comes from the speedup's: the times divided by its low and high ends. Relative to fp32 (the same
simulation on fp32's own times from the same jobs) the host's speed cancels, as it does in the speedup.

A served batch costs more than the offline call: the SUT gathers its samples' rows into a new batch, a runtime
converts it to its own input form inside the call (the offline job converts before its clock), its rows are not in
cache, and its scores are copied out. On this model that extra (about 1-1.7 ms per 1000 pairs) is as large as a
fast backend's whole offline call, so leaving it out put the estimates 2-6x above LoadGen's and their ratios to
fp32 up to 2.4x too high. Each backend's extra is measured on the real serving function over packed batches of the
query set (bench.serve.path) and added to its offline times, fp32's own extra to fp32's; the speedup's interval
scales the offline part only.

The estimate leaves out the spread of the batch times and LoadGen's own overhead: it ranks the candidates for
stage 4, which measures the few best under LoadGen.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from bench.metrics import SPEEDUP, THROUGHPUT, hi, lo
from bench.record import RunRecord
from bench.recommend.decide import Estimate
from bench.serve.path import PathCost
from bench.serve.queue import ServiceModel, max_rate

QUERY_ROWS = 256  # about one query's rows (MLPerf DLRM-v2's query sizes average 270 pairs): the smallest batch the batcher forms
QUERIES = 4000  # simulated queries per trial rate: the estimate ranks candidates, stage 4 measures them


def timed_sizes(batch_sizes: list[int]) -> list[int]:
    """The offline batch sizes a backend is timed at: a query's rows, and each batcher size."""
    return sorted({QUERY_ROWS, *batch_sizes})


def point(record: RunRecord) -> Optional[tuple[float, float, float, float]]:
    """(fp32's ms per batch, speedup, its low and high ends) of one offline job; fp32's own job: speedup 1.
    None when the job did not finish or has no throughput."""
    m = record.metrics
    if record.status != "ok" or not m.get(THROUGHPUT):
        return None
    if m.get(SPEEDUP) and m.get("reference_throughput"):
        ms = 1000 * record.batch_size / m["reference_throughput"]
        return ms, m[SPEEDUP], m.get(lo(SPEEDUP)) or m[SPEEDUP], m.get(hi(SPEEDUP)) or m[SPEEDUP]
    return 1000 * record.batch_size / m[THROUGHPUT], 1.0, 1.0, 1.0  # the reference itself, or an unpaired job


def queue_qps(times: dict[int, float], sizes: np.ndarray, max_rows: int, max_wait_s: float, bound_ms: float) -> float:
    """The simulated batcher's highest Poisson rate within the bound, for batch times {rows: ms}."""
    rows = np.asarray(sorted(times), dtype=float)
    model = ServiceModel.fit(rows, np.asarray([times[r] for r in sorted(times)]), with_spread=False)
    return max_rate(sizes, model, max_rows, max_wait_s, bound_ms, queries=QUERIES)


def served_times(points: dict[int, tuple[float, float, float, float]], at: int, path: Optional[PathCost]) -> dict[int, float]:
    """{rows: ms} a served batch takes: the offline time (fp32's ms divided by point `at`'s entry: 0 fp32's own,
    1 the speedup, 2 its low end, 3 its high end) plus the serving path's extra at those rows (none: no extra)."""
    extra = path.ms if path is not None else (lambda rows: 0.0)
    return {r: (p[0] if at == 0 else p[0] / p[at]) + extra(r) for r, p in points.items()}


def estimate(points: dict[int, tuple[float, float, float, float]], sizes: np.ndarray, max_rows: int, max_wait_s: float,
             bound_ms: float, path: Optional[PathCost] = None, fp32_path: Optional[PathCost] = None) -> Optional[Estimate]:
    """Stage 3's estimate for a batcher of `max_rows` from the offline points at sizes up to it (the batcher forms no
    larger), each batch time with its serving path's extra: `path` the candidate's, `fp32_path` fp32's."""
    used = {r: p for r, p in points.items() if r <= max_rows}
    if not used:
        return None
    fp32 = queue_qps(served_times(used, 0, fp32_path), sizes, max_rows, max_wait_s, bound_ms)
    at = {name: queue_qps(served_times(used, i, path), sizes, max_rows, max_wait_s, bound_ms)
          for name, i in (("point", 1), ("lo", 2), ("hi", 3))}
    rel = (lambda q: q / fp32) if fp32 > 0 else (lambda q: float("nan"))
    paths = {name: c.as_metrics() for name, c in (("candidate", path), ("fp32", fp32_path)) if c is not None}
    return Estimate(at["point"], at["lo"], at["hi"], rel(at["point"]), rel(at["lo"]), rel(at["hi"]), fp32,
                    {int(r): [round(v, 4) for v in p] for r, p in used.items()}, paths)
