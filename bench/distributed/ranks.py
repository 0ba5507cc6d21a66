"""Where this process stands among the ranks of a job, and the process group it measures in.

Ranks come from torchrun's environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`,
`MASTER_PORT`), or from submitit's when a launcher started several tasks for one job
(`hydra.launcher.tasks_per_node=N`: submitit's own helper exports the same variables). Outside of
both, a process is a job of its own: a sharded job with one rank gets a private one-rank group.

gloo on CPU, NCCL on CUDA (one GPU per rank, `LOCAL_RANK`). Every collective waits at most
`sharding.timeout_s`: a rank that died or hangs fails the others instead of blocking them.
"""

from __future__ import annotations

import datetime
import os
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist

from bench import devices


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int


def rank_env() -> RankEnv | None:
    """This process's rank, or None when no multi-process launcher started it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        _export_submitit_ranks()
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return RankEnv(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))


def _export_submitit_ranks() -> None:
    """Inside a submitit job of several tasks, export torchrun's variables with submitit's helper."""
    if "SUBMITIT_EXECUTOR" not in os.environ and "SUBMITIT_LOCAL_NTASKS" not in os.environ:
        return
    try:
        import submitit
    except ImportError:
        return
    try:
        if submitit.JobEnvironment().num_tasks > 1:
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    except RuntimeError:  # not actually inside a submitit job
        pass


def writes_records() -> bool:
    """Only rank 0 of a multi-process job writes its record; a process of its own always does."""
    env = rank_env()
    return env is None or env.rank == 0


def pg_backend(device: torch.device) -> str:
    """torch.distributed's backend for the device's ranks (gloo on the CPU, nccl on CUDA: `Device.process_group`)."""
    return devices.of(device).process_group


def rank_device(device: torch.device) -> torch.device:
    """The device a rank computes on: its own GPU (LOCAL_RANK) on CUDA, the CPU otherwise (`Device.rank_device`)."""
    env = rank_env()
    return device if env is None else devices.of(device).rank_device(device, env.local_rank)


@contextmanager
def process_group(device: torch.device, timeout_s: float) -> Iterator[dist.ProcessGroup]:
    """The default process group for a sharded job, torn down after it.

    Under torchrun (or submitit tasks) it joins the launcher's ranks (env://); a process of its own
    gets a private one-rank group. A group that already exists is used as it is and left alone.
    """
    if dist.is_initialized():
        yield dist.group.WORLD
        return
    timeout = datetime.timedelta(seconds=timeout_s)
    if rank_env() is None:
        dist.init_process_group(pg_backend(device), store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    else:
        devices.of(device).select(device)  # a GPU rank's collectives run on its own GPU
        dist.init_process_group(pg_backend(device), timeout=timeout)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def gather(obj: Any) -> list[Any] | None:
    """Every rank's `obj` on rank 0 (in rank order); None on the other ranks."""
    if world_size() == 1:
        return [obj]
    out: list[Any] | None = [None] * world_size() if rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def agree_max(value: float) -> float:
    """The largest of every rank's `value`, on every rank (so all ranks make the same number of calls)."""
    if world_size() == 1:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


class RankTerminated(RuntimeError):
    """The launcher stopped this rank (another rank failed or the job was cancelled)."""


def raise_on_sigterm() -> None:
    """Turn the launcher's SIGTERM into an exception, so a rank that is stopped still writes its error record."""

    def handler(signum, frame):
        raise RankTerminated(f"stopped by the launcher ({signal.Signals(signum).name}): another rank failed or the job was cancelled")

    signal.signal(signal.SIGTERM, handler)
