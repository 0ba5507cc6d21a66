"""The unsharded model in this process: accuracy, deltas, paired timing and memory (bench.pipeline.job)."""

from __future__ import annotations

from typing import Any

import torch

from bench.backends.backend import Backend
from bench.config import Config
from bench.distributed import unsharded_skip_reason
from bench.pipeline.job import measure, output_fault, reference_fault
from bench.pipeline.shared import SharedWork
from bench.routes.route import Route


class SingleRoute(Route):
    name = "single"

    @classmethod
    def takes(cls, cfg: Config) -> bool:
        return True

    def skip_reason(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> str | None:
        return unsharded_skip_reason(cfg)

    def measure(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork,
                setting: dict[str, Any]) -> dict[str, Any]:
        self.backend_name = backend.cfg.name
        return measure(cfg, backend, device, work, setting)

    def fault(self, metrics: dict[str, Any]) -> str | None:
        name = getattr(self, "backend_name", "")
        # an fp32 reference at chance, or a backend whose output is constant or at chance beside a valid one
        return reference_fault(metrics, name) or output_fault(metrics, name)
