"""`quark_w8a8`: in the default environment the job is skipped naming Quark's own; in that environment
(`make setup-quark`) Quark's quantized modules replace every table and Linear, rows on a 4-bit grid per row,
scores near fp32."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from bench.backends.backend import NotApplicable
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.support.backends import make_backend

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=4, rows=60, pooling=3)
HAVE_QUARK = importlib.util.find_spec("quark") is not None


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(64), TABLES, num_dense=13).eval()  # dim 64: a 4-bit grid shows


def make(**overrides):
    return make_backend("quark_w8a8", **overrides)


@pytest.mark.skipif(HAVE_QUARK, reason="Quark is installed in this environment")
def test_without_quark_the_job_is_skipped_naming_its_environment(model):
    with pytest.raises(NotApplicable, match="make setup-quark"):
        make().prepare(model, [random_batch(TABLES, 64, seed=1)], CPU)


@pytest.mark.skipif(not HAVE_QUARK, reason="AMD Quark lives in its own environment: make setup-quark")
@pytest.mark.parametrize("tables", ["uint4", "int8"])
def test_quark_quantizes_every_table_per_row_and_every_linear(model, tables):
    calibration = [random_batch(TABLES, 128, seed=s) for s in (1, 2)]
    prepared = make(tables=tables).prepare(model, calibration, CPU)
    kinds = {type(m).__name__ for m in prepared.modules()}
    assert {"QuantEmbeddingBag", "QuantLinear"} <= kinds and "Linear" not in kinds and "EmbeddingBag" not in kinds
    for name, bag in prepared.sparse_arch.embedding_bag_collection.embedding_bags.items():
        if tables == "uint4":  # 64 values a row, at most 16 distinct once on a row's 4-bit grid
            assert max(torch.unique(row).numel() for row in bag.weight.detach()) <= 16, name
        original = model.sparse_arch.embedding_bag_collection.embedding_bags[name].weight
        assert not torch.equal(bag.weight.detach(), original)  # the rows moved onto the grid
    batch = random_batch(TABLES, 256, seed=9)
    want = model(batch.dense, batch.sparse)
    gap = (prepared(batch.dense, batch.sparse) - want).abs().max().item()
    assert 0 < gap < 0.1 * want.abs().max().item(), gap
