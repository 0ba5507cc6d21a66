"""The output layer of a quantized MLP stays fp32 by default (`backend.mlp_output`), in the int8 backends and
their fake-quant twin alike, and the key keeps the identity of the jobs it does not change."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from bench import registry
from bench.backends import linear
from bench.config.compose import compose
from bench.models.dlrm import build_dlrm
from bench.runner import job_hash
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=4, rows=60, pooling=3)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()


def prepared(model, name, **overrides):
    entry = registry.get("backend", name)
    backend = entry.factory(dataclasses.replace(entry.config(), **overrides))
    return backend.prepare(model, [random_batch(TABLES, 64, seed=1)], CPU)


@pytest.mark.parametrize("name", ["int8_tbe", "uint4", "fake_quant"])
def test_the_output_layer_stays_fp32_by_default_and_follows_the_rest_with_mlp_output_int8(model, name):
    layers = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    output = [n for n in layers if model.get_submodule(n).out_features == 1]
    default, legacy = prepared(model, name), prepared(model, name, mlp_output="int8")
    assert len(output) == 1 and len(layers) > 3
    assert type(default.get_submodule(output[0])) is nn.Linear
    assert type(legacy.get_submodule(output[0])) is not nn.Linear
    for n in (n for n in layers if n not in output):  # every other layer quantized, as before
        assert type(default.get_submodule(n)) is type(legacy.get_submodule(n)) is not nn.Linear, n


def test_a_bad_mlp_output_is_one_line():
    with pytest.raises(Exception, match=r"backend.mlp_output='int4' is not one of fp32, int8"):
        linear.quantized_slots(nn.Sequential(nn.Linear(2, 1)), "int4")


def resolved(*overrides):
    return dataclasses.asdict(compose(["+preset=tiny", *overrides]))


def without(config: dict, group: str, key: str) -> dict:
    return {**config, group: {k: v for k, v in config[group].items() if k != key}}


@pytest.mark.parametrize("backend", ["fp32", "fp32_tbe", "fp16_tbe"])
def test_jobs_the_key_does_not_change_keep_their_identity(backend):
    new = resolved(f"backend={backend}")
    old = without(new, "backend", "mlp_output") if "mlp_output" in new["backend"] else new
    assert job_hash(new) == job_hash(old)


def test_an_int8_mlp_job_has_a_new_identity_unless_it_asks_for_the_old_scheme():
    default, legacy = resolved("backend=int8_tbe"), resolved("backend=int8_tbe", "backend.mlp_output=int8")
    old_record = without(legacy, "backend", "mlp_output")  # a record stored before the key existed
    assert job_hash(legacy) == job_hash(old_record)
    assert job_hash(default) != job_hash(old_record)


@pytest.mark.parametrize("backend", ["onnxruntime_fp32", "openvino_fp32", "openvino_w4"])
def test_toolkits_whose_score_layer_never_changes_have_no_output_layer_key(backend):
    """The fp32 runtimes quantize nothing, and openvino_w4 always kept its score layer fp32: no `backend.output_layer`,
    so the key leaves their identity alone."""
    new = resolved(f"backend={backend}")
    assert "output_layer" not in new["backend"]


@pytest.mark.parametrize("backend", ["onnxruntime_int8_dynamic", "onnxruntime_int8_static", "onnxruntime_w4", "openvino_int8",
                                     "openvino_w8", "inc_int8_static"])
def test_a_quantizing_toolkit_job_has_a_new_identity_unless_it_asks_for_the_old_score_layer(backend):
    """Before `backend.output_layer` every quantizing toolkit quantized the score layer with the rest (int8)."""
    default, legacy = resolved(f"backend={backend}"), resolved(f"backend={backend}", "backend.output_layer=int8")
    old_record = without(legacy, "backend", "output_layer")
    assert default["backend"]["output_layer"] == "fp32"
    assert job_hash(legacy) == job_hash(old_record)
    assert job_hash(default) != job_hash(old_record)


@pytest.mark.parametrize("backend", ["onnxruntime_w4", "openvino_w4"])
def test_an_int4_toolkit_job_keeps_its_identity_unless_it_asks_for_zero_points(backend):
    """Before `backend.symmetric` both int4 toolkits quantized symmetrically (no zero point), still the default."""
    default, zero_points = resolved(f"backend={backend}"), resolved(f"backend={backend}", "backend.symmetric=false")
    old_record = without(default, "backend", "symmetric")
    assert default["backend"]["symmetric"] is True
    assert job_hash(default) == job_hash(old_record) and job_hash(zero_points) != job_hash(old_record)
