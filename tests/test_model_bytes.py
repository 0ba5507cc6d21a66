"""model_bytes is exact for every registered backend: checked against a count by hand.

The hand count takes the big pieces from their definitions, not from the code under test:
- tables: rows x dim x 4 for fp32 eager tables; for an FBGEMM table-batched kernel, each table's
  rows x row bytes (fp32 4D, fp16 2D, int8 D+4, int4 D/2+4, int2 D/4+4), rounded up to 128 bytes
  as FBGEMM aligns tables in its one buffer; torch's rowwise-quantized bags (ao_embeddingbag): int8 D+8
  (fp32 scale and bias), int4 D/2+4 (fp16); the exported twin's gathers (inc_int8_static, compiled_fp32): the tables
  stacked, fp32 rows plus one zero row;
- Linear layers: (in x out + out) x 4 in fp32 (weights, bias, including fake-quant Linear and the fp32
  weights an exported int8 graph keeps beside its quantize/dequantize pairs); an int8
  dynamic Linear: in x out bytes, its fp32 bias, and a float64 scale and an int64 zero point per
  output channel;
- everything else the model holds is small bookkeeping (index buffers, observers' statistics, the
  TBE's offsets), counted from the registered plain buffers.
"""

import re

import pytest
import torch
import torch.ao.nn.intrinsic.quantized.dynamic as nniqd
import torch.ao.nn.quantized.dynamic as nnqd
from torch import nn

from bench import registry
from bench.backends.backend import NotApplicable
from bench.backends.inc_int8_static import CompiledTwin
from bench.backends.rowwise import RowwiseEmbeddingBag
from bench.backends.toolkit import ToolkitBackend
from bench.backends.tables import table_storage
from bench.measure.memory import model_bytes
from bench.models.dlrm import build_dlrm
from bench.pipeline.job import backend_config
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables

DIM = 16
ROW_BYTES = {"fp32": 4 * DIM, "fp16": 2 * DIM, "int8": DIM + 4, "int4": DIM // 2 + 4, "int2": DIM // 4 + 4}
ROWWISE_ROW_BYTES = {"int8": DIM + 8, "int4": DIM // 2 + 4}  # torch's own rowwise ops (bench.backends.rowwise)
# a TBE table's buffer (a view into the kernel's weights), or a rowwise bag's packed rows: counted as tables
TABLE_WEIGHT = re.compile(r"embedding_bags\.[^.]+\.(weight|packed)$")
TABLES = tiny_tables(4, 1000)  # 1000, 1007, 1014, 1021 rows: no table is a multiple of 128 bytes in every type


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def hand_count(prepared: nn.Module, linear_shapes: list[tuple[int, int]]) -> int:
    storage = table_storage(prepared)
    tbe = any(m.__class__.__name__ == "IntNBitTableBatchedEmbeddingBagsCodegen" for m in prepared.modules())
    rowwise = any(isinstance(m, RowwiseEmbeddingBag) for m in prepared.modules())
    exported = isinstance(prepared, CompiledTwin)
    tables = 0
    if exported:  # the deploy export: the tables of one dim stacked, one zero row after them (the padding id)
        (dtype,) = {s["dtype"] for s in storage.values()}
        assert list(storage) == ["+".join(t.name for t in TABLES)]
        tables = (sum(t.num_embeddings for t in TABLES) + 1) * ROW_BYTES[dtype]
    for t in TABLES if not exported else ():
        dtype = storage[t.name]["dtype"]
        payload = t.num_embeddings * (ROWWISE_ROW_BYTES if rowwise else ROW_BYTES)[dtype]
        tables += round_up(payload, 128) if tbe else payload
    # each layer as the backend left it: int8 (weights, fp32 bias, per-channel scale and zero point) or fp32
    # (the output layer stays fp32 by default: backend.mlp_output)
    kinds = [isinstance(m, (nnqd.Linear, nniqd.LinearReLU)) for m in prepared.modules() if isinstance(m, (nn.Linear, nnqd.Linear, nniqd.LinearReLU))]
    if exported:  # a graph, not modules: every Linear keeps its fp32 weight and bias as graph attributes
        kinds = [False] * len(linear_shapes)
    assert len(kinds) == len(linear_shapes)
    linears = sum(i * o + o * 4 + o * 16 if int8 else (i * o + o) * 4 for (i, o), int8 in zip(linear_shapes, kinds))
    bookkeeping = sum(b.untyped_storage().nbytes() for name, b in prepared.named_buffers() if not TABLE_WEIGHT.search(name))
    return tables + linears + bookkeeping


@pytest.fixture(scope="module")
def fp32_model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(DIM), TABLES, 13).eval()


# ps_redis keeps its tables in Redis and only a cache of rows in the model: the hand count of whole
# tables does not describe it (tests/test_ps_redis.py checks what it stores). A toolkit backend that runs in
# its toolkit's own runtime holds that runtime's graph, not torch modules (tests/test_toolkits.py checks them);
# the toolkit backends that stay in torch (ao_embeddingbag, inc_int8_static, quark_w8a8) are counted here.
IN_MEMORY_BACKENDS = [n for n, e in registry.entries("backend").items() if n != "ps_redis" and not issubclass(e.factory, ToolkitBackend)]


@pytest.mark.parametrize("name", IN_MEMORY_BACKENDS)
def test_model_bytes_matches_a_hand_count(fp32_model, name):
    linear_shapes = [(m.in_features, m.out_features) for m in fp32_model.modules() if isinstance(m, nn.Linear)]
    backend = registry.get("backend", name).factory(backend_config({"name": name}))
    try:
        prepared = backend.prepare(fp32_model, [random_batch(TABLES, 64)], torch.device("cpu"))
    except NotApplicable as exc:  # a toolkit whose extra is not installed here
        if "pip install" not in str(exc):
            raise
        pytest.skip(str(exc))
    assert model_bytes(prepared) == hand_count(prepared, linear_shapes)


def test_sub_byte_tables_are_not_counted_at_element_size():
    """The bug this replaces: INT2/INT4 tables counted as if each packed element took a byte (int2_tbe's model
    bytes equalled fp32's)."""
    torch.manual_seed(0)
    model = build_dlrm(tiny_model_config(DIM), TABLES, 13).eval()
    fp32 = model_bytes(model)
    int2 = registry.get("backend", "int2_tbe").factory(backend_config({"name": "int2_tbe"})).prepare(
        model, [random_batch(TABLES, 64)], torch.device("cpu"))  # a calibration batch: backend.mlp_wide reads the input ranges
    assert model_bytes(int2) < fp32 / 5
