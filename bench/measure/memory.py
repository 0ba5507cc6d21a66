"""Memory: bytes held by a module, the peak resident memory of a measured step, and an estimate of
what a job will need, checked against what the machine has before a backend is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import (
    IntNBitTableBatchedEmbeddingBagsCodegen,
    rounded_row_size_in_bytes,
)
from torch import nn
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torchrec.tensor_types import UIntXTensor

from bench import devices, hardware
from bench.devices import Device


def model_bytes(module: nn.Module) -> int:
    """Bytes the module's weights and state occupy: every storage counted once, at its real size.

    Walks what holds memory, not the state dict (which materializes tensors a module does not hold,
    such as a dynamic int8 Linear's output scale):
    - parameters and buffers; a packed INT4/INT2 table (torchrec's UIntXTensor) is a wrapper whose
      shape counts sub-byte elements: its uint8 data is what is counted;
    - the weight buffer of every FBGEMM table-batched kernel (`weights_host`/`_dev`/`_uvm`), which is
      not registered with the module; the per-table weights are views into it, so the buffer is counted
      once, 128-byte table alignment included;
    - quantized Linear weights inside packed params: int8 data, bias, and the per-channel scale and
      zero point the quantized tensor holds;
    - a tensor subclass that wraps others (torchao's quantized weights) by the tensors it holds
      (`__tensor_flatten__`): its own storage is not real memory;
    - a toolkit runtime's weights (ONNX Runtime, OpenVINO) as the runtime was handed them, which the
      module reports itself (`runtime_bytes()`, bench.backends.toolkit): they are no torch tensors.
    """
    runtime = getattr(module, "runtime_bytes", None)
    tensors: list[torch.Tensor] = [*module.parameters(), *module.buffers()]
    for m in module.modules():
        if isinstance(m, IntNBitTableBatchedEmbeddingBagsCodegen):
            tensors += [getattr(m, n) for n in ("weights_host", "weights_dev", "weights_uvm") if isinstance(getattr(m, n, None), torch.Tensor)]
        packed = getattr(m, "_packed_params", None)
        if packed is not None and hasattr(packed, "_weight_bias"):
            tensors += [t for t in packed._weight_bias() if t is not None]
    seen: dict[tuple, int] = {}
    for t in _unwrapped(tensors):
        t = t.elem if isinstance(t, UIntXTensor) else t
        seen.setdefault(_storage_key(t), _storage_bytes(t))
        if t.is_quantized and t.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            for qparams in (t.q_per_channel_scales(), t.q_per_channel_zero_points()):
                seen[("qparams", id(t), qparams.dtype)] = qparams.numel() * qparams.element_size()
    return sum(seen.values()) + (runtime() if callable(runtime) else 0)


def _unwrapped(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for t in tensors:
        if is_traceable_wrapper_subclass(t):
            names, _ = t.__tensor_flatten__()
            out += _unwrapped([getattr(t, n) for n in names if isinstance(getattr(t, n, None), torch.Tensor)])
        else:
            out.append(t)
    return out


def _storage_key(t: torch.Tensor) -> tuple:
    return (t.device.type, t.untyped_storage().data_ptr()) if t.untyped_storage().nbytes() else ("empty", id(t))


def _storage_bytes(t: torch.Tensor) -> int:
    return 0 if t.device.type == "meta" else int(t.untyped_storage().nbytes())


class PeakMemory:
    """Peak RSS of this process over a `with` block, and the peak of the device's own memory where it has one
    (the job's device, `job_device`: bench.devices; `cuda_peak_bytes` is the name records keep for it).

    Linux resets the RSS high-water mark through /proc/self/clear_refs, so the peak belongs to the
    block, not to everything the process did before. Where that is not allowed, the peak is the
    process's lifetime maximum, and `rss_scope` says so. `rss_start_bytes` is what was resident when
    the block began (what the block's peak stands on); the caller frees leftovers it does not need
    before entering, so they are part of neither figure.
    """

    def __init__(self, device: torch.device, job_device: Device | None = None) -> None:
        self.device = device
        self.job_device = job_device or devices.of(device)
        self.rss_scope = "process"
        self.peak_rss_bytes = 0
        self.rss_start_bytes: int | None = None
        self.cuda_peak_bytes: int | None = None

    def __enter__(self) -> "PeakMemory":
        if hardware.reset_peak_rss():
            self.rss_scope = "job"
        self.rss_start_bytes = hardware.rss_bytes()
        self.job_device.reset_peak(self.device)
        return self

    def __exit__(self, *exc) -> None:
        self.peak_rss_bytes = hardware.peak_rss_bytes()
        self.cuda_peak_bytes = self.job_device.peak_bytes(self.device)


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
    model_has_tables: bool = True  # False: an untrained model whose tables only its backend builds

    @property
    def host_bytes(self) -> int:
        return (0 if self.model_resident else self.fp32_model_bytes) + self.fp32_model_bytes

    @property
    def total_bytes(self) -> int:
        return self.host_bytes + self.backend_tables_bytes

    def parts(self) -> str:
        """'fp32 model 0.06 GB + backend copy 0.06 GB + backend tables 104.54 GB'."""
        model = "fp32 model" if self.model_has_tables else "fp32 model without tables (untrained)"
        parts = [] if self.model_resident else [f"{model} {_gb(self.fp32_model_bytes)}"]
        parts.append(f"backend copy {_gb(self.fp32_model_bytes)}")
        if self.backend_tables_bytes:
            parts.append(f"backend tables {_gb(self.backend_tables_bytes)}")
        return " + ".join(parts)

    def describe(self) -> str:
        return f"{_gb(self.total_bytes)} ({self.parts()})"


def estimate_job(
    tables: Mapping[str, tuple[int, int]], dense_bytes: int, dtypes: Mapping[str, str] | None, model_resident: bool,
    alignment: int = 1, fp32_tables: bool = True,
) -> MemoryEstimate:
    """`dtypes` None: the backend keeps fp32 tables in its copy (fp32, fake_quant); else its TBE weight types.

    `fp32_tables` False: the model holds no tables (untrained, tables on the meta device); the backend
    builds its own, as fp32 rows when `dtypes` is None."""
    if not fp32_tables:
        return MemoryEstimate(int(dense_bytes), tables_bytes(tables, dtypes, alignment), model_resident, model_has_tables=False)
    fp32 = tables_bytes(tables) + int(dense_bytes)
    backend = tables_bytes(tables, dtypes, alignment) if dtypes is not None else 0
    return MemoryEstimate(fp32, backend, model_resident)


def memory_skip_reason(estimate: MemoryEstimate, device: torch.device, fraction: float, job_device: Device | None = None) -> str | None:
    """A `skipped` reason when the estimate exceeds `fraction` of what is available, else None. On a device with
    memory of its own (`job_device`'s `free_bytes`), the model and the backend's tables must fit there too, and the
    tables are not counted on the host."""
    job_device = job_device or devices.of(device)
    on_host = job_device.tables_on_host
    checks = [("host", estimate.host_bytes + (estimate.backend_tables_bytes if on_host else 0), hardware.mem_available_bytes(), "MemAvailable")]
    if not on_host:
        checks.append((job_device.memory_name, estimate.fp32_model_bytes + estimate.backend_tables_bytes, job_device.free_bytes(device),
                       f"free {job_device.memory_name} memory"))
    for where, need, available, source in checks:
        if available is not None and need > fraction * available:
            return (
                f"not enough {where} memory: the job needs about {_gb(need)} by estimate ({estimate.parts()}), "
                f"more than {fraction:g} x {source} {_gb(available)}; free memory, use a smaller workload, "
                f"or raise memory_fraction (null turns the check off)"
            )
    return None


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e7 else f"{n / 1e6:.2f} MB"
