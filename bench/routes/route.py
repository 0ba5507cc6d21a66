"""The interface every route implements; the runner calls these in order for one job.

    skip_reason(cfg, backend, device, work)  why the job cannot run here (a `skipped` record), or None;
                                             bad input raises UserError
    measure(cfg, backend, device, work, setting)
                                             the record's metrics (`bench.measure.figures.JobFigures`
                                             assembles the figures every route shares); `setting`: the
                                             timing setting `cfg.timing` was resolved with
                                             (bench.pipeline.calibrate)
    fault(metrics)                           a measured result that fails the job although it ran
                                             (sharding changed a score), or None
    teardown()                               release what the route holds; runs after every job

A route does not build records, read the store or decide resume: the runner does, the same way for
every route.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.backends.backend import Backend
from bench.config import Config
from bench.distributed import unsharded_skip_reason
from bench.pipeline.shared import SharedWork


class Route:
    name = "route"
    # Why the route's jobs are not timed with this machine's calibrated setting (None: they are).
    uncalibrated: str | None = None

    @classmethod
    def takes(cls, cfg: Config) -> bool:
        raise NotImplementedError

    def skip_reason(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> str | None:
        return None

    def measure(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork,
                setting: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def fault(self, metrics: dict[str, Any]) -> str | None:
        return None

    def teardown(self) -> None:
        pass


class PartRoute(Route):
    """A part of a job that recommend's plan runs (bench.routes.facts, bench.routes.served): taken where the
    top-level `measure` names it, never sharded."""

    @classmethod
    def takes(cls, cfg: Config) -> bool:
        return cfg.measure == cls.name

    def skip_reason(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> str | None:
        return unsharded_skip_reason(cfg)
