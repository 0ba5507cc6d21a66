"""Embedding storage read from the prepared module's buffers: FBGEMM's row layout, and no table left
unquantized (including the `quantize_dynamic`-without-a-qconfig-spec trap)."""

from __future__ import annotations

import copy

import pytest
import torch
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.quant.embedding_modules import (
    EmbeddingBagCollection as QuantEmbeddingBagCollection,
)

from bench import registry
from bench.backends import tbe
from bench.backends.ao_notice import torch_ao_calls
from bench.backends.tables import embedding_bytes, table_storage
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=3, rows=40)
# FBGEMM row bytes at CPU row alignment 1 (fp16 scale + bias per row for the integer types).
ROW_BYTES = {"fp32": lambda d: 4 * d, "fp16": lambda d: 2 * d, "int8": lambda d: d + 4, "int4": lambda d: d // 2 + 4, "int2": lambda d: d // 4 + 4}
TBE_BACKENDS = {"fp32_tbe": "fp32", "fp16_tbe": "fp16", "int8_tbe": "int8", "uint4": "int4", "int2_tbe": "int2"}
QUANTIZED = {"fp16_tbe": "fp16", "int8_tbe": "int8", "uint4": "int4", "int2_tbe": "int2"}


def model_with_dim(dim: int):
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(dim), TABLES, num_dense=13).eval()


def prepare(name: str, model, **overrides):
    entry = registry.get("backend", name)
    cfg = entry.config()
    cfg.mlp = "fp32"
    for key, value in overrides.items():
        setattr(cfg, key, value)
    # an int8 MLP reads the calibration batches, dynamic mode too (backend.mlp_wide reads its Linears' input ranges)
    calibration = [random_batch(TABLES, 64, seed=1)] if cfg.mlp == "int8" else []
    return entry.factory(cfg).prepare(model, calibration, CPU)


def test_eager_fp32_storage():
    storage = table_storage(model_with_dim(8))
    assert storage == {t.name: {"dtype": "fp32", "rows": t.num_embeddings, "row_bytes": 32} for t in TABLES}
    assert embedding_bytes(model_with_dim(8)) == 32 * sum(t.num_embeddings for t in TABLES)


@pytest.mark.parametrize("dim", [8, 16])
@pytest.mark.parametrize("name", sorted(TBE_BACKENDS))
def test_row_bytes_match_fbgemm_layout(name, dim):
    prepared = prepare(name, model_with_dim(dim))
    dtype = TBE_BACKENDS[name]
    storage = table_storage(prepared)
    assert storage == {t.name: {"dtype": dtype, "rows": t.num_embeddings, "row_bytes": ROW_BYTES[dtype](dim)} for t in TABLES}
    total = embedding_bytes(prepared)
    assert total == ROW_BYTES[dtype](dim) * sum(t.num_embeddings for t in TABLES)
    # The payload fits the TBE's real allocation, which only adds < 128 bytes of alignment per table.
    allocated = sum(k.weights_host.numel() for m in prepared.modules() if isinstance(m, QuantEmbeddingBagCollection) for k in m._emb_modules)
    assert total <= allocated < total + 128 * len(TABLES)


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_every_table_is_quantized(name):
    """A backend that silently left a table in fp32 fails here."""
    prepared = prepare(name, model_with_dim(8), mlp="int8") if name != "fp16_tbe" else prepare(name, model_with_dim(8))
    storage = table_storage(prepared)
    assert set(storage) == {t.name for t in TABLES}
    assert {t: s["dtype"] for t, s in storage.items()} == {t.name: QUANTIZED[name] for t in TABLES}
    assert not any(type(m) is EmbeddingBagCollection for m in prepared.modules())


def trap(model, **_):
    """The known trap: quantize_dynamic given the EBC mapping but no qconfig spec for the EBC."""
    with torch_ao_calls():
        return torch.quantization.quantize_dynamic(model, mapping={EmbeddingBagCollection: QuantEmbeddingBagCollection}, inplace=True)


def test_check_catches_quantize_dynamic_without_qconfig_spec():
    model = trap(copy.deepcopy(model_with_dim(8)))
    assert {s["dtype"] for s in table_storage(model).values()} == {"fp32"}  # silently unquantized
    with pytest.raises(RuntimeError, match="not stored as asked"):
        tbe.check_tables(model, {t.name: "int8" for t in TABLES})


def test_backend_fails_loudly_when_quantization_is_skipped(monkeypatch):
    monkeypatch.setattr(tbe, "quantize_inference_model", trap)
    with pytest.raises(RuntimeError, match="not stored as asked"):
        prepare("int8_tbe", model_with_dim(8))


def test_storage_after_forward_and_mixed_types():
    prepared = prepare("uint4", model_with_dim(8), per_table={TABLES[1].name: "int8"})
    batch = random_batch(TABLES, 4)
    prepared(batch.dense, batch.sparse)
    storage = table_storage(prepared)
    assert storage[TABLES[1].name] == {"dtype": "int8", "rows": TABLES[1].num_embeddings, "row_bytes": 12}
    assert storage[TABLES[0].name]["dtype"] == storage[TABLES[2].name]["dtype"] == "int4"
