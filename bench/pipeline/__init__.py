"""The pipeline from a typed config to a run record, in small pieces with explicit inputs.

    shared.py  SharedWork: workload, model, batches, prepared backend, scores kept across jobs
    scores.py  eval scores in memory and on disk
    guard.py   before anything is built: the memory estimate and resume
    job.py     measure one job: accuracy, deltas, fidelity twin, timing, memory
    run.py     run_job(cfg, session) -> (RunRecord, exception): the one code path
"""

from bench.pipeline.run import Session, job_hash, run_job, run_one

__all__ = ["Session", "job_hash", "run_job", "run_one"]
