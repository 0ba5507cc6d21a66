"""Serving through MLPerf LoadGen: queries per second under a p99 latency bound, per backend.

    queries.py   the query set (LoadGen's QSL): the eval split cut into groups of candidate pairs
    sut.py       the system under test: a dynamic batcher feeding worker threads
    loadgen.py   one LoadGen run: its settings, and what its detail log says
    search.py    the bracketed search for the highest VALID target QPS
    accuracy.py  AUC from LoadGen's accuracy log, checked against the offline AUC
    job.py       measure_serving(cfg, backend, device, work) -> metrics: one serving job
"""

from bench.serve.scenario import accuracy_error, measure_serving

__all__ = ["accuracy_error", "measure_serving"]
