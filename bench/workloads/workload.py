"""The workload contract: tables, splits and batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bench.batch import Batch

SPLITS = ("train", "calibration", "eval")


@dataclass(frozen=True)
class TableSpec:
    """One sparse feature and its embedding table."""

    name: str  # table name, e.g. "t_cat_0"
    feature: str  # KJT key, e.g. "cat_0"
    num_embeddings: int
    pooling: int = 1  # ids per sample (1 = one-hot)


class Workload:
    """Yields `Batch`es per split. Deterministic for a given config and seed."""

    num_dense: int = 13

    def __init__(self, cfg, seed: int, cache_dir: Path) -> None:
        self.cfg = cfg  # the workload's resolved config (its registered schema)
        self.seed = seed
        self.cache_dir = Path(cache_dir)  # for generated or preprocessed data; shared across runs

    @property
    def tables(self) -> list[TableSpec]:
        raise NotImplementedError

    def num_samples(self, split: str) -> int:
        raise NotImplementedError

    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        """Every sample of `split` exactly once, in order; the last batch may be short."""
        raise NotImplementedError

    def data_identity(self) -> dict:
        """What identifies the data read (e.g. file path, size, mtime): part of the model cache key,
        so a changed file retrains. Generated workloads are identified by their config alone."""
        return {}

    def check_data(self) -> None:
        """Raise UserError for data that cannot make a job, before any work (the pre-flight check calls
        it); what the check reads should be what the job reads anyway (a cached first pass)."""

    def mapping(self) -> str | None:
        """Which input column became which part (label, features), on one line for the console before any
        work; None for a workload that generates or knows its columns."""
        return None

    def describe(self) -> dict:
        """What was read and how it was split, for run records."""
        return {}

    def oracle_auc(self) -> float | None:
        """AUC of the true probabilities on the eval split, where the workload knows them."""
        return None
