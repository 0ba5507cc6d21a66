"""Why a Server step's queries were late: one cause per query over the bound, from the SUT's timeline.

A query's latency is its wait (issue to the start of its batch) plus its service (its batch's model
call). Each query over the bound gets the first cause that fits:

- stall: its own batch, or a batch that ran while it waited, took far longer than batches of that size
  usually take in the same run (STALL_MIN_MS more than the typical, and either STALL_FACTOR times it
  or its thread descheduled for most of it: CPU time under DESCHEDULED of the wall time): a collector
  pause, a neighbour's burst, a page fault, another thread on the core.
- service time: its batch's call took longer than it waited: a batch too large for the bound.
- queueing: it waited longer than its batch ran: arrivals beyond what the SUT serves.

The typical time of a batch is the median over the run's batches of similar size (a few size bins,
interpolated), so a handful of stalls do not move it. LoadGen counts late queries on its own clock,
which adds its issue and completion overhead; the record keeps both counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

STALL_FACTOR = 3.0  # a batch this many times its size's typical time ...
STALL_MIN_MS = 5.0  # ... and this much more than it, is a stall (a 1 ms batch taking 3 ms is jitter)
DESCHEDULED = 0.5  # ... or a batch slower than typical whose thread ran on a core for less than this share of it
BINS = 8  # size bins for the typical time


def batches(frame: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One entry per batch: its number, start and finish (s), pairs, wall and CPU time (ms)."""
    numbers, first = np.unique(frame["batch"], return_index=True)
    start, finish = frame["start_s"][first], frame["finish_s"][first]
    return {"batch": numbers, "start_s": start, "finish_s": finish, "pairs": frame["batch_pairs"][first].astype(np.int64),
            "ms": (finish - start) * 1000, "cpu_ms": frame["batch_cpu_ms"][first]}


def typical_ms(pairs: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """The median time of batches of about each batch's size (size bins by quantile, interpolated)."""
    if len(pairs) == 0:
        return np.empty(0)
    edges = np.unique(np.quantile(pairs, np.linspace(0, 1, BINS + 1)))
    bins = np.clip(np.searchsorted(edges, pairs, side="right") - 1, 0, max(len(edges) - 2, 0))
    centers, medians = [], []
    for b in np.unique(bins):
        centers.append(float(np.median(pairs[bins == b])))
        medians.append(float(np.median(ms[bins == b])))
    return np.interp(pairs, centers, medians)


def explain(frame: dict[str, np.ndarray], bound_ms: float, loadgen_late: int | None = None) -> dict[str, Any]:
    """The late queries of one run by cause, the stalls they sat behind, and one line that says it."""
    b = batches(frame)
    b["typical_ms"] = typical_ms(b["pairs"], b["ms"])
    slow = (b["ms"] > STALL_FACTOR * b["typical_ms"]) | (b["cpu_ms"] < DESCHEDULED * b["ms"])
    stall = slow & (b["ms"] > b["typical_ms"] + STALL_MIN_MS)
    index = {int(n): i for i, n in enumerate(b["batch"])}
    latency = (frame["finish_s"] - frame["issue_s"]) * 1000
    wait = (frame["start_s"] - frame["issue_s"]) * 1000
    service = (frame["finish_s"] - frame["start_s"]) * 1000
    late = np.flatnonzero(latency > bound_ms)
    labels, behind = [], {}
    stalls = np.flatnonzero(stall)
    for q in late:
        own = index[int(frame["batch"][q])]
        if stall[own]:
            culprit = own
        else:  # the longest stall that ran while this query waited
            during = [i for i in stalls if b["start_s"][i] < frame["start_s"][q] and b["finish_s"][i] > frame["issue_s"][q]]
            culprit = max(during, key=lambda i: b["ms"][i], default=None)
        if culprit is not None:
            behind[culprit] = behind.get(culprit, 0) + 1
        labels.append("stall" if culprit is not None else "service" if service[q] >= wait[q] else "queueing")
    causes = {c: labels.count(c) for c in ("stall", "service", "queueing")}
    label = np.asarray(labels, dtype=object)
    queued, served = wait[late][label == "queueing"], service[late][label == "service"]
    return {
        "over_bound": int(len(late)),
        "loadgen_over_bound": loadgen_late,
        "causes": causes,
        "stalls": [{"at_s": round(float(b["start_s"][i]), 3), "ms": round(float(b["ms"][i]), 1),
                    "typical_ms": round(float(b["typical_ms"][i]), 1), "pairs": int(b["pairs"][i]),
                    "cpu_ms": round(float(b["cpu_ms"][i]), 1), "late_behind": behind[i]} for i in stalls if i in behind],
        "stall_batches": int(len(stalls)),  # every stall of the run, late queries behind it or not
        "queueing_wait_ms": _median(queued),
        "batches": int(len(b["batch"])),
        "cpu_share": _share(b["cpu_ms"], b["ms"]),
        "service_ms": {"p50": _pct(service, 50), "p99": _pct(service, 99), "max": _pct(service, 100)},
        "wait_ms": {"p50": _pct(wait, 50), "p99": _pct(wait, 99), "max": _pct(wait, 100)},
        "explanation": sentence(len(late), causes, behind, b, queued, served, loadgen_late),
    }


def sentence(late: int, causes: dict[str, int], behind: dict[int, int], b: dict[str, np.ndarray], wait: np.ndarray,
             service: np.ndarray, loadgen_late: int | None) -> str:
    """'7 over the bound: 6 behind one 95 ms stall at 2.31 s; 1 queueing (...)'; `wait` holds the queueing
    queries' waits, `service` the service-time queries' service."""
    counted = "" if loadgen_late is None or loadgen_late == late else (
        f" (LoadGen counted {loadgen_late} on its own clock" + (": the others lost their time before the SUT saw them)"
                                                               if loadgen_late > late else ")"))
    if late == 0:
        return f"none over the bound on the SUT's clock{counted}"
    parts = []
    if causes["stall"]:
        worst = max(behind, key=lambda i: b["ms"][i])
        cpu = b["cpu_ms"][worst]
        how = "its thread off a core most of that time" if cpu < DESCHEDULED * b["ms"][worst] else "computing"
        what = (f"one {b['ms'][worst]:.0f} ms stall at {b['start_s'][worst]:.2f} s" if len(behind) == 1 else
                f"{len(behind)} stalls, the longest {b['ms'][worst]:.0f} ms at {b['start_s'][worst]:.2f} s")
        parts.append(f"{causes['stall']} behind {what} ({b['pairs'][worst]} pairs, typically {b['typical_ms'][worst]:.0f} ms; "
                     f"{cpu:.0f} ms of CPU: {how})")
    if causes["queueing"]:
        parts.append(f"{causes['queueing']} queueing (arrivals beyond capacity: waited up to {wait.max():.0f} ms before their batch)")
    if causes["service"]:
        parts.append(f"{causes['service']} in batches too slow for the bound (up to {service.max():.0f} ms of service)")
    return f"{late} over the bound{counted}: " + "; ".join(parts)


def _pct(x: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(x, q)), 2) if len(x) else None


def _median(x: np.ndarray) -> float | None:
    return round(float(np.median(x)), 2) if len(x) else None


def _share(cpu: np.ndarray, wall: np.ndarray) -> float | None:
    return round(float(cpu.sum() / wall.sum()), 3) if len(wall) and wall.sum() > 0 else None
