"""`synthetic_scale`: the synthetic workload at deployment scale, where tables dwarf the caches.

The same planted-teacher click log as `synthetic` (see its module docstring), with 26 tables of
`table_rows` rows each (300k by default: 2.0 GB in fp32 at dim 64, 60x a 32 MiB last-level cache)
and a selectable access pattern (`access`: zipf, uniform, or fitted to real Criteo rows; see
`bench.workloads.access_patterns`). `+sweep=scale` sweeps the access pattern, the table size and the batch
size over the quantized backends. The access pattern and the table rows are axes of the results' row
key (`bench.results.key`), so the swept variants stay apart as columns of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench.registry import register
from bench.workloads.synthetic import SyntheticConfig, SyntheticWorkload


@dataclass
class SyntheticScaleConfig(SyntheticConfig):
    name: str = "synthetic_scale"
    table_rows: Optional[int] = 300_000
    train_samples: int = 1_048_576
    eval_samples: int = 262_144  # ΔAUC resolution, and the timing pool's source


@register("workload", "synthetic_scale", config=SyntheticScaleConfig)
class SyntheticScaleWorkload(SyntheticWorkload):
    pass
