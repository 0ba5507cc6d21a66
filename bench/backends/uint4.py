"""`uint4`: INT4 (quint4x2) embedding rows on FBGEMM's TBE kernels with an int8 MLP (fp16 on CUDA), the AMD Quark DLRM-v2 recipe.

`backend.per_table={table_name: int8}` keeps a sensitive table at a wider type.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.tbe import TbeBackend, TbeConfig
from bench.registry import register


@dataclass
class Uint4Config(TbeConfig):
    name: str = "uint4"
    # Sub-byte rows take torch's greedy (L2-optimal) range, as a deployer of int4/int2 tables would
    # (bench.backends.direct.ROW_RANGES); row_range=minmax is torchrec's own quantize path.
    row_range: str = "greedy"
    mlp: str = "int8"


@register("backend", "uint4", config=Uint4Config)
class Uint4Backend(TbeBackend):
    weight_dtype = "int4"
