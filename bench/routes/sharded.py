"""Tables sharded over ranks by torchrec's planner, in one process or over a process group (bench.distributed)."""

from __future__ import annotations

from typing import Any

import torch

from bench import distributed
from bench.backends.backend import Backend
from bench.config import Config
from bench.pipeline.shared import SharedWork
from bench.routes.route import Route


class ShardedRoute(Route):
    name = "sharded"
    uncalibrated = "a sharded job's ranks are timed on the wall clock"

    @classmethod
    def takes(cls, cfg: Config) -> bool:
        return distributed.sharded(cfg)

    def skip_reason(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> str | None:
        return distributed.unsupported_reason(cfg, backend, device, work)

    def measure(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork,
                setting: dict[str, Any]) -> dict[str, Any]:
        return distributed.measure_sharded(cfg, backend, device, work)

    def fault(self, metrics: dict[str, Any]) -> str | None:
        return distributed.accuracy_error(metrics)  # sharding must leave every score as it was
