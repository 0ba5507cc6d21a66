"""Device placement and thread settings: the only place that probes hardware."""

from __future__ import annotations

import torch

from bench.errors import UserError

DEVICE_TYPES = ("cpu", "cuda")


def resolve(cfg) -> tuple[torch.device, str | None]:
    """The torch device for a device config, and a reason to skip when it is absent here."""
    if cfg.type not in DEVICE_TYPES:
        raise UserError(f"unknown device {cfg.type!r}: choose one of {', '.join(DEVICE_TYPES)} (device=NAME)")
    if cfg.type == "cuda":
        if not torch.cuda.is_available():
            return torch.device("cuda", cfg.index), "no CUDA device on this machine"
        if cfg.index >= torch.cuda.device_count():
            return torch.device("cuda", cfg.index), f"cuda:{cfg.index} does not exist ({torch.cuda.device_count()} CUDA devices)"
        return torch.device("cuda", cfg.index), None
    return torch.device("cpu"), None


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (None keeps the default) and return the count in force."""
    if threads is not None:
        if threads < 1:
            raise UserError(f"threads must be a positive integer, got {threads} (threads=N)")
        torch.set_num_threads(threads)
    return torch.get_num_threads()
