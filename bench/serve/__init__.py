"""Serving through MLPerf LoadGen: queries per second under a p99 latency bound, per backend.

    queries.py         the query set (LoadGen's QSL): the eval split cut into groups of candidate pairs
    sut.py             the system under test: a dynamic batcher feeding worker threads
    timeline.py        the SUT's own clock on every query of a run (issue, batch start, batch end)
    loadgen.py         one LoadGen run: its settings, and what its detail log says
    early_stopping.py  LoadGen's early-stopping rule: how many queries a run holds, and what it can tell
    qps_search.py      the bracketed search for the highest VALID target QPS, each target judged by its runs' majority
    late.py            why a run's late queries were late: stall, service time or queueing
    queue.py           the load a simulated queue with the measured batch times holds under the bound
    path.py            the SUT's batch function timed on packed query-set batches, a backend's beside fp32's
    accuracy_log.py    AUC from LoadGen's accuracy log, checked against the offline AUC
    paired.py          two searches interleaved run by run (ABBA): a backend's and fp32's, and the ratio of their max QPS
    scenario.py        measure_serving(cfg, backend, device, work) -> metrics: one serving job
"""

from bench.serve.scenario import accuracy_error, measure_serving, paired_max_qps

__all__ = ["accuracy_error", "measure_serving", "paired_max_qps"]
