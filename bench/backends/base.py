"""The backend contract.

A backend is a name plus `prepare(model, calibration_batches, device) -> nn.Module`. The returned
module keeps the model's forward signature (`module(dense, sparse) -> logits`). Backends find the
EmbeddingBagCollections and Linear layers of any TorchRec-style model themselves; they never reach
into DLRM-specific attributes. They never modify the model they are given (it is shared and cached):
copy it first.
"""

from __future__ import annotations

from typing import ClassVar, Sequence

import torch
from torch import nn

from bench.batch import Batch


class Backend:
    # Device types this backend runs on; another device yields a `skipped` record.
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")

    def __init__(self, cfg) -> None:
        self.cfg = cfg

    def unsupported_reason(self, device: torch.device) -> str | None:
        if device.type not in self.devices:
            return f"backend {self.cfg.name!r} does not run on {device.type} (supports: {', '.join(self.devices)})"
        return None

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        raise NotImplementedError

    def record_name(self) -> str:
        """The backend's name in records and reports; a backend with variants worth telling apart in one
        report (ps_redis: row precision and cache size) names them here."""
        return self.cfg.name

    def before_timing(self, prepared: nn.Module, warmup_calls: int) -> None:
        """Called once before the timed calls (the first `warmup_calls` of them are the warm-up). A backend
        whose prepared module keeps state across calls (a cache) resets it here, so every job times from
        the same state."""

    def job_metrics(self, prepared: nn.Module) -> dict:
        """Extra metrics for the job's record, read after timing (default: none)."""
        return {}

    def close(self) -> None:
        """Release external resources (servers, connections); the runner calls it after the job, whatever its outcome."""
