"""`criteo_multihot`: MLPerf DLRM-v2 data, `Criteo1TBMultiHotPreprocessed`.

`workload.path` is a folder with `day_N_dense.npy`, `day_N_labels.npy` and
`day_N_sparse_multi_hot.npz` (members `0.npy`..`25.npy`, int32 (n, k_j)). MLPerf evaluates on the
first half of day 23 (`eval_split: test`); train is the days before it when present. An inference
only copy (day 23 alone) has no train rows: calibration then takes the second half of day 23,
which the eval split never sees. Ids are taken modulo the MLPerf table sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.errors import UserError
from bench.registry import register
from bench.workloads.criteo.binary import read_mlperf_multihot
from bench.workloads.criteo.source import NUM_SPARSE, day_split
from bench.workloads.criteo.common import CriteoConfig, CriteoWorkload

MLPERF_NUM_EMBEDDINGS = [
    40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10,
    2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36,
]  # fmt: skip
MLPERF_MULTI_HOT_SIZES = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]


@dataclass
class CriteoMultihotConfig(CriteoConfig):
    name: str = "criteo_multihot"
    num_embeddings_per_feature: list[int] = field(default_factory=lambda: list(MLPERF_NUM_EMBEDDINGS))


@register("workload", "criteo_multihot", config=CriteoMultihotConfig)
class CriteoMultihot(CriteoWorkload):
    def _open(self, path):
        if not path.is_dir():
            raise UserError(f"workload.path={self.cfg.path!r}: give the Criteo1TBMultiHotPreprocessed folder")
        parts = read_mlperf_multihot(path)
        if not parts:
            raise UserError(f"{path}: no day_N_sparse_multi_hot.npz files")
        sizes = [int(s) for s in self.cfg.num_embeddings_per_feature]
        if len(sizes) != NUM_SPARSE:
            raise UserError(f"workload.num_embeddings_per_feature has {len(sizes)} entries; Criteo has {NUM_SPARSE} tables")
        for p in parts:
            p.modulo = sizes
        return parts, sizes, "mlperf_multihot"

    def _split(self, parts):
        return day_split(parts, self.cfg.eval_split)
