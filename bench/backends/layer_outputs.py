"""Where a model's scores go non-finite: every layer's output on one batch, summarized, and the first layer
whose output holds a NaN or an infinity while its inputs hold none (bench.pipeline.nonfinite reads them).

A torch module is seen through forward hooks on each submodule (named by its qualified name, in the order the
calls finish, so a leaf comes before the container around it); a toolkit's runtime graph op by op, every op's
output made a graph output (bench.backends.ov_runtime, ort_runtime). The fp32 model is seen the same way, so
a layer's name finds its fp32 counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class LayerOutput:
    name: str
    op: str  # the module's class or the graph op's type
    bad: int  # NaN or infinite values in its output
    size: int
    inputs_finite: bool  # no NaN or infinity in what it was given
    max_abs: float  # the largest finite |value| of its output (0 where none)

    def text(self) -> str:
        return f"`{self.name}` ({self.op})"


def summary(name: str, op: str, values: Iterable, inputs_finite: bool) -> LayerOutput:
    """One layer's output (arrays or tensors; anything else is skipped) as a LayerOutput."""
    arrays = [np.asarray(v.detach().float().cpu() if isinstance(v, torch.Tensor) else v) for v in values]
    arrays = [a for a in arrays if a.dtype.kind == "f"]
    bad = sum(int((~np.isfinite(a)).sum()) for a in arrays)
    finite = [np.abs(a[np.isfinite(a)]) for a in arrays]
    top = max((float(f.max()) for f in finite if f.size), default=0.0)
    return LayerOutput(name, op, bad, sum(a.size for a in arrays), inputs_finite, top)


def all_finite(values: Iterable) -> bool:
    return all(summary("", "", [v], True).bad == 0 for v in values)


def _tensors(value) -> list[torch.Tensor]:
    """The float tensors in a module's output (a tensor, a tuple or list of them, a dict, a KeyedTensor)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    values = getattr(value, "values", None)  # torchrec's KeyedTensor
    return _tensors(values()) if callable(values) and not isinstance(value, dict) else []


def module_outputs(module: nn.Module, inputs: Sequence) -> list[LayerOutput]:
    """Each submodule's output on one call of `module(*inputs)`, in the order the calls finished."""
    found: list[LayerOutput] = []

    def hook(name: str):
        def record(sub, args, output) -> None:
            found.append(summary(name or "(the model)", type(sub).__name__, _tensors(output), all_finite(_tensors(args))))
        return record

    handles = [sub.register_forward_hook(hook(name)) for name, sub in module.named_modules()]
    try:
        with torch.inference_mode():
            module(*inputs)
    finally:
        for h in handles:
            h.remove()
    return found


def first_non_finite(outputs: Sequence[LayerOutput]) -> LayerOutput | None:
    """The first layer whose output is non-finite while its inputs are finite (where it starts); else the first
    non-finite one; None when every output is finite."""
    bad = [o for o in outputs if o.bad]
    return next((o for o in bad if o.inputs_finite), bad[0] if bad else None)
