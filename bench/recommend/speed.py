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
cache, and its scores are copied out. On this model that extra (1-2 ms per 1000 pairs) is as large as a fast
backend's whole offline call, and much the same for every backend: the offline times alone put the estimates 2-6x
above LoadGen's and their ratios to fp32 up to 2.4x too high. So the batch times the simulation runs on are the
serving function's own (bench.serve.path): at each timed size, packed batches of the query set through the SUT's
`predict`, the candidate's and fp32's on the same samples in turn; the offline jobs' speedup intervals give the
interval (the candidate's times scaled by the speedup over its low and high ends). Where the serving path cannot
be timed, the offline times stand, and the answer says so.

The estimate leaves out the spread of the batch times and LoadGen's own overhead: it ranks the candidates for
stage 4, which measures the few best under LoadGen. Each estimate also keeps the p99 at no load (each query alone,
after the batcher's wait) at the interval's fast end: where no candidate meets the bound at any rate, the funnel
stops before LoadGen and names the one whose no-load p99 comes closest (bench.recommend.decide.nearest_miss).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from bench.metrics import SPEEDUP, THROUGHPUT, hi, lo
from bench.record import RunRecord
from bench.recommend.decide import Estimate
from bench.recommend.ranges import QUERY_ROWS, timed_sizes  # noqa: F401 - where stage 3's callers find them
from bench.serve.path import ServedTimes
from bench.serve.queue import ServiceModel, max_rate, simulate_p99

QUERIES = 4000  # simulated queries per trial rate: the estimate ranks candidates, stage 4 measures them


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


def service_line(times: dict[float, float]) -> ServiceModel:
    """The line through batch times {pairs: ms} the simulated worker serves by."""
    rows = np.asarray(sorted(times), dtype=float)
    return ServiceModel.fit(rows, np.asarray([times[r] for r in sorted(times)]), with_spread=False)


def queue_qps(times: dict[float, float], sizes: np.ndarray, max_rows: int, max_wait_s: float, bound_ms: float) -> float:
    """The simulated batcher's highest Poisson rate within the bound, for batch times {pairs: ms}."""
    return max_rate(sizes, service_line(times), max_rows, max_wait_s, bound_ms, queries=QUERIES)


def served_times(points: dict[int, tuple[float, float, float, float]], served: dict[int, ServedTimes],
                 at: int) -> dict[float, float]:
    """{pairs: ms} of served batches at the timed sizes: fp32's (`at` 0), the candidate's (1), or the candidate's
    scaled to the low (2) or high (3) end of the offline speedup at that size."""
    out = {}
    for r, t in served.items():
        if at == 0:
            out[t.pairs] = t.fp32_ms
        else:
            p = points.get(r)
            out[t.pairs] = t.ms * (p[1] / p[at] if p is not None and p[at] > 0 else 1.0)
    return out


def estimate(points: dict[int, tuple[float, float, float, float]], sizes: np.ndarray, max_rows: int, max_wait_s: float,
             bound_ms: float, served: Optional[dict[int, ServedTimes]] = None) -> Optional[Estimate]:
    """Stage 3's estimate for a batcher of `max_rows` from the timed sizes up to it (the batcher forms no larger): the
    served times where given (bench.serve.path), the offline points' batch times otherwise."""
    used = {r: p for r, p in points.items() if r <= max_rows}
    on_path = {r: t for r, t in (served or {}).items() if r <= max_rows}
    if not used and not on_path:
        return None
    if on_path:
        times = {name: served_times(used, on_path, i) for name, i in (("fp32", 0), ("point", 1), ("lo", 2), ("hi", 3))}
    else:
        times = {"fp32": {r: p[0] for r, p in used.items()},
                 **{name: {r: p[0] / p[i] for r, p in used.items()} for name, i in (("point", 1), ("lo", 2), ("hi", 3))}}
    q = {name: queue_qps(t, sizes, max_rows, max_wait_s, bound_ms) for name, t in times.items()}
    # each is its own simulated search, whose resolution can put an end a hair past the point: the interval holds it
    q["lo"], q["hi"] = min(q["lo"], q["point"]), max(q["hi"], q["point"])
    fp32 = q["fp32"]
    rel = (lambda x: x / fp32) if fp32 > 0 else (lambda x: float("nan"))
    return Estimate(q["point"], q["lo"], q["hi"], rel(q["point"]), rel(q["lo"]), rel(q["hi"]), fp32,
                    {int(r): [round(v, 4) for v in p] for r, p in used.items()},
                    {int(r): t.as_metrics() for r, t in on_path.items()},
                    idle_p99_ms(times["hi"], sizes, max_rows, max_wait_s))


def idle_p99_ms(times: dict[float, float], sizes: np.ndarray, max_rows: int, max_wait_s: float) -> float:
    """The simulated p99 latency (ms) at no load, each query served alone after the batcher's wait: the lowest bound any
    rate can meet by these batch times (the fast end of the interval, `times`)."""
    model = service_line(times)
    longest_s = max_wait_s + (model.intercept_ms + model.slope_ms * float(np.max(sizes))) / 1000
    return simulate_p99(1e-3 / max(longest_s, 1e-6), sizes, model, max_rows, max_wait_s, queries=QUERIES)  # 1000 services apart
