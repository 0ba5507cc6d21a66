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
    # Sub-byte rows take torch's greedy (L2-optimal) range, as a deployer of int4/int2 tables would
    # (bench.backends.direct.ROW_RANGES); row_range=minmax is torchrec's own quantize path.
    row_range: str = "greedy"
    mlp: str = "int8"


@register("backend", "int2_tbe", config=Int2TbeConfig)
class Int2TbeBackend(TbeBackend):
    weight_dtype = "int2"
