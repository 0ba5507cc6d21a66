"""`synthetic_ids`: a request stream for tables of any size, without a planted teacher.

For performance-only runs of untrained models (`model.weights=random`), such as the full MLPerf
DLRM-v2 shape (`model=dlrm_v2_full`: 26 tables, five of 40M rows, multi-hot bags). Per-row arrays
(a permutation, a CDF) would take gigabytes at 40M rows, so ids come from `ZipfIds` (the inverse
of the continuous Zipf CDF, then a scramble) with the exponents of `access` (zipf, uniform, criteo;
see `bench.workloads.access_patterns`). Dense features are standard normal and labels are coin flips at
`positive_rate`: there is nothing to learn, so AUC means nothing here. A batch comes from
(seed, split, first sample, size) alone, so any batch is generated on its own, the same every time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator, Optional

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch
from bench.config import WorkloadConfig
from bench.errors import UserError
from bench.registry import register
from bench.workloads.access_patterns import ZipfIds, check_access, feature_alphas
from bench.workloads.workload import SPLITS, TableSpec, Workload
from bench.workloads.criteo_multihot import (
    MLPERF_MULTI_HOT_SIZES,
    MLPERF_NUM_EMBEDDINGS,
)

_SPLIT_STREAM = {"train": 1, "eval": 2, "calibration": 1}


@dataclass
class SyntheticIdsConfig(WorkloadConfig):
    name: str = "synthetic_ids"
    train_samples: int = 0  # nothing to train on: the models it serves have random weights
    eval_samples: int = 65536  # the timing pool is drawn from here
    calibration_samples: int = 4096
    num_dense: int = 13
    cardinalities: list[int] = field(default_factory=lambda: list(MLPERF_NUM_EMBEDDINGS))
    pooling: Optional[list[int]] = field(default_factory=lambda: list(MLPERF_MULTI_HOT_SIZES))
    access: str = "zipf"  # zipf | uniform | criteo (bench.workloads.access_patterns)
    zipf_alpha: float = 1.1
    positive_rate: float = 0.25


@register("workload", "synthetic_ids", config=SyntheticIdsConfig)
class SyntheticIdsWorkload(Workload):
    def __init__(self, cfg, seed: int, cache_dir) -> None:
        super().__init__(cfg, seed, cache_dir)
        c = self.cfg
        pooling = c.pooling or [1] * len(c.cardinalities)
        if len(pooling) != len(c.cardinalities):
            raise UserError(f"workload.pooling has {len(pooling)} entries for {len(c.cardinalities)} tables: give one per table")
        if min(c.cardinalities) < 1 or min(pooling) < 1:
            raise UserError("workload.cardinalities and workload.pooling must be positive integers")
        check_access(c.access)
        self.pooling = [int(k) for k in pooling]

    @property
    def tables(self) -> list[TableSpec]:
        return [TableSpec(f"t_cat_{i}", f"cat_{i}", int(rows), k) for i, (rows, k) in enumerate(zip(self.cfg.cardinalities, self.pooling))]

    @property
    def num_dense(self) -> int:  # type: ignore[override]
        return self.cfg.num_dense

    @cached_property
    def samplers(self) -> list[ZipfIds]:
        alphas = feature_alphas(self.cfg.access, self.cfg.zipf_alpha, [int(r) for r in self.cfg.cardinalities])
        return [ZipfIds(int(rows), alpha, [self.seed, 9, i]) for i, (rows, alpha) in enumerate(zip(self.cfg.cardinalities, alphas))]

    def num_samples(self, split: str) -> int:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        return {"train": self.cfg.train_samples, "eval": self.cfg.eval_samples, "calibration": self.cfg.calibration_samples}[split]

    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        """Every sample of `split` once, in batches of `batch_size` (the last may be short)."""
        total = self.num_samples(split)
        for start in range(0, total, batch_size):
            yield self._batch(split, start, min(batch_size, total - start))

    def _batch(self, split: str, start: int, n: int) -> Batch:
        rng = np.random.default_rng([self.seed, _SPLIT_STREAM[split], start, n])
        ids = [s.sample(rng, (n, k)).reshape(-1) for s, k in zip(self.samplers, self.pooling)]
        sparse = KeyedJaggedTensor(
            keys=[t.feature for t in self.tables],
            values=torch.from_numpy(np.concatenate(ids)),
            lengths=torch.from_numpy(np.repeat(np.asarray(self.pooling, dtype=np.int32), n)),
        )
        dense = torch.from_numpy(rng.standard_normal((n, self.cfg.num_dense), dtype=np.float32))
        labels = torch.from_numpy((rng.random(n) < self.cfg.positive_rate).astype(np.float32))
        return Batch(dense=dense, sparse=sparse, labels=labels)

    def describe(self) -> dict:
        return {"access": self.cfg.access, "alphas": [s.alpha for s in self.samplers], "labels": "coin flips (performance only)"}
