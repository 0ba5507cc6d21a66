"""Memory: bytes held by a module, and the peak resident memory of a measured step."""

from __future__ import annotations

import resource
from pathlib import Path

import torch
from torch import nn


def model_bytes(module: nn.Module) -> int:
    """Bytes of every parameter and buffer, each storage counted once.

    Walks the state dict too, because quantized Linear layers keep their int8 weights in packed
    params (tuples of tensors) that are neither parameters nor buffers.
    """
    tensors: list[torch.Tensor] = [*module.parameters(), *module.buffers()]
    stack = list(module.state_dict().values())
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            tensors.append(item)
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
    seen: dict[tuple, int] = {}
    for t in tensors:
        seen.setdefault(_storage_key(t), _storage_bytes(t))
    return sum(seen.values())


def _storage_key(t: torch.Tensor) -> tuple:
    try:
        return (t.device.type, t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # quantized or opaque tensors
        return ("opaque", id(t))


def _storage_bytes(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return int(t.numel() * t.element_size())


class PeakMemory:
    """Peak RSS of this process over a `with` block, and the CUDA peak when on a GPU.

    Linux resets the RSS high-water mark through /proc/self/clear_refs, so the peak belongs to the
    block, not to everything the process did before. Where that is not allowed, the peak is the
    process's lifetime maximum, and `rss_scope` says so.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rss_scope = "process"
        self.peak_rss_bytes = 0
        self.cuda_peak_bytes: int | None = None

    def __enter__(self) -> "PeakMemory":
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.rss_scope = "job"
        except OSError:
            pass
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc) -> None:
        self.peak_rss_bytes = _vm_hwm_bytes()
        if self.device.type == "cuda":
            self.cuda_peak_bytes = int(torch.cuda.max_memory_allocated(self.device))


def _vm_hwm_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
