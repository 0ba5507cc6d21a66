"""The eval split cut in two by sample index: the search half and the held-out half.

Even sample indices go to the search, odd ones are held out. Interleaving (rather than a first and a
second half) gives both halves the same distribution even where the eval split is ordered in time, as
Criteo's is, so the held-out half is a fresh draw from what the search saw, and nothing else differs.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch

SEARCH, HOLDOUT = "search", "holdout"


def take_rows(batch: Batch, rows: torch.Tensor) -> Batch:
    """The samples `rows` (indices into the batch, in order) of `batch`, every key's ids with them."""
    kjt = batch.sparse
    keys = kjt.keys()
    n = len(batch)
    lengths = kjt.lengths().view(len(keys), n)[:, rows].reshape(-1)
    starts = kjt.offsets()[:-1].view(len(keys), n)[:, rows].reshape(-1)
    # the position of every kept id: its bag's start plus its place inside the bag
    bag_of_id = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    first_of_bag = torch.cumsum(lengths, 0) - lengths
    positions = starts[bag_of_id] + torch.arange(int(lengths.sum())) - first_of_bag[bag_of_id]
    weights = kjt.weights_or_none()
    sparse = KeyedJaggedTensor(
        keys=keys,
        values=kjt.values()[positions],
        lengths=lengths,
        weights=None if weights is None else weights[positions],
    )
    return Batch(dense=batch.dense[rows], sparse=sparse, labels=batch.labels[rows])


def halves(batches: Sequence[Batch]) -> dict[str, list[Batch]]:
    """{"search": even sample indices, "holdout": odd ones}, batch by batch, in order."""
    out: dict[str, list[Batch]] = {SEARCH: [], HOLDOUT: []}
    start = 0
    for batch in batches:
        index = torch.arange(start, start + len(batch))
        for name, parity in ((SEARCH, 0), (HOLDOUT, 1)):
            rows = torch.nonzero(index % 2 == parity).reshape(-1)
            if rows.numel():
                out[name].append(take_rows(batch, rows))
        start += len(batch)
    return out


def num_samples(batches: Sequence[Batch]) -> int:
    return sum(len(b) for b in batches)

