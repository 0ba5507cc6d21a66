"""The batch every workload yields and every model consumes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor


@dataclass
class Batch:
    """`dense` [B, num_dense] float32, `sparse` a KJT with one key per table feature, `labels` [B] float32.

    A sequential workload's KJT also holds side keys that no table reads (a history's ages, each row's
    request: `bench.workloads.workload.Sequences`, docs/sequential.md); every collection reads only its own
    features, so they pass through every model and backend."""

    dense: torch.Tensor
    sparse: KeyedJaggedTensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        return Batch(
            dense=self.dense.to(device, non_blocking=non_blocking),
            sparse=self.sparse.to(torch.device(device), non_blocking=non_blocking),
            labels=self.labels.to(device, non_blocking=non_blocking),
        )

    def model_inputs(self) -> tuple[torch.Tensor, KeyedJaggedTensor]:
        """Positional arguments of a TorchRec DLRM-style forward: `model(dense, sparse)`."""
        return self.dense, self.sparse


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


def concat_batches(batches: list[Batch]) -> Batch:
    """One batch holding the samples of `batches` in order (every batch has the same keys)."""
    if len(batches) == 1:
        return batches[0]
    keys = batches[0].sparse.keys()
    per_key = [[b.sparse[key] for b in batches] for key in keys]
    values = torch.cat([jt.values() for jts in per_key for jt in jts])
    lengths = torch.cat([jt.lengths() for jts in per_key for jt in jts])
    weighted = batches[0].sparse.weights_or_none() is not None
    weights = torch.cat([jt.weights() for jts in per_key for jt in jts]) if weighted else None
    sparse = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, weights=weights)
    return Batch(dense=torch.cat([b.dense for b in batches]), sparse=sparse, labels=torch.cat([b.labels for b in batches]))


def fresh_inputs(args: tuple) -> tuple:
    """The same model inputs, each KJT replaced by a new one over the same tensors.

    A KJT keeps what a model computes from it on first use (offsets from lengths, per-key lengths
    and splits). A request arrives without them, so a timing loop that replays pool batches must hand
    every call a KJT of its own; otherwise a replayed call is faster than a request, and a job's
    speedup drifts with how often its calls go round the pool.
    """
    return tuple(_fresh(a) for a in args)


def _fresh(x):
    if not isinstance(x, KeyedJaggedTensor):
        return x
    return KeyedJaggedTensor(keys=x.keys(), values=x.values(), weights=x.weights_or_none(), lengths=x.lengths(), stride=x.stride())
