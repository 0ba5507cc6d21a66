"""`uint4_mixed`: the mixed recipe, INT4 rows for the big tables and INT8 rows for the small ones, int8 MLP.

The direction AMD Quark takes for DLRM-v2: the five 40M-row tables hold almost all the bytes, so
INT4 there buys nearly all of uint4's compression, while the small tables, where every row is read
often and an error repeats across many samples, keep INT8. Tables with fewer than
`backend.small_table_rows` rows (default 10M) are INT8. It stays out of the default sweeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench.backends.uint4 import Uint4Backend, Uint4Config
from bench.registry import register


@dataclass
class Uint4MixedConfig(Uint4Config):
    name: str = "uint4_mixed"
    small_table_rows: Optional[int] = 10_000_000


@register("backend", "uint4_mixed", config=Uint4MixedConfig, in_sweeps=False)
class Uint4MixedBackend(Uint4Backend):
    pass
