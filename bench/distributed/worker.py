"""A rank of a job the harness launched itself (`bench.distributed.launch`).

    python -m torch.distributed.run --standalone --nproc-per-node=N -m bench.distributed.worker DIR

Reads the job's config from `DIR/job.json`, joins torchrun's process group, does its part of the
sharded job (`bench.distributed.collect.collect`), and on rank 0 writes what the ranks gathered
to `DIR`. Each rank records its pid (`rank<N>.pid`) so the launcher can make sure none outlives
the job, and how far it got (`rank<N>.phase`: starting, measuring, done); it dies with its
torchrun (Linux parent-death signal) and leaves its exception in `rank<N>.error` for the job's
error record.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

from omegaconf import OmegaConf

from bench import registry
from bench.config import Config
from bench.io import read_json


def config_from_dict(data: dict) -> Config:
    """The typed Config of `dataclasses.asdict(cfg)` (plug-in groups as their registered schemas)."""
    plugins = {kind: OmegaConf.structured(registry.get(kind, data[kind]["name"]).config) for kind in registry.KINDS}
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), plugins, data))


def die_with_parent() -> None:
    """Ask Linux to kill this rank when torchrun dies (PR_SET_PDEATHSIG), so no rank outlives its job."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(workdir: Path) -> None:
    die_with_parent()
    rank = int(os.environ.get("RANK", 0))
    (workdir / f"rank{rank}.pid").write_text(str(os.getpid()))
    phase = workdir / f"rank{rank}.phase"
    phase.write_text("starting")
    try:
        # torch, torchrec and the pipeline load only now: the pid is on disk and the parent-death
        # signal armed before the seconds these imports take
        import torch

        from bench.distributed import ranks
        from bench.distributed.collect import collect
        from bench.hardware import prepare_process
        from bench.pipeline.shared import SharedWork

        cfg = config_from_dict(read_json(workdir / "job.json"))
        prepare_process(cfg.device, cfg.threads)
        backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)
        device = ranks.rank_device(torch.device(cfg.device.type))
        with ranks.process_group(device, cfg.sharding.timeout_s):
            phase.write_text("measuring")
            run = collect(cfg, backend, device, SharedWork())
        if run is not None:
            run.save(workdir)
        phase.write_text("done")
    except BaseException as exc:
        (workdir / f"rank{rank}.error").write_text(f"{type(exc).__name__}: {exc}\n")
        raise


if __name__ == "__main__":
    main(Path(sys.argv[1]))
