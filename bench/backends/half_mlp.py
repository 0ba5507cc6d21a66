"""The dense layers in fp16 or bf16 (`backend.mlp=fp16|bf16`): the dense path of a GPU deployment.

torchrec's own inference lowering of the dense part is `torchrec.inference.modules.quantize_dense`: every
child of the predict module that holds no embedding module is cast with `.half()`, and a forward pre-hook
(`quantize_feature`) casts its float inputs to fp16; fp16 is the only dtype it lowers to ("only fp16 is
supported for non-embedding module lowering"). torch.ao's int8 Linear, the CPU default, has no CUDA
kernel, so on CUDA this is the default dense path (`bench.config.dense_path`).

`to_half` does what `quantize_dense` does, on any TorchRec-style model rather than a predict module's
top-level children: each largest submodule that holds an `nn.Linear` and no embedding module (DLRM's
bottom and top MLPs) is cast to the dtype, its float inputs are cast on the way in, and, unlike
`quantize_dense`, its float outputs are cast back to fp32 on the way out, so the code between those
submodules (DLRM's interaction, the KeyedTensor of the pooled embeddings, the logits the harness reads)
keeps running in fp32. That is one cast in and one out per submodule, not per layer.

`emulate_half` is the fake-quant twin of that path with fp32 kernels: each such Linear's weights and bias
are rounded to the dtype in place, and its input and output are rounded to it on every call (the
products accumulate in fp32, as cuBLAS's fp16 GEMMs do by default).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench.backends.modules import EMBEDDING_TYPES

HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
HALF_SCHEMES = tuple(HALF_DTYPES)


def _has_embedding(module: nn.Module) -> bool:
    return any(isinstance(m, EMBEDDING_TYPES) for m in module.modules())


def dense_submodules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, module) of each largest submodule that holds an nn.Linear and no embedding module."""
    found: list[tuple[str, nn.Module]] = []

    def visit(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(child, EMBEDDING_TYPES):
                continue
            if not _has_embedding(child):
                if any(isinstance(m, nn.Linear) for m in child.modules()):
                    found.append((path, child))
            else:
                visit(path, child)

    if not _has_embedding(model) and any(isinstance(m, nn.Linear) for m in model.modules()):
        return [("", model)]
    visit("", model)
    return found


def _cast(value: Any, to: torch.dtype, floats: tuple[torch.dtype, ...]) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(to) if value.dtype in floats else value
    if isinstance(value, (tuple, list)):
        return type(value)(_cast(v, to, floats) for v in value)
    return value


class _CastIn:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __call__(self, module: nn.Module, args: tuple) -> tuple:
        return _cast(args, self.dtype, (torch.float32, torch.float64))


class _CastOut:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> Any:
        return _cast(output, torch.float32, (self.dtype,))


def to_half(model: nn.Module, scheme: str) -> int:
    """Cast the dense submodules of `model` (in place) to fp16 or bf16, casting their inputs in and their
    outputs back to fp32; returns how many nn.Linear layers now run in that dtype."""
    dtype = HALF_DTYPES[scheme]
    count = 0
    for _, module in dense_submodules(model):
        module.to(dtype)
        module.register_forward_pre_hook(_CastIn(dtype))
        module.register_forward_hook(_CastOut(dtype))
        count += sum(isinstance(m, nn.Linear) for m in module.modules())
    return count


class _Round:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def pre(self, module: nn.Module, args: tuple) -> tuple:
        return tuple(a.to(self.dtype).to(a.dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)

    def post(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        return output.to(self.dtype).to(output.dtype)


@torch.no_grad()
def emulate_half(model: nn.Module, scheme: str) -> int:
    """The fp32-kernel twin of `to_half`: round each dense nn.Linear's weights, inputs and outputs to the
    dtype (in place); returns how many layers it rounds."""
    dtype = HALF_DTYPES[scheme]
    count = 0
    for _, module in dense_submodules(model):
        for linear in (m for m in module.modules() if isinstance(m, nn.Linear)):
            for p in linear.parameters():
                p.copy_(p.to(dtype).to(p.dtype))
            rounding = _Round(dtype)
            linear.register_forward_pre_hook(rounding.pre)
            linear.register_forward_hook(rounding.post)
            count += 1
    return count
