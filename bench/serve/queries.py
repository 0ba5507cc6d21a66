"""The query set LoadGen draws from (its QSL): the eval split cut into groups of candidate pairs.

As in MLPerf's DLRM-v2 reference, one LoadGen sample is one user's group of user-item pairs: the eval
split is cut, in order, into consecutive groups whose sizes are drawn uniformly from a quantile list
(MLPerf's: 100-700 pairs, mean 270), or all of one fixed size; the last group holds what is left.
A sequential workload whose rows carry a `request` side key (docs/sequential.md) is cut by it instead,
as MLPerf's DLRMv3 counts a sample: one request, a user's history and all its candidates, so the groups
are the workload's own requests, with the history lengths it drew. Either way the groups cover the
first rows of the eval split exactly once, which the accuracy check relies on. The rows stay resident
in memory for the whole job: LoadGen's load and unload calls only check indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bench.batch import Batch, concat_batches, take_rows
from bench.config import ServeConfig
from bench.serve.response import DLRM, DLRMV3
from bench.workloads.workload import Sequences


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
    """`batch` holds the rows of every sample; sample i is rows starts[i] .. starts[i] + sizes[i]. `history`: a
    request-grouped set's history length per sample (None for groups of pairs)."""

    batch: Batch
    sizes: np.ndarray
    starts: np.ndarray
    history: np.ndarray | None = None

    @classmethod
    def from_eval(cls, eval_batches: list[Batch], cfg: ServeConfig, seed: int, sequences: Sequences | None = None) -> "QuerySet":
        """Groups of pairs (`serve.pairs_quantiles` or `serve.fixed_pairs`); or, where `sequences` (the workload's,
        `Workload.sequences`) names a request key, one sample per request."""
        by_request = sequences is not None and sequences.request is not None
        if by_request:
            sizes = sequences.request_sizes(eval_batches, cfg.max_samples)
        else:
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
        history = batch.sparse[sequences.history].lengths().numpy()[starts].astype(np.int64) if by_request else None
        return cls(batch, sizes, starts, history)

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def pairs(self) -> int:
        return int(self.sizes.sum())

    @property
    def layout(self) -> str:
        """How a response is laid out (bench.serve.response): DLRMv3's for a request, DLRM's for a group of pairs."""
        return DLRM if self.history is None else DLRMV3

    def describe(self) -> dict:
        """What the record says of the query set: its samples and pairs, how it was cut, its responses' layout, and for
        requests the spread of their history lengths."""
        out = {"samples": len(self), "pairs": self.pairs, "pairs_mean": self.pairs / len(self), "response_layout": self.layout}
        if self.history is not None:
            h = self.history
            out.update(sizes="requests", history_min=int(h.min()), history_p50=float(np.median(h)),
                       history_max=int(h.max()), history_mean=float(h.mean()), history_distinct=int(len(np.unique(h))))
        return out

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


def served_sizes(cfg, work) -> np.ndarray:
    """The pairs per sample a serving job of `cfg` (with `serve` set) serves, for a queue estimate to draw from: the
    quantile list or the fixed size; for a workload cut by request, its query set's own request sizes. `work`: the
    process's SharedWork (bench.pipeline.shared), which batches the eval split once."""
    workload = work.workload(cfg)
    sequences = workload.sequences
    if sequences is None or sequences.request is None:
        serve = cfg.serve
        return np.asarray([serve.fixed_pairs] if serve.fixed_pairs else serve.pairs_quantiles, dtype=float)
    return QuerySet.from_eval(work.split_batches(cfg, workload, "eval"), cfg.serve, cfg.seed, sequences).sizes.astype(float)
