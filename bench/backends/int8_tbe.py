"""`int8_tbe`: torchrec's quantized EmbeddingBagCollection with INT8 rows (fp16 scale and bias per row) on
FBGEMM's IntNBit table-batched kernels; the MLP in int8 on CPU (`backend.mlp_mode`: dynamic, or static with
calibration), fp16 on CUDA (bench.config.dense_path), or fp32 (`backend.mlp=fp32`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.tbe import TbeBackend, TbeConfig
from bench.registry import register


@dataclass
class Int8TbeConfig(TbeConfig):
    name: str = "int8_tbe"
    mlp: str = "int8"


@register("backend", "int8_tbe", config=Int8TbeConfig)
class Int8TbeBackend(TbeBackend):
    weight_dtype = "int8"
