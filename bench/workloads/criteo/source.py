"""Parts, splits and batches shared by every Criteo layout.

A `Part` is one file's worth of rows (a day, or a whole Kaggle file) as memory-mapped arrays plus
what must still happen to them at read time (log transform of raw dense integers, modulo on ids).
A split is a list of `Segment`s (a row range of a part); `iter_batches` walks the segments in
order and yields `Batch`es of exactly `batch_size` rows, the last one possibly short, so every row
of the split is yielded once (a batch may straddle two parts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch
from bench.workloads.criteo.layout import log_dense
from bench.workloads.criteo.text import NUM_SPARSE

FEATURES = [f"cat_{j}" for j in range(NUM_SPARSE)]
TABLES = [f"t_cat_{j}" for j in range(NUM_SPARSE)]


@dataclass
class Part:
    name: str
    dense: np.ndarray  # (n, 13)
    labels: np.ndarray  # (n,) or (n, 1)
    sparse: np.ndarray | None = None  # (n, 26) one id per table
    multi_hot: list[np.ndarray] | None = None  # 26 arrays (n, k_j)
    day: int | None = None
    dense_is_raw: bool = False  # raw integers: apply log(max(x, 0) + 1) at read time
    modulo: list[int] | None = None  # ids % modulo[j] at read time
    note: str = ""
    malformed: dict | None = None  # the source's malformed lines skipped when it was preprocessed (text.Malformed)

    @property
    def rows(self) -> int:
        return int(self.dense.shape[0])

    @property
    def pooling(self) -> list[int]:
        if self.multi_hot is not None:
            return [int(a.shape[1]) for a in self.multi_hot]
        return [1] * NUM_SPARSE

    def read_dense(self, a: int, b: int) -> np.ndarray:
        x = np.asarray(self.dense[a:b])
        if self.dense_is_raw:
            return log_dense(x)
        return np.array(x, dtype=np.float32)  # a copy: torch wants writable memory

    def read_labels(self, a: int, b: int) -> np.ndarray:
        y = np.asarray(self.labels[a:b]).reshape(-1).astype(np.float32)
        y[y < 0] = np.nan  # -1 marks a file without labels: AUC on it fails loudly
        return y

    def read_ids(self, a: int, b: int) -> list[np.ndarray]:
        """26 arrays (b - a, k_j) of int64 ids."""
        if self.multi_hot is not None:
            cols = [np.asarray(m[a:b]).astype(np.int64) for m in self.multi_hot]
        else:
            block = np.asarray(self.sparse[a:b]).astype(np.int64)
            cols = [block[:, j : j + 1] for j in range(NUM_SPARSE)]
        if self.modulo is not None:
            cols = [c % m for c, m in zip(cols, self.modulo)]
        return cols


@dataclass(frozen=True)
class Segment:
    part: Part
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


@dataclass
class Split:
    segments: list[Segment] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    def head(self, n: int) -> "Split":
        """The first `n` rows (all of them when n < 0 or n >= rows)."""
        if n < 0 or n >= self.rows:
            return Split(list(self.segments))
        out, left = [], n
        for s in self.segments:
            if left <= 0:
                break
            take = min(left, s.rows)
            out.append(Segment(s.part, s.start, s.start + take))
            left -= take
        return Split(out)


def halves(part: Part) -> tuple[Segment, Segment]:
    """First and second half of a part, the first one taking the odd row (torchrec's convention)."""
    mid = part.rows // 2 + part.rows % 2
    return Segment(part, 0, mid), Segment(part, mid, part.rows)


def day_split(parts: Sequence[Part], eval_half: str) -> tuple[Split, Split, Split, str]:
    """1TB convention: train on every day before the last day present, evaluate on one half of the
    last day (`test` = first half, `val` = second half). Returns (train, eval, other_half, note)."""
    days = [p for p in parts if p.day is not None]
    if len(days) != len(parts):
        raise ValueError("day split needs a day number for every part")
    ordered = sorted(days, key=lambda p: p.day)
    last = ordered[-1]
    train = Split([Segment(p, 0, p.rows) for p in ordered[:-1]])
    first, second = halves(last)
    ev, other = (first, second) if eval_half == "test" else (second, first)
    note = f"train: days {','.join(str(p.day) for p in ordered[:-1]) or 'none'}; eval: {eval_half} half of day {last.day}"
    return train, Split([ev]), Split([other]), note


def row_order_split(parts: Sequence[Part], eval_half: str, held_out_fraction: int = 7) -> tuple[Split, Split, Split, str]:
    """Kaggle convention (facebookresearch/dlrm): rows in file order as 7 "days"; train on the first
    6/7, evaluate on one half of the last 1/7 (`test` = first half, `val` = second half)."""
    total = sum(p.rows for p in parts)
    held = total // held_out_fraction
    n_train = total - held
    first_half = held // 2 + held % 2
    bounds = {"train": (0, n_train), "test": (n_train, n_train + first_half), "val": (n_train + first_half, total)}

    def rows(a: int, b: int) -> Split:
        segs, offset = [], 0
        for p in parts:
            lo, hi = max(a, offset), min(b, offset + p.rows)
            if lo < hi:
                segs.append(Segment(p, lo - offset, hi - offset))
            offset += p.rows
        return Split(segs)

    other = "val" if eval_half == "test" else "test"
    note = f"row order: train rows [0, {n_train}); eval: {eval_half} half of the last 1/{held_out_fraction} ({bounds[eval_half][1] - bounds[eval_half][0]} rows)"
    return rows(*bounds["train"]), rows(*bounds[eval_half]), rows(*bounds[other]), note


def make_batch(dense: np.ndarray, ids: list[np.ndarray], labels: np.ndarray) -> Batch:
    n = dense.shape[0]
    values = np.concatenate([c.reshape(-1) for c in ids]) if ids else np.zeros(0, np.int64)
    lengths = np.concatenate([np.full(n, c.shape[1], dtype=np.int64) for c in ids])
    sparse = KeyedJaggedTensor(
        keys=FEATURES[: len(ids)], values=torch.from_numpy(values), lengths=torch.from_numpy(lengths), stride=n
    )
    return Batch(dense=torch.from_numpy(dense), sparse=sparse, labels=torch.from_numpy(labels))


def iter_batches(split: Split, batch_size: int) -> Iterator[Batch]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    pending: list[tuple[np.ndarray, list[np.ndarray], np.ndarray]] = []
    have = 0
    for seg in split.segments:
        pos = seg.start
        while pos < seg.stop:
            take = min(batch_size - have, seg.stop - pos)
            p = seg.part
            pending.append((p.read_dense(pos, pos + take), p.read_ids(pos, pos + take), p.read_labels(pos, pos + take)))
            have += take
            pos += take
            if have == batch_size:
                yield _join(pending)
                pending, have = [], 0
    if have:
        yield _join(pending)


def _join(pieces) -> Batch:
    if len(pieces) == 1:
        return make_batch(*pieces[0])
    dense = np.concatenate([d for d, _, _ in pieces])
    ids = [np.concatenate([i[j] for _, i, _ in pieces]) for j in range(len(pieces[0][1]))]
    labels = np.concatenate([y for _, _, y in pieces])
    return make_batch(dense, ids, labels)
