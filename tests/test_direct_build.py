"""Tables built directly in their stored form (random weights) match torchrec's own quantize path bit for bit."""

import copy

import pytest
import torch

from bench.backends.direct import build_tables_directly
from bench.backends.modules import materialize_random_tables
from bench.backends.tbe import quantize_tables, row_alignment
from bench.config import ModelConfig
from bench.models.random_weights import CHUNK_ROWS, table_chunk, table_chunks
from bench.models.train import trained_model
from bench.workloads.random_batch import random_batch, tiny_tables
from bench.workloads.workload import TableSpec
from tests.support.stored_tables import stored_tables


class TablesOnly:
    """Just enough of a workload for trained_model: tables and a dense width."""

    num_dense = 13
    sequences = None  # pooled tables only, as bench.workloads.workload.Workload's default

    def __init__(self, tables):
        self.tables = tables
        self.cfg = {"name": "tables"}

    def data_identity(self):
        return {}


def random_model(tables, dim=16):
    cfg = ModelConfig(name="tiny", embedding_dim=dim, dense_arch_layer_sizes=[16, dim], over_arch_layer_sizes=[16, 1], weights="random")
    model, info = trained_model(cfg, TablesOnly(tables), seed=3, cache_dir="/nonexistent")
    assert info["source"] == "random"
    return model


def test_random_model_holds_no_table_memory():
    model = random_model(tiny_tables(4, 1000))
    assert all(p.is_meta for n, p in model.named_parameters() if "embedding_bags" in n)
    assert not any(p.is_meta for n, p in model.named_parameters() if "embedding_bags" not in n)


def test_chunks_do_not_depend_on_who_asks():
    a = table_chunk(3, "t_cat_0", CHUNK_ROWS + 5, 8, 1)
    assert a.shape == (5, 8) and torch.equal(a, table_chunk(3, "t_cat_0", CHUNK_ROWS + 5, 8, 1))
    assert not torch.equal(a, table_chunk(3, "t_cat_1", CHUNK_ROWS + 5, 8, 1))
    assert float(a.abs().max()) <= (1.0 / (CHUNK_ROWS + 5)) ** 0.5


@pytest.mark.parametrize("dtypes", [
    ["int4", "int4", "int2", "int8"],
    ["fp32", "fp16", "int8", "int2"],
])
@pytest.mark.slow
def test_direct_build_is_bit_identical_to_torchrec_quantize_path(dtypes):
    # one table spans two generator chunks, so the chunk boundary is covered too
    tables = [*tiny_tables(3, 1000), TableSpec("t_cat_3", "cat_3", CHUNK_ROWS + 300)]
    model = random_model(tables)
    want = dict(zip([t.name for t in tables], dtypes))
    cpu = torch.device("cpu")

    reference = materialize_random_tables(copy.deepcopy(model))  # fp32 rows, then torchrec's quantize path
    quantize_tables(reference, want, cpu)
    direct = copy.deepcopy(model)
    build_tables_directly(direct, want, cpu, row_alignment(cpu))

    ref, got = stored_tables(reference), stored_tables(direct)
    assert ref.keys() == got.keys() == want.keys()
    for name in want:
        assert ref[name].dtype == got[name].dtype == torch.uint8
        assert torch.equal(ref[name], got[name]), name
    batch = random_batch(tables, 32)
    with torch.inference_mode():
        assert torch.equal(reference(*batch.model_inputs()), direct(*batch.model_inputs()))


def test_pieces_hold_each_chunks_own_values():
    """table_chunks hands a chunk out in pieces (a small build's memory stays small) with table_chunk's values."""
    rows, dim = CHUNK_ROWS + 70, 4
    pieces = list(table_chunks(3, "t_item", rows, dim, piece_bytes=4 * dim * 64))
    assert max(len(p) for _, p in pieces) == 64 and [s for s, _ in pieces] == list(range(0, rows, 64))[: len(pieces)]
    whole = torch.cat([table_chunk(3, "t_item", rows, dim, c) for c in (0, 1)])
    assert torch.equal(torch.cat([p for _, p in pieces]), whole)
