"""What the routes build and share, in small pieces with explicit inputs.

    shared.py       SharedWork: workload, model, batches, prepared backend, scores kept across jobs
    scores.py       eval scores in memory and on disk
    guard.py        before anything is built: the memory estimate
    job.py          measure one unsharded job: accuracy, deltas, fidelity twin, timing, memory
    attribution.py  the embeddings' and the dense layers' shares of a backend's ΔAUC
    profile.py      where a job's time goes: kernels, roofline, page faults

The runner (bench.runner) turns a config into a record through a route (bench.routes), which
measures with these pieces.
"""
