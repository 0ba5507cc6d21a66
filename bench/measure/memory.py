"""Memory: bytes held by a module, the peak resident memory of a measured step, and an estimate of
what a job will need, checked against what the machine has before a backend is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import (
    rounded_row_size_in_bytes,
)
from torch import nn

from bench import hardware


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
        if hardware.reset_peak_rss():
            self.rss_scope = "job"
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc) -> None:
        self.peak_rss_bytes = hardware.peak_rss_bytes()
        if self.device.type == "cuda":
            self.cuda_peak_bytes = int(torch.cuda.max_memory_allocated(self.device))


# ------------------------------------------------------------------------------- the resource guard

def row_bytes(dtype: str, dim: int, alignment: int = 1) -> int:
    """Stored bytes of one row of weight type `dtype` (fp32, fp16, fp8, int8, int4, int2), as FBGEMM's
    TBE lays it out, rounded up to `alignment` (1 on CPU, 16 on CUDA)."""
    return rounded_row_size_in_bytes(dim, SparseType(dtype), alignment)


def tables_bytes(tables: Mapping[str, tuple[int, int]], dtypes: Mapping[str, str] | None = None, alignment: int = 1) -> int:
    """Bytes of tables `{name: (rows, dim)}` stored as `dtypes` (name -> weight type; fp32 if absent)."""
    dtypes = dtypes or {}
    return sum(rows * row_bytes(dtypes.get(name, "fp32"), dim, alignment) for name, (rows, dim) in tables.items())


@dataclass(frozen=True)
class MemoryEstimate:
    """What a job holds at its peak: the fp32 model (unless already resident), the backend's copy of
    it, and the backend's own tables (quantized TBE tables live beside the copy while it converts)."""

    fp32_model_bytes: int
    backend_tables_bytes: int
    model_resident: bool

    @property
    def host_bytes(self) -> int:
        return (0 if self.model_resident else self.fp32_model_bytes) + self.fp32_model_bytes

    @property
    def total_bytes(self) -> int:
        return self.host_bytes + self.backend_tables_bytes

    def describe(self) -> str:
        parts = [] if self.model_resident else [f"fp32 model {_gb(self.fp32_model_bytes)}"]
        parts.append(f"backend copy {_gb(self.fp32_model_bytes)}")
        if self.backend_tables_bytes:
            parts.append(f"backend tables {_gb(self.backend_tables_bytes)}")
        return f"{_gb(self.total_bytes)} ({' + '.join(parts)})"


def estimate_job(
    tables: Mapping[str, tuple[int, int]], dense_bytes: int, dtypes: Mapping[str, str] | None, model_resident: bool, alignment: int = 1
) -> MemoryEstimate:
    """`dtypes` None: the backend keeps fp32 tables in its copy (fp32, fake_quant); else its TBE weight types."""
    fp32 = tables_bytes(tables) + int(dense_bytes)
    backend = tables_bytes(tables, dtypes, alignment) if dtypes is not None else 0
    return MemoryEstimate(fp32, backend, model_resident)


def memory_skip_reason(estimate: MemoryEstimate, device: torch.device, fraction: float) -> str | None:
    """A `skipped` reason when the estimate exceeds `fraction` of what is available, else None."""
    checks = [("host", estimate.host_bytes + (estimate.backend_tables_bytes if device.type == "cpu" else 0), hardware.mem_available_bytes(), "MemAvailable")]
    if device.type == "cuda":
        checks.append(("GPU", estimate.fp32_model_bytes + estimate.backend_tables_bytes, hardware.gpu_free_bytes(device), "free GPU memory"))
    for where, need, available, source in checks:
        if available is not None and need > fraction * available:
            return (
                f"not enough {where} memory: the job needs about {_gb(need)} by estimate ({estimate.describe()}), "
                f"more than {fraction:g} x {source} {_gb(available)}; free memory, use a smaller workload, "
                f"or raise memory_fraction (null turns the check off)"
            )
    return None


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e7 else f"{n / 1e6:.2f} MB"
