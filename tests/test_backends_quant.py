"""Quantized backends beyond the contract: fake_quant against its integer twins, per-table overrides,
Linear+ReLU fusion, and the torch.ao notice shown once.

Tolerances of fake_quant against the integer backend it emulates (`emulation()`):
- embeddings only (mlp=fp32): the logits are bit-identical here; asserted at rtol=1e-5, atol=1e-6. Both
  dequantize the same FBGEMM rows to the same fp32 values; only the order of the fp32 adds may differ.
- dynamic int8 MLP: atol=1e-5. The fused fake-quant takes each batch's min/max as the int8 kernel does;
  int32 accumulation against fp32 accumulation of the same products leaves ~1e-8 here.
- static int8 MLP: at least 97% of logits within 1e-5 (here 99%+ are), and the mean gap under 10% of
  the mean int8-vs-fp32 error (here about 2%). Scales and zero points are identical, but the int8 model
  rounds each layer's int32 result to its output grid where the twin rounds an fp32 value one ulp
  away, so a value on a rounding tie now and then lands one step apart; a flip in an early layer is
  amplified by the layers after it, so no tight bound on the largest gap holds (seen: up to about the
  size of the quantization error itself, on 1 logit in 128).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from bench.backends import ao_notice, linear
from bench.backends.fake_quant import qdq_rows
from bench.backends.tables import table_storage
from bench.errors import UserError
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.support.backends import make_backend as make

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=4, rows=60, pooling=3)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()


@pytest.fixture(scope="module")
def data():
    calibration = [random_batch(TABLES, 128, seed=s) for s in (1, 2, 3)]
    return calibration, random_batch(TABLES, 256, seed=9)


def twin_logits(name, model, data, **overrides):
    calibration, batch = data
    backend = make(name, **overrides)
    emulation = dict(backend.emulation())
    twin = make(emulation.pop("name"), **emulation)
    got = backend.prepare(model, calibration, CPU)(batch.dense, batch.sparse).detach()
    want = twin.prepare(model, calibration, CPU)(batch.dense, batch.sparse).detach()
    return got, want, backend


@pytest.mark.parametrize("name", ["int8_tbe", "uint4", "int2_tbe", "fp16_tbe"])
def test_fake_quant_embeddings_match_integer_backend(name, model, data):
    got, want, _ = twin_logits(name, model, data, mlp="fp32")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["int8_tbe", "uint4"])
def test_fake_quant_matches_dynamic_int8_mlp(name, model, data):
    got, want, _ = twin_logits(name, model, data, mlp="int8", mlp_mode="dynamic")
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["int8_tbe", "int2_tbe"])
def test_fake_quant_matches_static_int8_mlp(name, model, data):
    calibration, batch = data
    got, want, backend = twin_logits(name, model, data, mlp="int8", mlp_mode="static")
    gap = (got - want).abs()
    quantization_error = (got - model(batch.dense, batch.sparse).detach()).abs()
    assert (gap <= 1e-5).float().mean() >= 0.97, "most logits must be identical"
    assert gap.mean() < 0.1 * quantization_error.mean(), "the twin must emulate the int8 model, not the fp32 one"


def test_static_twin_has_the_int8_scales(model, data):
    calibration, _ = data
    int8 = make("int8_tbe", mlp_mode="static").prepare(model, calibration, CPU)
    twin = make("fake_quant", activations="static").prepare(model, calibration, CPU)
    units = [m for m in int8.modules() if isinstance(m, linear.StaticInt8Unit)]
    fakes = [m for m in twin.modules() if isinstance(m, linear.FakeQuantUnit)]
    assert len(units) == len(fakes) > 0
    for unit, fake in zip(units, fakes):
        in_scale, in_zp = fake.input_fq.calculate_qparams()
        out_scale, out_zp = fake.output_fq.calculate_qparams()
        assert (float(unit.quant.scale), int(unit.quant.zero_point)) == pytest.approx((float(in_scale), int(in_zp)), rel=1e-6)
        assert (float(unit.unit.scale), int(unit.unit.zero_point)) == pytest.approx((float(out_scale), int(out_zp)), rel=1e-6)
        weight = unit.unit.weight()
        torch.testing.assert_close(weight.q_per_channel_scales().float(), fake.unit.weight_fake_quant.scale.float())


@pytest.mark.parametrize("activations", ["static", "dynamic"])
def test_fake_quant_weights_quantized_once_as_in_every_call(model, data, activations):
    """The twin stores each weight fake-quantized once (its weight fake-quant then off): bit for bit what
    quantizing the constant weight in every call gives, which the twin did before."""
    calibration, batch = data
    twin = make("fake_quant", activations=activations).prepare(model, calibration, CPU)
    fakes = [m for m in twin.modules() if isinstance(m, linear.FakeQuantUnit)]
    assert fakes
    with torch.inference_mode():
        baked = twin(batch.dense, batch.sparse)
        for fake in fakes:
            fq = fake.unit.weight_fake_quant
            assert not bool(fq.fake_quant_enabled)
            fq.enable_fake_quant(True)  # the per-call form: the stored weight quantized again in each call
        per_call = twin(batch.dense, batch.sparse)
    torch.testing.assert_close(baked, per_call, rtol=0, atol=0)
    linears = {n: m.weight.detach() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    for name, fake in ((n, m) for n, m in twin.named_modules() if isinstance(m, linear.FakeQuantUnit)):
        fq = fake.unit.weight_fake_quant
        original = linears.get(name, linears.get(f"{name}.0"))  # a Linear fused with its ReLU sits at .0
        want = torch.fake_quantize_per_channel_affine(original, fq.scale, fq.zero_point, 0, -128, 127)
        torch.testing.assert_close(fake.unit.weight.detach(), want, rtol=0, atol=0)


def test_fake_quant_rows_equal_stored_tbe_rows(model):
    ebc = [m for m in model.modules() if type(m).__name__ == "EmbeddingBagCollection"][0]
    for bits, dtype in [(8, "int8"), (4, "int4"), (2, "int2")]:
        prepared = make("int8_tbe", mlp="fp32", per_table={t.name: dtype for t in TABLES}).prepare(model, [], CPU)
        qebc = [m for m in prepared.modules() if type(m).__name__ == "EmbeddingBagCollection"][0]
        name = TABLES[0].name
        stored = qebc.embedding_bags[name].weight.view(torch.uint8)
        scale, bias = stored[:, 0:2].contiguous().view(torch.float16).float(), stored[:, 2:4].contiguous().view(torch.float16).float()
        packed = stored[:, 4:].long()
        per_byte = 8 // bits
        j = torch.arange(16)
        q = (packed[:, j // per_byte] >> ((j % per_byte) * bits)) & ((1 << bits) - 1)
        torch.testing.assert_close(qdq_rows(ebc.embedding_bags[name].weight, bits), q * scale + bias, rtol=0, atol=1e-6)


def test_uint4_per_table_override(model, data):
    calibration, batch = data
    keep = TABLES[2].name
    backend = make("uint4", per_table={keep: "int8"})
    prepared = backend.prepare(model, calibration, CPU)
    storage = table_storage(prepared)
    assert storage[keep]["dtype"] == "int8" and storage[keep]["row_bytes"] == 16 + 4
    assert all(storage[t.name] == {"dtype": "int4", "rows": t.num_embeddings, "row_bytes": 8 + 4} for t in TABLES if t.name != keep)
    assert backend.emulation()["per_table"] == {keep: 8}
    assert torch.isfinite(prepared(batch.dense, batch.sparse)).all()
    # the override is honoured by the twin too: the embeddings-only logits agree
    got, want, _ = twin_logits("uint4", model, data, mlp="fp32", per_table={keep: "int8"})
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "overrides,match",
    [({"per_table": {"no_such_table": "int8"}}, "unknown tables"), ({"per_table": {TABLES[0].name: "int3"}}, "not a table weight type"), ({"mlp": "int4"}, "backend.mlp")],
)
def test_bad_config_is_a_user_error(model, overrides, match):
    with pytest.raises(UserError, match=match):
        make("uint4", **overrides).prepare(model, [], CPU)


def test_static_needs_calibration(model):
    with pytest.raises(UserError, match="calibration"):
        make("int8_tbe", mlp_mode="static").prepare(model, [], CPU)


def test_linear_relu_fusion_in_sequential_and_perceptron(model):
    import copy

    import torch.ao.nn.intrinsic as nni

    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    slots = linear.fuse_linear_relu(seq)
    assert [type(getattr(p, n)) for p, n in slots] == [nni.LinearReLU, nn.Linear]
    assert isinstance(seq[1], nn.Identity)  # the ReLU is not applied twice
    dlrm = copy.deepcopy(model)
    linears = sum(type(m) is nn.Linear for m in dlrm.modules())
    slots = linear.fuse_linear_relu(dlrm)
    fused = sum(isinstance(getattr(p, n), nni.LinearReLU) for p, n in slots)
    assert len(slots) == linears and fused == linears - 1  # every Linear but the logit layer has a ReLU


def test_torch_ao_notice_at_most_once(model, data, monkeypatch):
    monkeypatch.setattr(ao_notice, "_shown", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for mode in ("dynamic", "static", "static"):
            make("int8_tbe", mlp_mode=mode).prepare(model, data[0], CPU)
    kinds = [ao_notice.notice_kind(str(w.message)) for w in caught]
    assert kinds.count("torch.ao.quantization") == 1  # many calls, one notice
    assert kinds.count("quantized tensors") <= 1


def test_mixed_recipe_twin_matches_it(model, data):
    """uint4_mixed (INT8 below small_table_rows, INT4 above) and its fake_quant twin store the same tables."""
    rows = sorted(t.num_embeddings for t in TABLES)
    threshold = rows[len(rows) // 2]  # about half the tables small
    got, want, backend = twin_logits("uint4_mixed", model, data, mlp="fp32", small_table_rows=threshold)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    dtypes = backend.stored_table_dtypes({t.name: t.num_embeddings for t in TABLES})
    assert {dtypes[t.name] for t in TABLES if t.num_embeddings < threshold} == {"int8"}
    assert {dtypes[t.name] for t in TABLES if t.num_embeddings >= threshold} == {"int4"}
