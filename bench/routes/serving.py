"""A serving scenario through MLPerf's LoadGen: Server (QPS under a p99 bound) or Offline (bench.serve)."""

from __future__ import annotations

from typing import Any

import torch

from bench.backends.backend import Backend
from bench.config import Config
from bench.distributed import unsharded_skip_reason
from bench.pipeline.shared import SharedWork
from bench.routes.route import Route
from bench.serve import accuracy_error, measure_serving


class ServingRoute(Route):
    name = "serving"
    uncalibrated = "LoadGen times the serving scenario"

    @classmethod
    def takes(cls, cfg: Config) -> bool:
        return cfg.serve is not None

    def skip_reason(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> str | None:
        return unsharded_skip_reason(cfg)

    def measure(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork,
                setting: dict[str, Any]) -> dict[str, Any]:
        # a paired Server job's run-to-run spread, weighed with this machine's re-runs by the runner (bench.pipeline.reruns)
        return measure_serving(cfg, backend, device, work, setting.get("serve_rerun"))

    def fault(self, metrics: dict[str, Any]) -> str | None:
        return accuracy_error(metrics)  # serving moved the AUC beyond its tolerance
