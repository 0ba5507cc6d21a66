"""One contract, every registered backend: on a tiny DLRM, `prepare` keeps the forward signature,
scores every sample with finite logits, is deterministic, and leaves the input model alone. On a sequence
model (a torchrec EmbeddingCollection beside the EmbeddingBagCollection) every backend either runs it
the same way or skips it with one line naming why."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from bench import registry
from bench.backends.backend import NotApplicable
from bench.config.compose import compose
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.support.backends import make_backend as make
from tests.support.sequence_models import build_ranker, sequence_batch

BACKENDS = registry.names("backend")
CPU = torch.device("cpu")
INTEGER_BACKENDS = ("int8_tbe", "uint4", "int2_tbe")
# The backends that store a sequence model's EmbeddingCollection tables (the rest skip it with one line).
SEQUENCE_BACKENDS = ("fp32", "fp32_tbe", "fp16_tbe", "int8_tbe", "uint4", "uint4_mixed", "int2_tbe", "fake_quant")


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    tables = tiny_tables(pooling=2)
    model = build_dlrm(tiny_model_config(8), tables, num_dense=13).eval()
    calibration = [random_batch(tables, 64, seed=s) for s in (1, 2)]
    return tables, model, calibration


def snapshot(model: torch.nn.Module):
    return [(n, type(m)) for n, m in model.named_modules()], {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", BACKENDS)
def test_contract(name, setup):
    tables, model, calibration = setup
    modules_before, state_before = snapshot(model)
    backend = make(name)
    if registry.get("backend", name).toolkit and backend.unsupported_reason(CPU):  # its pip extra is not installed here
        pytest.skip(backend.unsupported_reason(CPU))
    assert "cpu" in backend.devices and backend.unsupported_reason(CPU) is None
    try:
        prepared = backend.prepare(model, calibration, CPU)
    except NotApplicable as exc:  # a toolkit backend whose extra is not installed here: its job is `skipped` so
        if "pip install" not in str(exc) and "make setup-" not in str(exc):
            raise
        pytest.skip(str(exc))
    try:
        assert prepared is not model
        for batch_size in (1, 37):  # odd sizes: every sample is scored, none dropped
            batch = random_batch(tables, batch_size, seed=batch_size)
            out = prepared(batch.dense, batch.sparse)
            assert out.shape == (batch_size, 1)
            assert torch.isfinite(out).all()
            again = prepared(batch.dense, batch.sparse)
            assert torch.equal(out, again), "repeated calls must give the same logits"
        backend.before_timing(prepared, 1)
        assert isinstance(backend.job_metrics(prepared), dict)
    finally:
        backend.close()  # external resources (ps_redis: its private server) end with the job
    modules_after, state_after = snapshot(model)
    assert modules_after == modules_before, "prepare replaced modules of the input model"
    assert state_after.keys() == state_before.keys()
    assert all(torch.equal(state_after[k], state_before[k]) for k in state_before), "prepare changed input weights"


@pytest.fixture(scope="module")
def sequence_setup():
    return build_ranker(dim=16), [sequence_batch(64, seed=s) for s in (1, 2)]


@pytest.mark.parametrize("name", BACKENDS)
def test_contract_on_a_sequence_model(name, sequence_setup):
    model, calibration = sequence_setup
    modules_before, state_before = snapshot(model)
    backend = make(name)
    reason = backend.unsupported_reason(CPU)
    if registry.get("backend", name).toolkit and reason:  # its pip extra is not installed here
        pytest.skip(reason)
    try:
        try:
            prepared = backend.prepare(model, calibration, CPU)
        except NotApplicable as exc:  # a clean skip: one line naming why
            assert name not in SEQUENCE_BACKENDS, f"{name} must take EmbeddingCollections: {exc}"
            assert "\n" not in str(exc) and ("EmbeddingCollection" in str(exc) or "pip install" in str(exc) or "make setup-" in str(exc))
            return
        assert name in SEQUENCE_BACKENDS, f"{name} ran a sequence model: add it to SEQUENCE_BACKENDS"
        for batch_size in (1, 37):
            batch = sequence_batch(batch_size, seed=batch_size)
            out = prepared(batch.dense, batch.sparse)
            assert out.shape == (batch_size, 1) and torch.isfinite(out).all()
            assert torch.equal(out, prepared(batch.dense, batch.sparse))
    finally:
        backend.close()
    modules_after, state_after = snapshot(model)
    assert modules_after == modules_before
    assert all(torch.equal(state_after[k], state_before[k]) for k in state_before), "prepare changed input weights"


@pytest.mark.slow
@pytest.mark.parametrize("name", BACKENDS)
def test_yaml_composes(name):
    cfg = compose([f"backend={name}"]).backend
    assert cfg.name == name
    assert cfg == registry.get("backend", name).config()


def test_per_table_override_from_the_command_line():
    cfg = compose(["backend=uint4", "+backend.per_table={t_cat_3: int8}", "backend.mlp_mode=static"]).backend
    backend = registry.get("backend", "uint4").factory(cfg)
    assert backend.cfg.per_table == {"t_cat_3": "int8"} and backend.cfg.mlp_mode == "static"


@pytest.mark.parametrize("name", BACKENDS)
def test_emulation_names_a_valid_fake_quant_config(name):
    backend = make(name)
    emulation = backend.emulation()
    if name in INTEGER_BACKENDS:
        assert emulation is not None, f"{name} must name its fake_quant twin"
    if emulation is None:
        return
    entry = registry.get("backend", emulation["name"])
    merged = OmegaConf.merge(OmegaConf.structured(entry.config), emulation)  # typos or wrong types raise
    assert merged.name == "fake_quant"


@pytest.mark.parametrize("name", ["int8_tbe", "uint4", "int2_tbe", "fake_quant"])
def test_devices(name):
    backend = make(name)
    assert backend.unsupported_reason(torch.device("cuda")) is None or "CPU only" in backend.unsupported_reason(
        torch.device("cuda")
    )
    if name != "fake_quant":
        assert "CPU only" in backend.unsupported_reason(torch.device("cuda"))  # the schema's int8 MLP: torch.ao's Linear, CPU only
        assert make(name, mlp="fp32").unsupported_reason(torch.device("cuda")) is None  # TBE kernels run on CUDA
        # the composed config's default on CUDA (bench.config.dense_path, tests/test_dense_path.py): fp16 dense layers
        assert make(name, mlp="fp16").unsupported_reason(torch.device("cuda")) is None
