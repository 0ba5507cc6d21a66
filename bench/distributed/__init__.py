"""Sharded inference on torchrec's distributed engine, and what multi-process launchers need.

    env.py      ranks from torchrun's (or submitit's) environment; the process group; gathers to rank 0
    plan.py     torchrec's planner constraints and sharders; the plan it produced, as a record
    engine.py   shard a prepared model: DistributedModelParallel over a process group, or torchrec's
                quantized inference sharding inside one process
    measure.py  a rank's part of a sharded job (`collect`) and the record's metrics (`sharded_metrics`)
    launch.py   start the ranks of a world_size > 1 job from a single `python -m bench` (a sweep's job)
    worker.py   the entry point of those ranks
    host.py     one job at a time per host under parallel launchers

Its route (bench.routes.sharded) calls `unsupported_reason`, `measure_sharded` and `accuracy_error`; the CLI calls
`enter_rank`, `writes_records` and `one_job_per_host`.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.backends.backend import Backend, NotApplicable
from bench.config import Config
from bench.distributed import engine
from bench.distributed.ranks import (
    RankTerminated,
    process_group,
    raise_on_sigterm,
    rank_device,
    rank_env,
    writes_records,
)
from bench.distributed.host import one_job_per_host, overlapping
from bench.distributed.collect import accuracy_error, check, collect, sharded_metrics
from bench.errors import UserError
from bench.pipeline.shared import SharedWork

__all__ = [
    "accuracy_error", "enter_rank", "measure_sharded", "one_job_per_host", "overlapping", "sharded",
    "unsharded_skip_reason", "unsupported_reason", "writes_records", "RankTerminated",
]  # fmt: skip


def sharded(cfg: Config) -> bool:
    return cfg.sharding.name != "none"


def unsharded_skip_reason(cfg: Config) -> str | None:
    """Why an unsharded job cannot run as configured (more than one rank asked for), or None."""
    check(cfg)
    return None if cfg.world_size == 1 else (
        f"sharding=none is the unsharded model in one process: world_size={cfg.world_size} needs a sharding "
        "(table_wise, row_wise, column_wise or auto)"
    )


def unsupported_reason(cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> str | None:
    """Why this sharding cannot run here (the job is `skipped`), or None; bad input raises UserError."""
    check(cfg)
    tables = {t.name: int(t.num_embeddings) for t in work.workload(cfg).tables}
    if cfg.world_size > 1 and cfg.timing.clock == "thread_cpu" and engine.route(backend, tables) == engine.PROCESS_GROUP:
        # a rank's thread CPU time leaves out its waits on the other ranks' collectives, so the slowest
        # rank's time (the global throughput's denominator) would be too short
        raise UserError(
            f"timing.clock=thread_cpu leaves out the time a rank waits on the others ({backend.cfg.name} shards over "
            f"{cfg.world_size} processes): time this job with timing.clock=wall"
        )
    return engine.unsupported_reason(cfg, backend, device, tables, rank_env())


def measure_sharded(cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> dict[str, Any]:
    """The record's metrics of a sharded job; {} on ranks other than 0 (rank 0 writes the record)."""
    from bench.distributed.launch import launch

    workload = work.workload(cfg)
    way = engine.route(backend, {t.name: int(t.num_embeddings) for t in workload.tables})
    if way == engine.PROCESS_GROUP and cfg.world_size > 1 and rank_env() is None:
        # trained or loaded here once; the ranks load it from the cache
        refusal = engine.sequence_refusal(work.model(cfg, workload).module, cfg)
        if refusal is not None:  # before any rank starts
            raise NotApplicable(refusal)
        run = launch(cfg)
    elif way == engine.PROCESS_GROUP:
        rank_dev = rank_device(device)
        with process_group(rank_dev, cfg.sharding.timeout_s):
            run = collect(cfg, backend, rank_dev, work)
    else:
        run = collect(cfg, backend, device, work)
    return {} if run is None else sharded_metrics(cfg, backend, device, work, run)


def enter_rank(args: list[str]) -> None:
    """In a rank of a user's torchrun (or submitit tasks): one job, and a SIGTERM becomes an error record."""
    if rank_env() is None:
        return
    if any(a.startswith(("+sweep=", "sweep=")) or a in ("-m", "--multirun") for a in args):
        raise UserError("under torchrun, run one job (no sweep): a sweep launches the ranks of its multi-process jobs itself")
    raise_on_sigterm()
