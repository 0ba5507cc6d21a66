"""The dense layers through torchao (`backend.mlp_engine=torchao`): torchao's tensor subclasses in
place of the weights, int8 x int8 products (not dequantize-then-fp32) in the operators one call runs,
scores close to fp32, bytes counted by what the subclasses hold, and the config's choices checked."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from bench import registry
from bench.backends.tbe import check_config
from bench.backends.torchao_mlp import quantized_weight_types
from bench.config import ModelConfig
from bench.errors import UserError
from bench.measure.operators import operators
from bench.measure.memory import model_bytes
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_tables

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=4, rows=60, pooling=2)
# layer widths torchao's int4 CPU packing takes (input a multiple of 32, output of 16) next to ones it does not
MODEL = ModelConfig(name="tiny", embedding_dim=32, dense_arch_layer_sizes=[64, 32], over_arch_layer_sizes=[64, 1])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(MODEL, TABLES, num_dense=13).eval()


@pytest.fixture(scope="module")
def batch():
    return random_batch(TABLES, 256, seed=9)


def prepare(model, **overrides):
    entry = registry.get("backend", "int8_tbe")
    backend = entry.factory(dataclasses.replace(entry.config(), **overrides))
    return backend, backend.prepare(model, [random_batch(TABLES, 128, seed=1)], CPU)


def test_int8_runs_int_mm_and_no_fp32_product(model, batch):
    backend, prepared = prepare(model, mlp_engine="torchao", mlp_output="int8")  # every layer, the output layer too
    types = quantized_weight_types(prepared)
    assert types and all(t == "Int8Tensor" for t in types.values()), types
    default = quantized_weight_types(prepare(model, mlp_engine="torchao")[1])
    assert default == {**types, "over_arch.model.1": "Parameter"}  # by default the 1-wide output layer stays fp32
    ops = operators(prepared, batch.model_inputs())
    assert "aten::_int_mm" in ops.gemm and not ({"aten::mm", "aten::addmm", "aten::linear"} & ops.gemm), ops.gemm
    assert ops.as_metrics(256)["dense_int8_fraction"] > 0.5  # the interaction's bmm is the only fp32 product
    with torch.inference_mode():
        fp32 = model(*batch.model_inputs())
        got = prepared(*batch.model_inputs())
    assert got.shape == fp32.shape and torch.allclose(got, fp32, atol=0.05)
    assert backend.emulation() is None  # fake_quant emulates torch.ao's schemes, not torchao's


def test_int4_weight_only_quantizes_the_layers_that_fit(model, batch):
    _, prepared = prepare(model, mlp_engine="torchao", mlp="int4")
    types = quantized_weight_types(prepared)
    assert "Int4OpaqueTensor" in types.values() and "Parameter" in types.values(), types  # 13- and 1-wide layers stay fp32
    ops = operators(prepared, batch.model_inputs())
    assert "aten::_weight_int4pack_mm_for_cpu" in ops.gemm
    with torch.inference_mode():
        assert torch.allclose(prepared(*batch.model_inputs()), model(*batch.model_inputs()), atol=0.1)


def test_model_bytes_counts_what_the_quantized_weights_hold(model):
    _, fp32_mlp = prepare(model, mlp="fp32")
    _, int8_mlp = prepare(model, mlp_engine="torchao")
    linear = sum(m.weight.numel() for m in fp32_mlp.modules() if isinstance(m, nn.Linear))
    saved = model_bytes(fp32_mlp) - model_bytes(int8_mlp)
    assert 0.6 * 3 * linear < saved < 3 * linear  # 4 -> 1 byte per weight, less the scales


@pytest.mark.parametrize("overrides, message", [
    ({"mlp": "int4"}, "backend.mlp='int4' needs backend.mlp_engine=torchao"),
    ({"mlp_engine": "torchao", "mlp_mode": "static"}, "the torchao engine quantizes activations per call only"),
    ({"mlp_engine": "tensorrt"}, "backend.mlp_engine='tensorrt' is not one of torch_ao, torchao"),
    ({"mlp_engine": "torchao", "mlp": "int2"}, "backend.mlp='int2' is not one of fp32, fp16, bf16, int8, int4"),
])
def test_bad_choices_are_user_errors(overrides, message):
    cfg = dataclasses.replace(registry.get("backend", "int8_tbe").config(), **overrides)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_config(cfg)
