"""The interface every route implements; the runner calls these in order for one job.

    skip_reason(cfg, backend, device, work)  why the job cannot run here (a `skipped` record), or None;
                                             bad input raises UserError
    measure(cfg, backend, device, work)      the record's metrics (`bench.measure.figures.job_metrics`
                                             assembles the figures every route shares)
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
from bench.pipeline.shared import SharedWork


class Route:
    name = "route"

    @classmethod
    def takes(cls, cfg: Config) -> bool:
        raise NotImplementedError

    def skip_reason(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> str | None:
        return None

    def measure(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> dict[str, Any]:
        raise NotImplementedError

    def fault(self, metrics: dict[str, Any]) -> str | None:
        return None

    def teardown(self) -> None:
        pass
