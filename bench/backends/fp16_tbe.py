"""`fp16_tbe`: fp16 embedding rows on FBGEMM's TBE kernels, fp32 MLP: halves the tables without integer
quantization.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.tbe import TbeBackend, TbeConfig
from bench.registry import register


@dataclass
class Fp16TbeConfig(TbeConfig):
    name: str = "fp16_tbe"
    mlp: str = "fp32"


@register("backend", "fp16_tbe", config=Fp16TbeConfig)
class Fp16TbeBackend(TbeBackend):
    weight_dtype = "fp16"
