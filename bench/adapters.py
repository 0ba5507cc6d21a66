"""The classic DLRM loader tuple `(X, lS_o, lS_i, T)` <-> the harness `Batch`.

facebookresearch/dlrm's loaders yield
    X     [B, 13] float dense features (already log-transformed)
    lS_o  [num_tables, B] per-table bag offsets, `EmbeddingBag` style: B entries, the start of each bag
          (the end of the last bag is len(lS_i[t])); a list of 1-D tensors is accepted too
    lS_i  [num_tables, nnz] per-table ids (a list of 1-D tensors when nnz differs between tables)
    T     [B, 1] float labels

The KJT needs B + 1 offsets per key. The off-by-one that once dropped the last sample of every
batch in a public loader is building those with `arange(0, B*k, k)` (B entries, the EmbeddingBag
form) where `arange(0, (B+1)*k, k)` was needed. Here every offsets vector is checked against the
batch size from X and T: B entries (`include_last_offset=False`, DLRM's form) or B + 1 entries
ending at len(ids) (`include_last_offset=True`); any other count, a first offset other than 0,
decreasing offsets or ids outside the bags raise `UserError`, so no sample is dropped silently.
Per-sample lengths in place of offsets (dlrm's `collate_wrapper_criteo_length` yields those) are
named as such, with the conversion `torch.cumsum(lS_o, dim=-1) - lS_o`.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch
from bench.errors import UserError

DlrmTuple = tuple[torch.Tensor, torch.Tensor | list[torch.Tensor], torch.Tensor | list[torch.Tensor], torch.Tensor]


def _per_table(x, what: str) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        if x.dim() != 2:
            raise UserError(f"{what} must be 2-D [num_tables, n] or a list of 1-D tensors, got shape {tuple(x.shape)}")
        return list(x.unbind(0))
    return [torch.as_tensor(t) for t in x]


def _is_offsets(offsets: torch.Tensor, num_ids: int) -> bool:
    """Valid EmbeddingBag offsets: start at 0, never decrease, stay within the ids."""
    return int(offsets[0]) == 0 and bool((offsets[1:] >= offsets[:-1]).all()) and int(offsets[-1]) <= num_ids


def bag_lengths(offsets: torch.Tensor, num_ids: int, batch_size: int, include_last_offset: bool, table: int) -> torch.Tensor:
    """Lengths of the B bags described by `offsets`, after checking them against B and num_ids."""
    offsets = offsets.to(torch.int64).reshape(-1)
    expected = batch_size + 1 if include_last_offset else batch_size
    if offsets.numel() != expected:
        hint = ""
        if include_last_offset and offsets.numel() == batch_size:
            hint = " (built with arange(0, B*k, k) instead of arange(0, (B+1)*k, k)? the last sample would be dropped)"
        elif not include_last_offset and offsets.numel() == batch_size + 1:
            hint = " (B + 1 offsets: pass include_last_offset=True)"
        raise UserError(f"lS_o[{table}] has {offsets.numel()} offsets for a batch of {batch_size}; expected {expected}{hint}")
    looks_like_lengths = (
        not include_last_offset and batch_size and bool((offsets >= 0).all()) and int(offsets.sum()) == num_ids and not _is_offsets(offsets, num_ids)
    )
    if looks_like_lengths:
        raise UserError(
            f"lS_o[{table}] looks like bag lengths, not offsets (its {batch_size} entries sum to the {num_ids} ids of lS_i[{table}]; "
            "dlrm's collate_wrapper_criteo_length yields lengths): convert with lS_o = torch.cumsum(lS_o, dim=-1) - lS_o"
        )
    if batch_size and int(offsets[0]) != 0:
        raise UserError(f"lS_o[{table}] starts at {int(offsets[0])}, not 0: ids before the first bag would be dropped")
    if include_last_offset and int(offsets[-1]) != num_ids:
        raise UserError(f"lS_o[{table}] ends at {int(offsets[-1])} but lS_i[{table}] has {num_ids} ids")
    if batch_size and int(offsets[-1]) > num_ids:  # checked before the differences, which it would make negative
        raise UserError(f"lS_o[{table}] points past the {num_ids} ids of lS_i[{table}]")
    ends = offsets if include_last_offset else torch.cat([offsets, torch.tensor([num_ids])])
    lengths = ends[1:] - ends[:-1]
    if batch_size and (lengths < 0).any():
        raise UserError(f"lS_o[{table}] decreases: offsets must be non-decreasing")
    return lengths


def dlrm_tuple_to_batch(
    X: torch.Tensor,
    lS_o,
    lS_i,
    T: torch.Tensor,
    keys: Sequence[str] | None = None,
    include_last_offset: bool = False,
) -> Batch:
    """A DLRM loader tuple as a `Batch`; `keys` default to cat_0..cat_{n-1}."""
    batch_size = int(X.shape[0])
    labels = T.reshape(-1).to(torch.float32)
    if labels.numel() != batch_size:
        raise UserError(f"T has {labels.numel()} labels but X has {batch_size} rows")
    offsets = _per_table(lS_o, "lS_o")
    ids = _per_table(lS_i, "lS_i")
    if len(offsets) != len(ids):
        raise UserError(f"lS_o has {len(offsets)} tables but lS_i has {len(ids)}")
    keys = list(keys) if keys is not None else [f"cat_{j}" for j in range(len(ids))]
    if len(keys) != len(ids):
        raise UserError(f"{len(keys)} keys for {len(ids)} tables")
    lengths = [bag_lengths(o, int(i.numel()), batch_size, include_last_offset, j) for j, (o, i) in enumerate(zip(offsets, ids))]
    sparse = KeyedJaggedTensor(
        keys=keys,
        values=torch.cat([i.reshape(-1).to(torch.int64) for i in ids]) if ids else torch.zeros(0, dtype=torch.int64),
        lengths=torch.cat(lengths) if lengths else torch.zeros(0, dtype=torch.int64),
        stride=batch_size,
    )
    return Batch(dense=X.to(torch.float32), sparse=sparse, labels=labels)


def batch_to_dlrm_tuple(batch: Batch, include_last_offset: bool = False) -> DlrmTuple:
    """A `Batch` as DLRM's `(X, lS_o, lS_i, T)`: tensors [num_tables, .] when every table has the
    same number of ids (one-hot), lists of 1-D tensors otherwise."""
    kjt = batch.sparse
    batch_size = len(batch)
    offsets, ids = [], []
    for key in kjt.keys():
        jt = kjt[key]
        full = jt.offsets().to(torch.int64)
        if full.numel() != batch_size + 1:
            raise UserError(f"KJT key {key!r} has {full.numel() - 1} bags for a batch of {batch_size}")
        offsets.append(full if include_last_offset else full[:-1])
        ids.append(jt.values().to(torch.int64))
    same = len({i.numel() for i in ids}) <= 1
    lS_o = torch.stack(offsets) if offsets else torch.zeros(0, batch_size, dtype=torch.int64)
    lS_i = torch.stack(ids) if same and ids else ids
    return batch.dense, lS_o, lS_i, batch.labels.reshape(-1, 1)
