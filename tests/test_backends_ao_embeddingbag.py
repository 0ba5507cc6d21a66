"""`ao_embeddingbag` / `ao_embeddingbag4`: torch's rowwise-quantized bags give the scores of torch.ao's own quantized
EmbeddingBag (the LPOT/INC recipe's module), store the rows they say, and refuse what the ops cannot pool."""

from __future__ import annotations

import pytest
import torch
import torch.ao.nn.quantized as nnq
import torch.ao.quantization as tq
from torch import nn

from bench import registry
from bench.backends.backend import NotApplicable
from bench.backends.rowwise import RowwiseEmbeddingBag
from bench.backends.tables import table_storage
from bench.measure.memory import model_bytes
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.support.backends import make_backend as make

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=4, rows=60, pooling=3)
QCONFIGS = {8: tq.float_qparams_weight_only_qconfig, 4: tq.float_qparams_weight_only_qconfig_4bit}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()


@pytest.mark.parametrize("bits", [8, 4])
def test_bag_matches_torch_ao_quantized_embedding_bag(bits):
    torch.manual_seed(bits)
    bag = nn.EmbeddingBag(500, 16, mode="sum", include_last_offset=True)
    bag.qconfig = QCONFIGS[bits]
    reference = nnq.EmbeddingBag.from_float(bag)
    ids, offsets = torch.randint(0, 500, (300,)), torch.tensor([0, 3, 3, 10, 150, 300])
    weights = torch.rand(300)
    ours = RowwiseEmbeddingBag(bag, bits)
    # the same grid (per-row min/max, float scale and bias); torch.ao's observer and the prepack op round the
    # scale a little differently, so codes differ by a step now and then: within one step per id of the bag
    step = (bag.weight.max(1).values - bag.weight.min(1).values).max() / (2**bits - 1)
    torch.testing.assert_close(ours(input=ids, offsets=offsets), reference(ids, offsets), rtol=0, atol=float(step) * 150)
    torch.testing.assert_close(ours(ids, offsets, weights), reference(ids, offsets, weights), rtol=0, atol=float(step) * 150)
    exact = ours(ids, offsets) - bag(ids, offsets)  # and it is a quantization, not the fp32 rows
    assert 0 < exact.abs().max() <= step * 150


@pytest.mark.parametrize("name,bits,row_bytes", [("ao_embeddingbag", 8, 16 + 8), ("ao_embeddingbag4", 4, 8 + 4)])
def test_backend_stores_every_table_rowwise_and_counts_its_bytes(name, bits, row_bytes, model):
    prepared = make(name).prepare(model, [random_batch(TABLES, 64, seed=1)], CPU)
    stored = table_storage(prepared)
    assert {t: (s["dtype"], s["rows"], s["row_bytes"]) for t, s in stored.items()} == {
        t.name: ("int8" if bits == 8 else "int4", t.num_embeddings, row_bytes) for t in TABLES}
    assert model_bytes(prepared) < model_bytes(model)
    assert isinstance(prepared.sparse_arch.embedding_bag_collection.embedding_bags["t_cat_0"], RowwiseEmbeddingBag)
    assert type(model.sparse_arch.embedding_bag_collection.embedding_bags["t_cat_0"]) is nn.EmbeddingBag  # left alone


def test_tables_only_scores_follow_the_rows(model):
    batch = random_batch(TABLES, 256, seed=9)
    want = model(batch.dense, batch.sparse)
    gaps = {}
    for name in ("ao_embeddingbag", "ao_embeddingbag4"):
        got = make(name, mlp="fp32").prepare(model, [], CPU)(batch.dense, batch.sparse)
        gaps[name] = (got - want).abs().max().item()
    assert 0 < gaps["ao_embeddingbag"] < gaps["ao_embeddingbag4"] < 0.5  # 4-bit rows err more than 8-bit ones


def test_mean_pooling_is_not_applicable():
    from torchrec.modules.embedding_configs import PoolingType

    tables = tiny_tables(num_tables=2, rows=30, pooling=2)
    model = build_dlrm(tiny_model_config(8), tables, num_dense=13).eval()
    ebc = model.sparse_arch.embedding_bag_collection
    ebc._embedding_bag_configs[0].pooling = PoolingType.MEAN  # what the ops would silently sum
    with pytest.raises(NotApplicable, match="pool by sum only"):
        make("ao_embeddingbag").prepare(model, [], CPU)


@pytest.mark.parametrize("name", ["ao_embeddingbag", "ao_embeddingbag4", "inc_int8_static"])
def test_a_users_model_runs_as_it_is(name):
    """examples/two_tower.py, not a DLRM: the backends find its tables and Linears themselves."""
    from examples.two_tower import build as two_tower

    from bench.models.dlrm import embedding_bag_collection

    if name.startswith("inc"):
        pytest.importorskip("neural_compressor", reason="the inc extra is not installed")
    torch.manual_seed(0)
    model = two_tower(embedding_bag_collection(TABLES, 8), 13, item_features=["cat_0", "cat_1"]).eval()
    calibration = [random_batch(TABLES, 128, seed=s) for s in (1, 2)]
    entry = registry.get("backend", name)
    cfg = entry.config()
    if name.startswith("inc"):
        cfg.compile = False  # the graph is what is checked here; compiling is tests/test_backends_inc.py's
    prepared = entry.factory(cfg).prepare(model, calibration, CPU)
    batch = random_batch(TABLES, 64, seed=4)
    got, want = prepared(batch.dense, batch.sparse), model(batch.dense, batch.sparse)
    assert got.shape == want.shape and not torch.equal(got, want)  # quantized, and still ranking as the model does:
    assert torch.corrcoef(torch.stack([got.flatten(), want.flatten()]).detach())[0, 1] > 0.95
