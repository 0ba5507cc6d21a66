"""DLRM tuple <-> Batch, and the offsets convention at batch boundaries."""

from __future__ import annotations

import pytest
import torch

from bench.adapters import batch_to_dlrm_tuple, dlrm_tuple_to_batch
from bench.errors import UserError
from bench.workloads.random_batch import random_batch, tiny_tables


@pytest.mark.parametrize("pooling", [1, 3])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_round_trip(pooling, include_last_offset):
    batch = random_batch(tiny_tables(3, pooling=pooling), batch_size=17)
    X, lS_o, lS_i, T = batch_to_dlrm_tuple(batch, include_last_offset=include_last_offset)
    assert lS_o.shape == (3, 17 + int(include_last_offset)) and T.shape == (17, 1)
    assert torch.equal(lS_o[0][:17], torch.arange(0, 17 * pooling, pooling))
    back = dlrm_tuple_to_batch(X, lS_o, lS_i, T, keys=batch.sparse.keys(), include_last_offset=include_last_offset)
    assert torch.equal(back.dense, batch.dense) and torch.equal(back.labels, batch.labels)
    for key in batch.sparse.keys():
        assert torch.equal(back.sparse[key].values(), batch.sparse[key].values())
        assert torch.equal(back.sparse[key].lengths(), batch.sparse[key].lengths())


def test_dlrm_collate_form_keeps_the_last_sample():
    """facebookresearch/dlrm's collate: lS_o = arange(B) per table (B entries, EmbeddingBag form)."""
    B, k = 5, 2
    X, T = torch.rand(B, 13), torch.ones(B, 1)
    lS_i = torch.arange(2 * B * k).reshape(2, B * k)
    lS_o = torch.stack([torch.arange(0, B * k, k)] * 2)
    batch = dlrm_tuple_to_batch(X, lS_o, lS_i, T)
    assert len(batch) == B and batch.sparse.stride() == B
    assert batch.sparse["cat_1"].lengths().tolist() == [k] * B  # the last bag keeps its ids
    assert batch.sparse["cat_1"].values()[-k:].tolist() == lS_i[1, -k:].tolist()


def test_off_by_one_offsets_are_rejected():
    B, k = 4, 3
    X, T = torch.rand(B, 13), torch.zeros(B, 1)
    lS_i = torch.arange(B * k).reshape(1, B * k)
    # KJT-style offsets need B + 1 entries; arange(0, B*k, k) has B: the last sample would be dropped
    with pytest.raises(UserError, match=r"arange\(0, B\*k, k\)"):
        dlrm_tuple_to_batch(X, torch.arange(0, B * k, k).reshape(1, -1), lS_i, T, include_last_offset=True)
    ok = dlrm_tuple_to_batch(X, torch.arange(0, (B + 1) * k, k).reshape(1, -1), lS_i, T, include_last_offset=True)
    assert len(ok) == B and ok.sparse["cat_0"].lengths().tolist() == [k] * B
    with pytest.raises(UserError, match="include_last_offset=True"):
        dlrm_tuple_to_batch(X, torch.arange(0, (B + 1) * k, k).reshape(1, -1), lS_i, T)
    with pytest.raises(UserError, match="3 offsets for a batch of 4"):  # a batch boundary off by one
        dlrm_tuple_to_batch(X, torch.arange(0, (B - 1) * k, k).reshape(1, -1), lS_i, T)
    with pytest.raises(UserError, match="ends at 9 but"):
        dlrm_tuple_to_batch(X, torch.tensor([[0, 3, 6, 9, 9]]), lS_i, T, include_last_offset=True)
    with pytest.raises(UserError, match="starts at 3"):
        dlrm_tuple_to_batch(X, torch.tensor([[3, 3, 6, 9]]), lS_i, T)
    with pytest.raises(UserError, match="T has 3 labels"):
        dlrm_tuple_to_batch(X, torch.arange(0, B * k, k).reshape(1, -1), lS_i, T[:3])


def test_ragged_tables_as_lists():
    X, T = torch.rand(2, 13), torch.zeros(2, 1)
    lS_o = [torch.tensor([0, 1]), torch.tensor([0, 3])]
    lS_i = [torch.tensor([7, 8]), torch.tensor([1, 2, 3, 4])]
    batch = dlrm_tuple_to_batch(X, lS_o, lS_i, T)
    assert batch.sparse["cat_1"].lengths().tolist() == [3, 1]
    X2, o2, i2, T2 = batch_to_dlrm_tuple(batch)
    assert isinstance(i2, list) and [t.tolist() for t in i2] == [[7, 8], [1, 2, 3, 4]]


def test_lengths_in_place_of_offsets_are_named_with_the_conversion():
    """dlrm's length collate yields per-sample lengths (one-hot: all ones) where offsets belong."""
    B = 5
    X, T = torch.rand(B, 13), torch.zeros(B, 1)
    lS_i = torch.arange(2 * B).reshape(2, B)
    lengths = torch.ones(2, B, dtype=torch.long)
    with pytest.raises(UserError, match=r"lS_o\[0\] looks like bag lengths, not offsets") as exc:
        dlrm_tuple_to_batch(X, lengths, lS_i, T)
    assert "torch.cumsum(lS_o, dim=-1) - lS_o" in str(exc.value) and "\n" not in str(exc.value)
    fixed = dlrm_tuple_to_batch(X, torch.cumsum(lengths, dim=-1) - lengths, lS_i, T)
    assert fixed.sparse["cat_0"].lengths().tolist() == [1] * B
    ragged = [torch.tensor([2, 0, 1]), torch.tensor([1, 1, 1])]  # multi-hot lengths starting with a 2
    with pytest.raises(UserError, match="looks like bag lengths"):
        dlrm_tuple_to_batch(torch.rand(3, 13), ragged, [torch.arange(3), torch.arange(3)], torch.zeros(3, 1))
