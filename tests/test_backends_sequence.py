"""Sequence tables (a torchrec EmbeddingCollection: unpooled lookups, one row per id) through every quantized
embedding backend, on a tiny DIN-style ranker (tests/support/sequence_models.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.ao.nn.quantized.dynamic as nnqd
import yaml
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingCollection
from torchrec.quant.embedding_modules import EmbeddingCollection as QuantEmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.backends.backend import NotApplicable
from bench.backends.direct import build_tables_from_weights
from bench.backends.fake_quant import qdq_rows
from bench.backends.modules import require_table_collections, table_weights
from bench.backends.tables import embedding_bytes, table_precisions, table_storage
from bench.backends.tbe import BITS, quantize_tables
from bench.backends.twin import build_twin
from bench.tune.candidate import SwappableModel
from bench.tune.run import model_tables
from tests.support.backends import make_backend as make
from tests.support.sequence_models import ITEMS, build_ranker, sequence_batch

CPU = torch.device("cpu")
# backend -> the type every table is stored as (on CPU, their schema defaults: int8 dense layers where they quantize them)
STORED = {"int8_tbe": "int8", "uint4": "int4", "int2_tbe": "int2", "fp16_tbe": "fp16", "fp32_tbe": "fp32", "fake_quant": "fp32"}
SEQUENCE_TABLES = {"t_item", "t_genre"}
ROW_BYTES = {"fp32": lambda d: 4 * d, "fp16": lambda d: 2 * d, "int8": lambda d: d + 4, "int4": lambda d: d // 2 + 4,
             "int2": lambda d: d // 4 + 4}


@pytest.fixture(scope="module")
def ranker():
    model = build_ranker(dim=32)
    return model, [sequence_batch(64, seed=s) for s in (1, 2)]


@pytest.mark.parametrize("name", sorted(STORED))
def test_every_quantized_backend_runs_the_sequence_model(name, ranker):
    model, calibration = ranker
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prepared = make(name).prepare(model, calibration, CPU)
    stored = table_precisions(prepared)
    assert {t for t, s in stored.items() if s["lookup"] == "sequence"} == SEQUENCE_TABLES
    assert {s["dtype"] for s in stored.values()} == {STORED[name]}
    if name != "fake_quant":  # the sequence tables are torchrec's quantized EmbeddingCollection, on FBGEMM's TBE
        assert type(prepared.ec) is QuantEmbeddingCollection
    for batch_size in (1, 37):
        batch = sequence_batch(batch_size, seed=batch_size)
        out = prepared(batch.dense, batch.sparse)
        assert out.shape == (batch_size, 1) and torch.isfinite(out).all()
        assert torch.equal(out, prepared(batch.dense, batch.sparse))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items()), "prepare changed the input model"


@pytest.mark.parametrize("dim", [32, 64])
def test_sequence_tables_count_in_embedding_bytes(dim):
    model = build_ranker(dim=dim)
    calibration = [sequence_batch(32, seed=1)]
    fp32 = embedding_bytes(model)
    rows = {t: s["rows"] for t, s in table_storage(model).items()}
    assert fp32 == sum(rows.values()) * 4 * dim
    for name in ("int8_tbe", "uint4", "int2_tbe", "fp16_tbe"):
        prepared = make(name).prepare(model, calibration, CPU)
        dtype = STORED[name]
        assert embedding_bytes(prepared) == sum(rows.values()) * ROW_BYTES[dtype](dim), name  # every table, sequence ones too
    int8 = embedding_bytes(make("int8_tbe").prepare(model, calibration, CPU))
    assert int8 <= 0.35 * fp32


def _dequantized(weight: torch.Tensor, dtype: str) -> torch.Tensor:
    return qdq_rows(weight.detach(), BITS[dtype])


@pytest.mark.parametrize("dtype", ["int8", "int4", "int2", "fp16", "fp32"])
def test_quantized_lookup_returns_each_ids_dequantized_row(dtype):
    """FBGEMM #4586: the CPU kernel under PoolingMode.NONE must return one row per id, never a pooled bag: each
    row of the quantized EmbeddingCollection's lookup equals that id's fp32 row quantize-dequantized."""
    torch.manual_seed(3)
    ec = EmbeddingCollection([EmbeddingConfig(name="t_item", embedding_dim=32, num_embeddings=ITEMS, feature_names=["history"])],
                             device=CPU)
    holder = torch.nn.Module()
    holder.ec = copy.deepcopy(ec)
    quantize_tables(holder, {"t_item": dtype}, CPU)
    assert type(holder.ec) is QuantEmbeddingCollection
    ids = torch.tensor([5, 5, 7, 0, 59, 5, 12, 12, 3])  # repeated ids, bags of 4, 0, 1 and 4 ids
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=["history"], values=ids, lengths=torch.tensor([4, 0, 1, 4]))
    got = holder.ec(kjt)["history"]
    assert got.values().shape == (len(ids), 32) and torch.equal(got.lengths(), torch.tensor([4, 0, 1, 4]))
    want = _dequantized(ec.embeddings["t_item"].weight, dtype)[ids]
    assert torch.allclose(got.values(), want, rtol=0, atol=1e-6)
    eager = ec(kjt)["history"].values()
    assert not torch.allclose(got.values()[:4].sum(0), got.values()[0]) or dtype == "fp32"  # not a bag sum
    if dtype == "fp32":
        assert torch.equal(got.values(), eager)


def test_per_table_overrides_reach_sequence_tables(ranker, tmp_path):
    model, calibration = ranker
    path = tmp_path / "per_table.yaml"
    path.write_text(yaml.safe_dump({"t_genre": "int2", "t_user": "fp16"}))
    backend = make("int8_tbe", per_table={"t_item": "int4"}, per_table_file=str(path))
    stored = {t: s["dtype"] for t, s in table_precisions(backend.prepare(model, calibration, CPU)).items()}
    assert stored == {"t_item": "int4", "t_genre": "int2", "t_user": "fp16", "t_city": "int8"}
    mixed = make("uint4_mixed", small_table_rows=20)  # t_genre (8 rows) and t_city (12) are small: int8
    stored = {t: s["dtype"] for t, s in table_precisions(mixed.prepare(model, calibration, CPU)).items()}
    assert stored == {"t_item": "int4", "t_genre": "int8", "t_user": "int4", "t_city": "int8"}
    with pytest.raises(Exception, match="unknown tables"):
        make("uint4", per_table={"t_nope": "int8"}).prepare(model, calibration, CPU)


@pytest.mark.parametrize("name", ["int8_tbe", "uint4", "int2_tbe"])
def test_fake_quant_twin_emulates_the_sequence_tables(name, ranker):
    """With fp32 dense layers, the fake-quant twin's scores equal the backend's: the same rows, sequence ones too."""
    model, calibration = ranker
    backend = make(name, mlp="fp32", per_table={"t_genre": "int8"})
    twin_cfg = {k: v for k, v in backend.emulation().items() if k != "name"}
    twin = make("fake_quant", **twin_cfg)
    batch = sequence_batch(50, seed=9)
    got = backend.prepare(model, calibration, CPU)(batch.dense, batch.sparse)
    want = twin.prepare(model, calibration, CPU)(batch.dense, batch.sparse)
    fp32 = model(batch.dense, batch.sparse)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, fp32, rtol=1e-5, atol=1e-5)  # the rows really are quantized


def test_attention_and_mlp_take_the_dense_path(ranker):
    model, calibration = ranker
    batch = sequence_batch(20, seed=4)
    int8 = make("int8_tbe").prepare(model, calibration, CPU)  # CPU's dense path: int8 dynamic
    assert type(int8.query) is nnqd.Linear and type(int8.key) is nnqd.Linear
    assert type(int8.mlp[2]) is torch.nn.Linear  # the output layer stays fp32 (backend.mlp_output)
    bf16 = make("int8_tbe", mlp="bf16").prepare(model, calibration, CPU)
    assert bf16.query.weight.dtype == torch.bfloat16 and bf16.mlp[0].weight.dtype == torch.bfloat16
    out = bf16(batch.dense, batch.sparse)
    assert out.dtype == torch.float32 and torch.allclose(out, model(batch.dense, batch.sparse), atol=0.05)


def test_the_gpu_build_stores_the_bytes_torchrecs_path_stores(ranker):
    """The GPU path (and a random-weights model) quantizes EmbeddingCollections' rows on the CPU with FBGEMM's op
    (bench.backends.direct); laid out on the CPU it holds the very bytes torchrec's quantize path stores."""
    model, _ = ranker
    for dtype in ("int8", "int4", "int2", "fp16", "fp32"):
        dtypes = {t: dtype for t in table_weights(model)}
        ours, theirs = copy.deepcopy(model), copy.deepcopy(model)
        build_tables_from_weights(ours, dtypes, CPU, 1)
        quantize_tables(theirs, dtypes, CPU)
        assert type(ours.ec) is QuantEmbeddingCollection
        for table in SEQUENCE_TABLES:
            a, b = ours.ec.embeddings[table].weight, theirs.ec.embeddings[table].weight
            a, b = (getattr(w, "elem", w) for w in (a, b))
            assert torch.equal(a, b), (dtype, table)


def test_a_toolkit_backend_skips_a_sequence_model_with_one_line(ranker):
    model, calibration = ranker
    with pytest.raises(NotApplicable) as exc:
        build_twin(model, calibration[0])
    assert "jagged" in str(exc.value) and "EmbeddingCollection" in str(exc.value) and "\n" not in str(exc.value)


def test_mixed_dims_in_one_collection_are_refused_with_one_line(ranker):
    model = copy.deepcopy(ranker[0])
    model.ec.embedding_configs()[1].embedding_dim = 16  # torchrec's EC refuses this when built; changed afterwards
    with pytest.raises(NotApplicable, match=r"holds tables of one dim, and ec mixes dims \[16, 32\]"):
        require_table_collections(model, "int8_tbe")


def test_tune_searches_sequence_tables_like_pooled_ones(ranker):
    model, calibration = ranker
    tables = {t.name: (t.rows, t.dim) for t in model_tables(model)}
    assert tables == {"t_user": (30, 32), "t_city": (12, 32), "t_item": (ITEMS, 32), "t_genre": (8, 32)}
    swappable = SwappableModel(model, calibration, CPU)
    assert set(swappable.tables) == set(tables)
    swappable.set_tables({"t_item": "int4"})
    weights = table_weights(swappable.module)
    assert torch.equal(weights["t_item"][0], qdq_rows(model.ec.embeddings["t_item"].weight.detach(), 4))
    assert torch.equal(weights["t_genre"][0], model.ec.embeddings["t_genre"].weight)
    batch = sequence_batch(30, seed=6)
    dynamic = swappable.dense["int8 dynamic"]
    assert dynamic.ec is swappable.module.ec  # the dense variants share the swapped tables
    assert torch.isfinite(dynamic(batch.dense, batch.sparse)).all()


def test_sharding_refuses_a_sequence_model_with_one_line(ranker):
    """torchrec #1255 (sharded EmbeddingCollection on CPU): the engine's sharders are the EBCs', so a model with an
    EmbeddingCollection is refused (a `skipped` record) instead of being measured with that collection whole."""
    from types import SimpleNamespace

    from bench.distributed.engine import sequence_refusal
    from bench.models.dlrm import build_dlrm
    from bench.workloads.random_batch import tiny_model_config, tiny_tables

    cfg = SimpleNamespace(sharding=SimpleNamespace(name="table_wise"))
    model, calibration = ranker
    for candidate in (model, make("int8_tbe").prepare(model, calibration, CPU)):  # eager EC and quantized EC alike
        line = sequence_refusal(candidate, cfg)
        assert line is not None and "\n" not in line and "ec is an EmbeddingCollection" in line and "sharding=none" in line
    assert sequence_refusal(build_dlrm(tiny_model_config(8), tiny_tables(), num_dense=13), cfg) is None


@pytest.mark.slow
def test_a_din_ranker_handed_in_as_a_custom_model_runs_through_the_quantized_backends(tmp_path):
    """The held-out check: a DIN-style ranker (target attention over an EmbeddingCollection history) given with
    `model=custom` on the example click log gets ok rows from int8_tbe and uint4, its sequence table counted and
    named in the record, each with its fake_quant twin measured; a toolkit skips it with one line."""
    from bench.config.compose import compose
    from bench.config.quick import TINY_OVERRIDES
    from bench.runner import Session, run_one
    from examples.make_parquet import write_clicks

    data = write_clicks(tmp_path / "clicks.parquet", rows=6000, seed=1)
    base = ["model=custom", "model.factory=tests.support.sequence_models:history_attention", "workload=parquet",
            f"workload.path={data}", f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", *TINY_OVERRIDES,
            "model.train.samples=4096", "model.train.batch_size=512", "batch_size=256", "eval_batch_size=1024"]
    session = Session()
    records = {b: run_one(compose([*base, f"backend={b}"]), session) for b in ("fp32", "int8_tbe", "uint4")}
    for backend, record in records.items():
        assert record.status == "ok", (backend, record.error)
        assert record.metrics["table_precisions"]["s_history"]["lookup"] == "sequence"
    assert records["int8_tbe"].metrics["table_precisions"]["s_history"]["dtype"] == "int8"
    assert records["uint4"].metrics["table_precisions"]["s_history"]["dtype"] == "int4"
    fp32_bytes = records["fp32"].metrics["embedding_bytes"]
    assert records["uint4"].metrics["embedding_bytes"] < records["int8_tbe"].metrics["embedding_bytes"] < 0.4 * fp32_bytes
    for backend in ("int8_tbe", "uint4"):  # the fake_quant twin emulates the sequence table too
        assert records[backend].metrics["fidelity_twin"] and abs(records[backend].metrics["fidelity_gap"]) < 0.01
    skipped = run_one(compose([*base, "backend=compiled_fp32"]), session)
    assert skipped.status == "skipped" and "jagged" in skipped.error and "\n" not in skipped.error


def test_random_weights_sequence_tables_are_built_straight_into_their_stored_rows():
    """A random-weights model (tables on the meta device) gets its EmbeddingCollection built directly, its rows the
    seeded random rows every backend draws (bench.models.random_weights), stored as FBGEMM stores them."""
    from bench.backends.direct import stored_rows
    from bench.models.random_weights import table_chunks

    model = build_ranker(dim=16)
    meta = torch.device("meta")
    model.ec = EmbeddingCollection([EmbeddingConfig(name="t_item", embedding_dim=16, num_embeddings=ITEMS, feature_names=["history", "candidate"]),
                                    EmbeddingConfig(name="t_genre", embedding_dim=16, num_embeddings=8, feature_names=["history_genre"])], device=meta)
    model.random_weights_seed = 7
    prepared = make("int8_tbe").prepare(model, [sequence_batch(32, seed=1)], CPU)
    assert type(prepared.ec) is QuantEmbeddingCollection
    for table, rows in (("t_item", ITEMS), ("t_genre", 8)):
        want = torch.cat([stored_rows(chunk, "int8") for _, chunk in table_chunks(7, table, rows, 16)])
        assert torch.equal(prepared.ec.embeddings[table].weight, want)
    batch = sequence_batch(9, seed=2)
    assert torch.isfinite(prepared(batch.dense, batch.sparse)).all()


def test_random_weights_sequence_tables_get_fp32_rows_for_the_eager_backends():
    """fp32 (eager) on a random-weights sequence model: its meta-device EmbeddingCollection gets the seeded rows."""
    from bench.models.random_weights import table_chunks

    model = build_ranker(dim=16)
    model.ec = EmbeddingCollection([EmbeddingConfig(name="t_item", embedding_dim=16, num_embeddings=ITEMS, feature_names=["history", "candidate"]),
                                    EmbeddingConfig(name="t_genre", embedding_dim=16, num_embeddings=8, feature_names=["history_genre"])],
                                   device=torch.device("meta"))
    model.random_weights_seed = 7
    prepared = make("fp32").prepare(model, [sequence_batch(32, seed=1)], CPU)
    want = torch.cat([chunk for _, chunk in table_chunks(7, "t_item", ITEMS, 16)])
    assert torch.equal(prepared.ec.embeddings["t_item"].weight, want)
    batch = sequence_batch(9, seed=2)
    assert torch.isfinite(prepared(batch.dense, batch.sparse)).all()
