"""Stage 4: a candidate confirmed under LoadGen's Server scenario, paired with fp32 at the same batcher and threads.

`confirm` is the one function stage 4 calls. It runs the candidate's Server job (bench.serve) with
`serve.paired=true`: the bracketed search for the highest target QPS LoadGen judges VALID under the p99
bound, interleaved run by run in ABBA order with fp32's own search in the same process (bench.serve.paired),
so both see the same host. The job's record holds both max QPS, their ratio, and the interval both brackets
allow. The ratio cancels the host's speed phases, which move absolute figures between runs; the absolute max
QPS still needs a quiet, dedicated host to mean a capacity. fp32's own candidate is served alone (ratio 1).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from bench.config import Config
from bench.metrics import LATENCY_MS, MAX_QPS, MEASURE_AGAIN, hi, lo
from bench.record import RunRecord, withheld
from bench.recommend.decide import Confirmation
from bench.recommend.jobs import Jobs
from bench.registry import BASELINE_BACKEND

PAIRED = "one LoadGen Server job, its search interleaved run by run (ABBA) with fp32's in one process; the ratio's interval from both brackets"
ALONE = "fp32's own Server search (the reference: ratio 1)"


def confirm(candidate: Config, fp32: Config, jobs: Jobs, label: str) -> Confirmation:
    """Serve the candidate paired with fp32 under the Server scenario; its max QPS, fp32's and their ratio.
    `fp32` is the reference's config at the same batcher and threads (the paired job builds fp32 itself)."""
    paired = dataclasses.replace(candidate, serve=dataclasses.replace(candidate.serve, paired=True))
    return confirmation(jobs.run(paired, f"server {label}"))


def confirmation(served: RunRecord) -> Confirmation:
    """What a paired serving record says: the candidate's max QPS, fp32's, and their ratio with its interval."""
    m = served.metrics if served.status == "ok" else {}
    paired = m.get("paired") or {}  # fp32's search beside it and the ratio, stored once (bench.serve.scenario)
    nan = float("nan")
    qps = float(m.get(MAX_QPS) or 0.0)
    alone = served.backend == BASELINE_BACKEND and not paired
    base = qps if alone else float(paired.get("reference_max_qps") or 0.0)

    def ratio(key: str) -> float:
        value: Optional[float] = 1.0 if alone and served.status == "ok" else paired.get(key)
        return nan if value is None else float(value)

    p99 = (m.get(LATENCY_MS) or {}).get("p99")
    if served.status != "ok":
        method = f"the candidate's serving job is {served.status}: {(served.error or '').splitlines()[0] if served.error else 'no reason recorded'}"
    else:
        method = ALONE if alone else PAIRED
    return Confirmation(qps, m.get(lo(MAX_QPS)), m.get(hi(MAX_QPS)), base, ratio("qps_ratio"), ratio("qps_ratio_lo"),
                        ratio("qps_ratio_hi"), p99, method, [served.resumed_from or served.record_id],
                        paired.get("not_enough_runs"), m[MEASURE_AGAIN] if withheld(served) else None)
