"""The query set LoadGen draws from (its QSL): the eval split cut into groups of candidate pairs.

As in MLPerf's DLRM-v2 reference, one LoadGen sample is one user's group of user-item pairs: the eval
split is cut, in order, into consecutive groups whose sizes are drawn uniformly from a quantile list
(MLPerf's: 100-700 pairs, mean 270), or all of one fixed size; the last group holds what is left. So
the groups cover the first rows of the eval split exactly once, which the accuracy check relies on.
The rows stay resident in memory for the whole job: LoadGen's load and unload calls only check indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bench.batch import Batch, concat_batches, take_rows
from bench.config import ServeConfig


def group_sizes(cfg: ServeConfig, rows: int, seed: int) -> np.ndarray:
    """Pairs per sample, summing to at most `rows` (exactly `rows` unless `max_samples` stops first)."""
    rng = np.random.default_rng(seed)
    sizes, used = [], 0
    while used < rows and (cfg.max_samples is None or len(sizes) < cfg.max_samples):
        size = cfg.fixed_pairs if cfg.fixed_pairs is not None else int(rng.choice(cfg.pairs_quantiles))
        size = min(size, rows - used)
        sizes.append(size)
        used += size
    return np.asarray(sizes, dtype=np.int64)


@dataclass
class QuerySet:
    """`batch` holds the rows of every sample; sample i is rows starts[i] .. starts[i] + sizes[i]."""

    batch: Batch
    sizes: np.ndarray
    starts: np.ndarray

    @classmethod
    def from_eval(cls, eval_batches: list[Batch], cfg: ServeConfig, seed: int) -> "QuerySet":
        sizes = group_sizes(cfg, sum(len(b) for b in eval_batches), seed)
        rows, kept = int(sizes.sum()), []
        for b in eval_batches:  # only the batches the samples reach
            if sum(len(k) for k in kept) >= rows:
                break
            kept.append(b)
        batch = concat_batches(kept)
        if len(batch) > rows:
            batch = take_rows(batch, torch.arange(rows))
        batch.sparse.offsets()  # computed once here, not raced for by the worker threads
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return cls(batch, sizes, starts)

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def pairs(self) -> int:
        return int(self.sizes.sum())

    def rows_of(self, indices: list[int]) -> torch.Tensor:
        """The rows of these samples, in order."""
        return torch.from_numpy(np.concatenate([np.arange(self.starts[i], self.starts[i] + self.sizes[i]) for i in indices]))

    def inputs(self, indices: list[int]) -> Batch:
        """The samples' rows as one batch (features and labels), in order."""
        return take_rows(self.batch, self.rows_of(indices))

    def check_indices(self, indices: list[int]) -> None:
        """LoadGen's load/unload calls: every index must name a sample of this set."""
        bad = [i for i in indices if not 0 <= i < len(self)]
        if bad:
            raise IndexError(f"LoadGen asked for samples {bad[:5]} of a query set of {len(self)}")
