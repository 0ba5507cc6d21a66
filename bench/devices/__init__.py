"""Devices: what a job runs on, one object each (the interface: bench.devices.device.Device).

A device is one module here (cpu.py, cuda.py) whose class registers itself with
`@register("device", NAME, config=DeviceConfig)` (bench.registry); `device.type=NAME` picks it.
`get(cfg.device)` makes the job's device from its config; `of(torch_device)` the device a torch
device belongs to, where only that is at hand.
"""

from __future__ import annotations

import torch

from bench import registry
from bench.config import DeviceConfig
from bench.devices.device import Device


def get(cfg: DeviceConfig) -> Device:
    """The job's device, made from its `device` config; an unknown `device.type` is the user's error (one line)."""
    return registry.get(registry.DEVICE, cfg.type).factory(cfg)


def resolve(cfg: DeviceConfig) -> tuple[torch.device, str | None]:
    """The torch device of a `device` config, and why a job on it is skipped where it is not here (None: it is)."""
    return get(cfg).resolve()


def of(device: torch.device) -> Device:
    """The registered device of a torch device's type (the CPU's for `cpu`, CUDA's for `cuda:1`)."""
    return get(DeviceConfig(type=device.type, index=device.index or 0))


def names() -> list[str]:
    return registry.names(registry.DEVICE)


__all__ = ["Device", "get", "names", "of", "resolve"]
