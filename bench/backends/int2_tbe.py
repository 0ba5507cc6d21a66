"""`int2_tbe`: INT2 (quint2x4) embedding rows on FBGEMM's TBE kernels with an int8 MLP (fp16 on CUDA): the smallest point
of the size/accuracy curve.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.tbe import TbeBackend, TbeConfig
from bench.registry import register


@dataclass
class Int2TbeConfig(TbeConfig):
    name: str = "int2_tbe"
    mlp: str = "int8"


@register("backend", "int2_tbe", config=Int2TbeConfig)
class Int2TbeBackend(TbeBackend):
    weight_dtype = "int2"
