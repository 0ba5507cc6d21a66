"""The dense layers through torchao (`backend.mlp_engine=torchao`), the successor of `torch.ao.quantization`.

torchao's `quantize_` swaps each `nn.Linear`'s weight for a quantized tensor subclass; the modules stay
`nn.Linear`, so the model's structure and forward signature do not change. Schemes (`backend.mlp`):
- int8: `Int8DynamicActivationInt8WeightConfig`: weights int8 per output channel, symmetric; each call
  quantizes its input per row (per token), symmetric int8, and multiplies int8 x int8 -> int32 with
  `aten::_int_mm` (oneDNN on CPU), then rescales in fp32.
- int4: int4 weight-only, groups of 32 input columns (asymmetric, tinygemm's parameters): torchao 0.18's
  stable `Int4WeightOnlyConfig` has no CPU packing format, so this is its prototype
  `PrototypeInt4WeightOnlyConfig`, whose `Int4OpaqueTensor` calls `aten::_weight_int4pack_mm_for_cpu`.
  A layer whose input width is not a multiple of the group size, or whose output width is not a
  multiple of 16 (the CPU packing's tile), stays fp32.

Linear+ReLU is not fused here: torchao quantizes Linear weights only, and the ReLU runs on the fp32 output.
Only `nn.Linear` layers outside the embedding modules are quantized (`bench.backends.modules`).
"""

from __future__ import annotations

from torch import nn

from bench.backends.modules import child_slots

SCHEMES = ("int8", "int4")
INT4_GROUP_SIZE = 32  # the smallest group torchao's CPU int4 packing takes: the most layers quantized, the finest scales
INT4_N_TILE = 16  # output widths the CPU int4 packing takes are multiples of this


def torchao_config(scheme: str):
    """The torchao config object of a scheme."""
    if scheme == "int8":
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig

        # set_inductor_config=False: quantizing must not change torch.compile settings process-wide
        return Int8DynamicActivationInt8WeightConfig(set_inductor_config=False)
    from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig

    return PrototypeInt4WeightOnlyConfig(group_size=INT4_GROUP_SIZE, set_inductor_config=False)


def quantize_torchao(model: nn.Module, scheme: str, output: str = "int8") -> int:
    """Quantize every Linear of `model` (in place) with torchao's `quantize_`, the output layers (one output
    feature) only when `output` is not fp32; returns how many were quantized."""
    from torchao.quantization import quantize_

    slots = [getattr(parent, name) for parent, name in child_slots(model, (nn.Linear,))]
    targets = {id(m) for m in slots if output != "fp32" or m.out_features != 1}
    if scheme == "int4":
        targets = {id(m) for m in model.modules() if id(m) in targets and _int4_fits(m)}
    before = {id(m): type(m.weight) for m in model.modules() if id(m) in targets}
    quantize_(model, torchao_config(scheme), filter_fn=lambda module, _fqn: id(module) in targets)
    return sum(type(m.weight) is not before[id(m)] for m in model.modules() if id(m) in targets)


def _int4_fits(linear: nn.Linear) -> bool:
    return linear.in_features % INT4_GROUP_SIZE == 0 and linear.out_features % INT4_N_TILE == 0


def quantized_weight_types(model: nn.Module) -> dict[str, str]:
    """Name of each Linear -> the class of its weight (a torchao tensor subclass once quantized)."""
    return {name: type(m.weight).__name__ for name, m in model.named_modules() if isinstance(m, nn.Linear)}
