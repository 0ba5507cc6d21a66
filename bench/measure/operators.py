"""Which operators a prepared module really runs, and the dense FLOPs of one call.

One call runs under a `TorchDispatchMode` that sees every operator the dispatcher runs, ATen's and
the custom ones (FBGEMM's `fbgemm::*`, torch.ao's `quantized::*`). That answers "which kernel does
this backend use" from what ran, not from what the code meant: torchrec's eager
EmbeddingBagCollection goes through ATen's `embedding_bag`, the TBE backends through FBGEMM's
`int_nbit_split_embedding_codegen_lookup_function` (fp32 rows included), an int8 MLP through
`quantized::linear_dynamic` (torch.ao) or `aten::_int_mm` (torchao's int8 x int8 -> int32 product; a
dequantize-then-fp32 fallback would show `aten::mm`/`addmm` instead), an int4 weight-only MLP through
`aten::_weight_int4pack_mm_for_cpu`. The FLOPs of the matrix products (2*M*K*N each) give the dense
work per sample for the roofline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

EMBEDDING_WORDS = ("embedding", "lookup")
GEMM_OPS = {"aten::linear", "aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "quantized::linear_dynamic",
            "quantized::linear_relu_dynamic", "quantized::linear", "quantized::linear_relu",
            "aten::_int_mm", "aten::_weight_int4pack_mm_for_cpu"}  # fmt: skip
INT8_GEMM_OPS = {name for name in GEMM_OPS if name.startswith("quantized::")} | {"aten::_int_mm"}


@dataclass
class OperatorLog:
    embedding: set[str] = field(default_factory=set)  # embedding lookup operators
    gemm: set[str] = field(default_factory=set)  # matrix products
    gemm_flops: int = 0  # 2*M*K*N summed over the matrix products of the call
    int8_gemm_flops: int = 0  # of which in int8 kernels
    half_gemm_flops: int = 0  # of which in fp16/bf16 (a half-precision dense path, bench.backends.half_mlp)
    fp32_gemm: bool = False  # whether a float matrix product ran in fp32 (DLRM's interaction does beside a half MLP)

    def as_metrics(self, batch_size: int) -> dict:
        return {
            "kernels": {"embedding": sorted(self.embedding), "gemm": sorted(self.gemm)},
            "dense_flops_per_sample": self.gemm_flops / batch_size,
            "dense_int8_fraction": self.int8_gemm_flops / self.gemm_flops if self.gemm_flops else 0.0,
            "dense_half_fraction": self.half_gemm_flops / self.gemm_flops if self.gemm_flops else 0.0,
        }


def _flops(name: str, args: tuple, out) -> int:
    """2*M*K*N of a matrix product from its operands (batched products times the batch)."""
    if name == "aten::bmm":
        b, m, k = args[0].shape
        return 2 * b * m * k * args[1].shape[-1]
    if name in ("aten::addmm",):
        m, k = args[1].shape
        return 2 * m * k * args[2].shape[-1]
    x = args[0]
    if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
        return 0
    k = x.shape[-1]
    return 2 * (x.numel() // max(k, 1)) * k * out.shape[-1]


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.log = OperatorLog()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.name()
        if any(word in name for word in EMBEDDING_WORDS):
            self.log.embedding.add(name)
        elif name in GEMM_OPS:
            self.log.gemm.add(name)
            flops = _flops(name, args, out)
            self.log.gemm_flops += flops
            if name in INT8_GEMM_OPS:
                self.log.int8_gemm_flops += flops
            elif isinstance(out, torch.Tensor) and out.dtype in HALF_DTYPES:
                self.log.half_gemm_flops += flops
            elif name in FP32_GEMM_OPS:
                self.log.fp32_gemm = True
        return out


FP32_GEMM_OPS = GEMM_OPS - INT8_GEMM_OPS - {"aten::_weight_int4pack_mm_for_cpu"}
HALF_DTYPES = (torch.float16, torch.bfloat16)


def families(log: OperatorLog, table_dtypes: Iterable[str]) -> list[str]:
    """The kernel families (bench.devices) a call ran: FBGEMM's TBE lookup at each stored
    row type, ATen's fp32 EmbeddingBag, the fp32, fp16/bf16 and int8 GEMMs."""
    out = set()
    if any("split_embedding" in name for name in log.embedding):  # FBGEMM's table-batched lookup
        out |= {f"tbe_{dtype}" for dtype in table_dtypes}
    if any(name.startswith("aten::") and "embedding_bag" in name for name in log.embedding):
        out.add("embedding_bag_fp32")
    if log.gemm & INT8_GEMM_OPS:
        out.add("gemm_int8")
    if log.gemm & FP32_GEMM_OPS and (log.fp32_gemm or not log.half_gemm_flops):
        out.add("gemm_fp32")
    if log.half_gemm_flops:
        out.add("gemm_fp16")
    return sorted(out)


def operators(module: nn.Module, inputs: tuple) -> OperatorLog:
    """The operators one call of `module(*inputs)` runs (not timed: the mode slows the call)."""
    recorder = _Recorder()
    with torch.inference_mode(), recorder:
        module(*inputs)
    return recorder.log
