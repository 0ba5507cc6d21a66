"""Rows of a sequential workload as a `Batch`, and the popularity-only baseline both such workloads report.

A row is one (request, candidate) pair. Its KeyedJaggedTensor holds, in this key order: the pooled features
(one id each), the history (a sequence: the request's items, oldest first, unpooled), the candidate (one id,
in the history's table), then the side keys no table reads: `<history>_age` (each history id's age at the
request, in seconds) and `request` (one id per row). Dense features are `[B, num_dense]` float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch
from bench.workloads.workload import Sequences

HISTORY, CANDIDATE, REQUEST = "history", "item_id", "request"
AGES = f"{HISTORY}_age"
SEQUENCES = Sequences(history=HISTORY, candidate=CANDIDATE, ages=AGES, request=REQUEST)


@dataclass
class SequenceRows:
    """Rows in numpy, concatenable and sliceable: the form both sequential workloads generate or read."""

    dense: np.ndarray  # [n, num_dense] float32
    pooled: dict[str, np.ndarray]  # feature -> [n] int64
    history: np.ndarray  # all rows' history ids, concatenated, oldest first per row
    ages: np.ndarray  # aligned with history: seconds before the request
    lengths: np.ndarray  # [n] history ids per row
    candidate: np.ndarray  # [n] int64
    request: np.ndarray  # [n] int64
    labels: np.ndarray  # [n] float32
    oracle: np.ndarray | None = None  # [n] the teacher's logit, where known

    def __len__(self) -> int:
        return len(self.labels)

    def slice(self, start: int, stop: int) -> "SequenceRows":
        offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        a, b = offsets[start], offsets[stop]
        return SequenceRows(self.dense[start:stop], {k: v[start:stop] for k, v in self.pooled.items()}, self.history[a:b],
                            self.ages[a:b], self.lengths[start:stop], self.candidate[start:stop], self.request[start:stop],
                            self.labels[start:stop], None if self.oracle is None else self.oracle[start:stop])


def segments(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions starts[i] .. starts[i] + lengths[i] - 1 of every i, concatenated."""
    lengths = np.asarray(lengths, dtype=np.int64)
    first = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - first, lengths) + np.arange(int(lengths.sum()))


def concat_rows(parts: list[SequenceRows]) -> SequenceRows:
    if len(parts) == 1:
        return parts[0]
    oracle = None if parts[0].oracle is None else np.concatenate([p.oracle for p in parts])
    return SequenceRows(np.concatenate([p.dense for p in parts]), {k: np.concatenate([p.pooled[k] for p in parts]) for k in parts[0].pooled},
                        *(np.concatenate([getattr(p, f) for p in parts]) for f in ("history", "ages", "lengths", "candidate", "request", "labels")),
                        oracle)


def to_batch(rows: SequenceRows) -> Batch:
    n = len(rows)
    ones = np.ones(n, dtype=np.int32)
    keys = [*rows.pooled, HISTORY, CANDIDATE, AGES, REQUEST]
    values = [*rows.pooled.values(), rows.history, rows.candidate, rows.ages, rows.request]
    lengths = [*(ones for _ in rows.pooled), rows.lengths, ones, rows.lengths, ones]
    sparse = KeyedJaggedTensor(keys=keys, values=torch.from_numpy(np.concatenate(values).astype(np.int64)),
                               lengths=torch.from_numpy(np.concatenate(lengths).astype(np.int32)))
    return Batch(dense=torch.from_numpy(np.ascontiguousarray(rows.dense, dtype=np.float32)), sparse=sparse,
                 labels=torch.from_numpy(rows.labels.astype(np.float32)))


def batches_of(parts, batch_size: int):
    """Batches of `batch_size` rows from an iterable of SequenceRows, in order; the last may be short."""
    pending: list[SequenceRows] = []
    held = 0
    for part in parts:
        pending.append(part)
        held += len(part)
        while held >= batch_size:
            merged = concat_rows(pending)
            yield to_batch(merged.slice(0, batch_size))
            rest = merged.slice(batch_size, len(merged))
            pending, held = ([rest] if len(rest) else []), len(rest)
    if held:
        yield to_batch(concat_rows(pending))


def popularity_auc(train: list[SequenceRows], eval_rows: list[SequenceRows], prior_weight: float = 10.0) -> float:
    """The eval AUC of each candidate's click rate in the train rows, shrunk towards the overall rate
    (`prior_weight` pseudo-impressions): what a ranker that reads nothing but the item reaches."""
    items = np.concatenate([r.candidate for r in train])
    clicks = np.concatenate([r.labels for r in train])
    size = int(max(items.max(), max(r.candidate.max() for r in eval_rows))) + 1
    shown = np.bincount(items, minlength=size)
    clicked = np.bincount(items, weights=clicks, minlength=size)
    rate = (clicked + prior_weight * clicks.mean()) / (shown + prior_weight)
    candidates = np.concatenate([r.candidate for r in eval_rows])
    labels = np.concatenate([r.labels for r in eval_rows])
    return float(roc_auc_score(labels, rate[candidates]))
