"""`backend.row_range`: an int4/int2 table row's range, min-max (torchrec's quantize path) or torch's greedy search."""

from __future__ import annotations

import pytest
import torch

from bench.backends import direct
from bench.backends.direct import fused_rows, stored_rows
from bench.backends.modules import table_weights
from bench.config.identity import job_identity
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.conftest import run_bench
from tests.support.backends import make_backend
from tests.support.stored_tables import stored_tables

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=3, rows=300, pooling=3)


def rows_with_outliers(n=400, dim=32):
    torch.manual_seed(1)
    rows = torch.randn(n, dim)
    rows[torch.arange(n), torch.randint(dim, (n,))] *= 6  # one far value a row: min-max spends its levels on it
    return rows


def decoded(fused, bits):
    return torch.ops.fbgemm.FusedNBitRowwiseQuantizedSBHalfToFloat(fused, bits)


@pytest.mark.parametrize("bits", [4, 2])
def test_greedy_rows_round_trip_closer_than_min_max(bits):
    rows = rows_with_outliers()
    greedy, minmax = fused_rows(rows, bits, "greedy"), fused_rows(rows, bits, "minmax")
    assert greedy.shape == minmax.shape  # the same fused layout, read by FBGEMM's own dequantize op
    err_greedy = ((decoded(greedy, bits) - rows) ** 2).sum(1)
    err_minmax = ((decoded(minmax, bits) - rows) ** 2).sum(1)
    assert bool((err_greedy <= err_minmax * (1 + 1e-3) + 1e-6).all())  # the search starts at min-max and keeps its best
    assert float(err_greedy.sum()) < 0.9 * float(err_minmax.sum())


def test_int8_rows_are_min_max_whatever_the_range():
    rows = rows_with_outliers()
    assert torch.equal(fused_rows(rows, 8, "greedy"), fused_rows(rows, 8, "minmax"))


def test_greedy_rows_in_chunks_are_one_call_s(monkeypatch):
    rows = rows_with_outliers(n=50)
    monkeypatch.setattr(direct, "GREEDY_CHUNK_ROWS", 7)  # eight chunks over the thread pool
    want = torch.ops.quantized.embedding_bag_4bit_prepack(rows, optimized_qparams=True)
    assert torch.equal(fused_rows(rows, 4, "greedy"), want)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()


def test_uint4_stores_each_table_s_greedy_rows_and_says_so(model):
    backend = make_backend("uint4", mlp="fp32")
    assert backend.cfg.row_range == "greedy"  # the default of the sub-byte backends
    prepared = backend.prepare(model, [], CPU)
    stored = stored_tables(prepared)
    for name, (weight, _) in table_weights(model).items():
        assert torch.equal(stored[name], stored_rows(weight.detach(), "int4", "greedy")), name
    assert backend.job_metrics(prepared)["row_range"] == "greedy (t_cat_0, t_cat_1, t_cat_2)"

    minmax = make_backend("uint4", mlp="fp32", row_range="minmax")
    prepared = minmax.prepare(model, [], CPU)  # torchrec's own quantize path
    stored = stored_tables(prepared)
    for name, (weight, _) in table_weights(model).items():
        assert torch.equal(stored[name], stored_rows(weight.detach(), "int4")), name
    assert "row_range" not in minmax.job_metrics(prepared)


def test_the_fake_quant_twin_takes_the_same_range(model):
    backend = make_backend("int2_tbe", mlp="fp32")
    twin = make_backend("fake_quant", **{k: v for k, v in backend.emulation().items() if k != "name"})
    assert twin.cfg.row_range == "greedy"
    batch = random_batch(TABLES, 64)
    prepared, emulated = backend.prepare(model, [], CPU), twin.prepare(model, [], CPU)
    with torch.inference_mode():
        got, want = prepared(*batch.model_inputs()), emulated(*batch.model_inputs())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_identity_keeps_min_max_jobs_and_drops_the_range_of_random_rows():
    base = {"model": {"weights": "trained"}, "backend": {"name": "uint4"}}
    assert job_identity({**base, "backend": {"name": "uint4", "row_range": "minmax"}}) == base
    assert job_identity({**base, "backend": {"name": "uint4", "row_range": "greedy"}}) != base
    random = {"model": {"weights": "random"}, "backend": {"name": "uint4"}}
    assert job_identity({**random, "backend": {"name": "uint4", "row_range": "greedy"}}) == random


@pytest.mark.slow
def test_a_bad_range_is_one_line_and_exit_2(tmp_path):
    result = run_bench("backend=uint4", "backend.row_range=optimal", f"reports_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}",
                       timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr[-2000:]
    assert "backend.row_range='optimal'" in result.stderr or "backend.row_range=optimal" in result.stderr
    assert not (tmp_path / "r").exists()


def test_split_scale_bias_modules_hold_the_same_greedy_rows(model):
    """A sharded job quantizes with torchrec's split scale/bias state dict (its codes and its fp16 scale and bias as
    separate views of the kernel's buffer): the greedy rows written through those views score as the whole rows do."""
    from bench.distributed.engine import split_scale_bias

    backend = make_backend("uint4", mlp="fp32")
    whole = backend.prepare(model, [], CPU)
    with split_scale_bias(model, True):
        split = backend.prepare(model, [], CPU)
    holder = split.sparse_arch.embedding_bag_collection.embedding_bags["t_cat_0"]
    assert hasattr(holder, "weight_qscale")  # the split form was built
    minmax = make_backend("uint4", mlp="fp32", row_range="minmax").prepare(model, [], CPU)
    batch = random_batch(TABLES, 64)
    with torch.inference_mode():
        got, want, other = (m(*batch.model_inputs()) for m in (split, whole, minmax))
    assert torch.equal(got, want) and not torch.equal(got, other)
