"""`fp32_tbe`: fp32 rows on the same FBGEMM TBE kernel the quantized backends use, fp32 MLP.

Against `fp32` (eager EmbeddingBag per table) it measures what table batching alone buys; against
`int8_tbe` with `backend.mlp=fp32` what quantizing the rows buys. See `bench.backends.tbe` for why
fp32 tables work on the pinned torchrec.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.tbe import TbeBackend, TbeConfig
from bench.registry import register


@dataclass
class Fp32TbeConfig(TbeConfig):
    name: str = "fp32_tbe"
    mlp: str = "fp32"


@register("backend", "fp32_tbe", config=Fp32TbeConfig)
class Fp32TbeBackend(TbeBackend):
    weight_dtype = "fp32"
