"""The dense layers' path per device: int8 (torch.ao) on CPU, fp16 (torchrec's dense lowering) on CUDA, so that no
quantized backend of the default sweep is skipped on a GPU for want of a dense path; the fp16/bf16 path itself and
its fake-quant twin, on CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench import registry
from bench.backends.half_mlp import dense_submodules, emulate_half, to_half
from bench.config import DENSE_PATHS, dense_path
from bench.config.compose import compose
from bench.metrics import DENSE_PATH
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.support.backends import make_backend as make

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a CUDA device object needs no GPU: only its type is read
TABLES = tiny_tables(num_tables=4, rows=60, pooling=3)
QUANTIZED = ("int8_tbe", "uint4", "int2_tbe")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()


@pytest.fixture(scope="module")
def data():
    return [random_batch(TABLES, 128, seed=s) for s in (1, 2)], random_batch(TABLES, 256, seed=9)


def test_the_default_dense_path_follows_the_device():
    assert dense_path("cpu") == "int8" and dense_path("cuda") == "fp16"
    assert dense_path("mps") == "fp32"  # a device without a listed path keeps the fp32 layers
    assert set(DENSE_PATHS) == {"cpu", "cuda"}


@pytest.mark.parametrize("name", [*QUANTIZED, "uint4_mixed", "fake_quant"])
def test_composed_backends_take_the_device_default(name):
    assert compose([f"backend={name}", "device=cpu"]).backend.mlp == "int8"  # CPU jobs keep their identity
    assert compose([f"backend={name}", "device=cuda"]).backend.mlp == "fp16"
    assert compose([f"backend={name}", "device=cuda", "backend.mlp=fp32"]).backend.mlp == "fp32"  # the command line wins


def test_no_default_sweep_backend_is_skipped_on_cuda_for_its_dense_layers():
    skipped = {}
    for name in registry.sweep_backends():
        cfg = compose([f"backend={name}", "device=cuda"])
        reason = registry.get("backend", name).factory(cfg.backend).unsupported_reason(CUDA)
        if reason is not None:
            skipped[name] = reason
    assert not [r for r in skipped.values() if "MLP" in r or "dense" in r], skipped
    assert not set(QUANTIZED) & set(skipped), skipped


def test_the_torch_ao_int8_mlp_on_cuda_is_still_refused_with_the_way_out():
    reason = make("int8_tbe", mlp="int8").unsupported_reason(CUDA)
    assert "runs on CPU only" in reason and "cuda default (fp16)" in reason


def test_to_half_casts_the_dense_submodules_and_keeps_fp32_around_them(model, data):
    _, batch = data
    half = make("int8_tbe", mlp="fp16").prepare(model, [], CPU)
    names = [name for name, _ in dense_submodules(half)]
    assert names == ["dense_arch", "over_arch"]  # DLRM's bottom and top MLPs; the interaction stays fp32
    assert {m.weight.dtype for _, sub in dense_submodules(half) for m in sub.modules() if isinstance(m, nn.Linear)} == {torch.float16}
    out = half(batch.dense, batch.sparse)
    assert out.dtype == torch.float32
    reference = make("int8_tbe", mlp="fp32").prepare(model, [], CPU)(batch.dense, batch.sparse)
    torch.testing.assert_close(out, reference, rtol=2e-2, atol=2e-2)  # fp16 rounding of weights and activations
    assert not torch.equal(out, reference)  # the layers really ran in fp16


def test_bf16_and_the_count_of_layers(model):
    copy = build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()
    linears = sum(isinstance(m, nn.Linear) for m in copy.modules())
    assert to_half(copy, "bf16") == linears
    assert {m.weight.dtype for m in copy.modules() if isinstance(m, nn.Linear)} == {torch.bfloat16}


def test_the_fake_quant_twin_follows_the_half_dense_path(model, data):
    calibration, batch = data
    backend = make("int8_tbe", mlp="fp16")
    twin = backend.emulation()
    assert twin["mlp"] == "fp16" and twin["bits"] == 8
    emulation = dict(twin)
    twin_backend = make(emulation.pop("name"), **emulation)
    got = backend.prepare(model, calibration, CPU)(batch.dense, batch.sparse).detach()
    want = twin_backend.prepare(model, calibration, CPU)(batch.dense, batch.sparse).detach()
    # the same rounding of weights, inputs and outputs; only the fp16 GEMM's own accumulation differs
    torch.testing.assert_close(got, want, rtol=1e-2, atol=5e-3)
    assert twin_backend.job_metrics(None)[DENSE_PATH] == "fp16 emulated"


def test_emulate_half_rounds_weights_in_place():
    copy = build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()
    assert emulate_half(copy, "fp16") == sum(isinstance(m, nn.Linear) for m in copy.modules())
    w = copy.dense_arch.model._mlp[0]._linear.weight
    assert w.dtype == torch.float32 and torch.equal(w, w.half().float())


@pytest.mark.parametrize(("overrides", "text"), [
    ({"mlp": "fp16"}, "fp16 (torchrec's dense lowering)"),
    ({"mlp": "int8"}, "int8 dynamic (torch.ao)"),
    ({"mlp": "int8", "mlp_mode": "static"}, "int8 static (torch.ao)"),
    ({"mlp": "fp32"}, "fp32"),
])  # fmt: skip
def test_the_record_names_the_dense_path(overrides, text):
    assert make("uint4", **overrides).job_metrics(None) == {DENSE_PATH: text}


def test_attribution_splits_a_half_dense_delta():
    from bench.pipeline.attribution import attribute_delta
    import numpy as np

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    base = rng.normal(size=400) + labels
    asked = []

    def scores_of(cfg):
        asked.append(cfg.mlp)
        return labels, base + rng.normal(scale=0.1, size=400)

    out = attribute_delta(make("int8_tbe", mlp="fp16").cfg, labels, base, base + rng.normal(scale=0.2, size=400), scores_of)
    assert asked == ["fp32"] and "auc_delta_mlp" in out and "auc_delta_embeddings" in out


def test_the_report_names_the_dense_path_per_device():
    from bench.record import RunRecord
    from bench.report.protocol import dense_lines

    def rec(backend, device, path):
        return RunRecord(status="ok", workload="synthetic", backend=backend, device=device, batch_size=256, config={},
                         config_hash="h", env={}, metrics={DENSE_PATH: path})

    lines = dense_lines([rec("int8_tbe", "cuda", "fp16 (torchrec's dense lowering)"), rec("uint4", "cuda", "fp16 (torchrec's dense lowering)"),
                         rec("int8_tbe", "cpu", "int8 dynamic (torch.ao)"), rec("fp32", "cpu", None)])
    assert lines == ["- Dense layers (MLP): `int8_tbe` int8 dynamic (torch.ao) on cpu; `int8_tbe`, `uint4` fp16 (torchrec's dense lowering) on cuda."]
