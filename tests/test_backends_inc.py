"""`inc_int8_static`: Neural Compressor's PT2E static int8 of the exported twin scores close to fp32 with its Linear
layers quantized, compiled or eager; without the `inc` extra the job is skipped naming it."""

from __future__ import annotations

import sys

import pytest
import torch

from bench.backends.backend import NotApplicable
from bench.backends.tables import table_storage
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.support.backends import make_backend

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=4, rows=60, pooling=3)
pytest.importorskip("neural_compressor", reason="the inc extra is not installed: pip install -e '.[inc]'")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()


def make(**overrides):
    return make_backend("inc_int8_static", **overrides)


def quantized_ops(graph) -> dict[str, int]:
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    ops = ("quantized_decomposed.quantize_per_channel", "quantized_decomposed.quantize_per_tensor", "aten.linear", "aten.embedding")
    return {op.split(".")[-1]: sum(t.startswith(op + ".") for t in targets) for op in ops}


def test_eager_int8_graph_quantizes_the_linears_and_scores_near_fp32(model):
    calibration = [random_batch(TABLES, 128, seed=s) for s in (1, 2, 3)]
    prepared = make(compile=False).prepare(model, calibration, CPU)
    ops = quantized_ops(prepared.graph)
    # every Linear's weight int8 per channel but the score layer's (one output feature: backend.output_layer=fp32)
    assert ops["linear"] == 4 and ops["quantize_per_channel"] == 3, ops
    assert list(prepared.details["inc_kept_fp32"]) == ["model.over_arch.model.1"], prepared.details
    assert ops["quantize_per_tensor"] >= 3 and ops["embedding"] == len(TABLES), ops  # their inputs; the gathers stay fp32
    batch = random_batch(TABLES, 256, seed=9)
    want = model(batch.dense, batch.sparse)
    got = prepared(batch.dense, batch.sparse)
    gap = (got - want).abs().max().item()
    assert 0 < gap < 0.1 * want.abs().max().item(), gap  # a quantization, not the fp32 model, and not a broken one
    assert torch.equal(prepared(*make().timed_inputs(prepared, [(batch.dense, batch.sparse)])[0]), got)  # timed inputs: same scores
    assert {s["dtype"] for s in table_storage(prepared).values()} == {"fp32"}


@pytest.mark.slow
def test_compiled_int8_matches_the_eager_graph(model):
    calibration = [random_batch(TABLES, 128, seed=s) for s in (1, 2, 3)]
    eager = make(compile=False).prepare(model, calibration, CPU)
    compiled = make().prepare(model, calibration, CPU)
    batch = random_batch(TABLES, 200, seed=11)
    # oneDNN's int8 kernels against fp32 arithmetic on the same quantized values: rounding of the requantized
    # activations may land a step apart now and then
    torch.testing.assert_close(compiled(batch.dense, batch.sparse), eager(batch.dense, batch.sparse), rtol=0, atol=0.05)


def test_the_score_layer_is_quantized_like_the_rest_when_asked(model):
    calibration = [random_batch(TABLES, 128, seed=s) for s in (1, 2)]
    prepared = make(compile=False, output_layer="int8").prepare(model, calibration, CPU)
    assert quantized_ops(prepared.graph)["quantize_per_channel"] == 4 and "inc_kept_fp32" not in prepared.details


def test_missing_extra_is_not_applicable_naming_it(model, monkeypatch):
    monkeypatch.setitem(sys.modules, "neural_compressor", None)  # import fails as if not installed
    with pytest.raises(NotApplicable, match=r"pip install -e '\.\[inc\]'"):
        make().prepare(model, [random_batch(TABLES, 64, seed=1)], CPU)


def test_inc_dynamic_int8_without_a_calibration_forward_is_the_constant_output_the_guard_fails(model):
    """The known real case behind bench.pipeline.job.output_fault: Neural Compressor's dynamic int8 converted
    right after `prepare` scores every sample the same; one forward in between and it ranks."""
    import numpy as np
    from neural_compressor.torch.export import export
    from neural_compressor.torch.quantization import convert, get_default_dynamic_config, prepare

    from bench.backends.inc_int8_static import dynamic_shapes, export_example
    from bench.backends.twin import build_twin
    from bench.measure.accuracy import accuracy_metrics
    from bench.pipeline.job import output_fault

    twin = build_twin(model, random_batch(TABLES, 64, seed=1))
    example = export_example(twin, twin.inputs(*random_batch(TABLES, 64, seed=1).model_inputs()))
    batch = random_batch(TABLES, 512, seed=5)
    labels = (model(batch.dense, batch.sparse).detach().flatten() > 0).numpy().astype(np.float64)  # fp32 ranks these perfectly
    faults = {}
    for forward in (False, True):
        observed = prepare(export(twin, example, dynamic_shapes=dynamic_shapes(twin, example)), get_default_dynamic_config())
        if forward:
            observed(*example)
        logits = convert(observed)(*twin.inputs(batch.dense, batch.sparse)).detach().flatten().numpy()
        faults[forward] = output_fault({**accuracy_metrics(labels, logits), "auc_fp32": 1.0}, "inc_int8_dynamic")
    assert faults[False] is not None and "constant" in faults[False], faults
    assert faults[True] is None, faults
