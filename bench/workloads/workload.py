"""The workload contract: tables, splits and batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch

from bench.batch import Batch

SPLITS = ("train", "calibration", "eval")


@dataclass(frozen=True)
class TableSpec:
    """One sparse feature and its embedding table."""

    name: str  # table name, e.g. "t_cat_0"
    feature: str  # KJT key, e.g. "cat_0"
    num_embeddings: int
    pooling: int = 1  # ids per sample (1 = one-hot); for a sequence, the most ids a sample holds
    # A sequence: ordered ids (oldest first), looked up unpooled through a torchrec EmbeddingCollection,
    # one embedding per id (docs/sequential.md). Specs that share a `name` share one table.
    sequence: bool = False


@dataclass(frozen=True)
class Sequences:
    """What a sequential workload's rows are: one (request, candidate) pair each, the label the candidate's.

    Beside the tables' features, the batch's KeyedJaggedTensor carries side keys that no table reads:
    `ages` (each history id's age at the request, in whole seconds, aligned with `history`'s ids) and
    `request` (one id per row; the rows of one request are consecutive and share its history). A model
    that does not know them ignores them, as every torchrec collection reads only its own features."""

    history: str  # the sequence feature of the user's past items, oldest first
    candidate: str  # the candidate item's feature (one id per row), in the history's table
    ages: Optional[str] = None  # side key: seconds from each history event to the request
    request: Optional[str] = None  # side key: the request each row belongs to

    @property
    def side_keys(self) -> list[str]:
        return [k for k in (self.ages, self.request) if k]

    def request_sizes(self, batches: list[Batch], max_samples: int | None = None) -> np.ndarray:
        """Rows per request over `batches` (Batch), in order: the runs of equal ids of the `request` side key (a
        workload keeps a request's rows consecutive, across batch edges too), up to `max_samples` requests."""
        ids = torch.cat([b.sparse[self.request].values() for b in batches]).numpy()
        starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
        sizes = np.diff(np.concatenate([starts, [len(ids)]]))
        return sizes[:max_samples].astype(np.int64)


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

    @property
    def sequences(self) -> Sequences | None:
        """A sequential workload's history, candidate and side keys (docs/sequential.md); None for the others."""
        return None

    def popularity_auc(self) -> float | None:
        """A sequential workload's popularity-only baseline: the eval AUC of each candidate item's click rate
        in the train split (what a model that reads no history reaches); None where not computed."""
        return None
