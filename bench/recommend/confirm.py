"""Stage 4: a candidate confirmed under LoadGen's Server scenario, beside fp32 at the same batcher and threads.

`confirm` is the one function stage 4 calls. It runs two serving jobs (bench.serve: the bracketed search for
the highest target QPS LoadGen judges VALID under the p99 bound), fp32's first and then the candidate's, one
after the other in this process, and reads the candidate's max QPS relative to fp32's from them. Their ratio
has the interval the two brackets allow (each max QPS lies between its highest VALID and lowest INVALID
target); it is not paired run by run, so a change of the host's speed between the two searches moves it.
"""

from __future__ import annotations

from typing import Optional

from bench.config import Config
from bench.metrics import LATENCY_MS, MAX_QPS, hi, lo
from bench.record import RunRecord
from bench.recommend.decide import Confirmation
from bench.recommend.jobs import Jobs

METHOD = "two LoadGen Server searches in turn (fp32's, then the candidate's); the ratio's interval from their brackets"


def _bracket(record: RunRecord) -> tuple[float, Optional[float], Optional[float]]:
    m = record.metrics if record.status == "ok" else {}
    return float(m.get(MAX_QPS) or 0.0), m.get(lo(MAX_QPS)), m.get(hi(MAX_QPS))


def confirm(candidate: Config, fp32: Config, jobs: Jobs, label: str) -> Confirmation:
    """Serve fp32, then the candidate, under the Server scenario; their max QPS and its ratio to fp32's."""
    reference = jobs.run(fp32, f"server fp32 bs={fp32.batch_size} threads={fp32.threads}")
    served = jobs.run(candidate, f"server {label}")
    return confirmation(served, reference)


def confirmation(served: RunRecord, reference: RunRecord) -> Confirmation:
    """What two serving records say: the candidate's max QPS, fp32's, and their ratio with the brackets' interval."""
    qps, qps_lo, qps_hi = _bracket(served)
    base, base_lo, base_hi = _bracket(reference)
    nan = float("nan")
    ratio = qps / base if base > 0 else nan
    low = (qps_lo or 0.0) / base_hi if base_hi else (qps_lo or 0.0) / base if base > 0 else nan
    high = (qps_hi / (base_lo or base)) if qps_hi and (base_lo or base) else nan
    p99 = ((served.metrics.get(LATENCY_MS) or {}).get("p99")) if served.status == "ok" else None
    if served.status != "ok":
        method = f"the candidate's serving job did not finish: {served.error}"
    else:
        method = METHOD
    return Confirmation(qps, qps_lo, qps_hi, base, ratio, low, high, p99, method,
                        [r.resumed_from or r.record_id for r in (reference, served) if r.resumed_from or r.record_id])
