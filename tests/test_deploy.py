"""The deploy form of the exported twin (bench.backends.deploy): on a one-hot model its ONNX graph has one
gather per stacked table, no sum over a bag axis of length 1, no Transpose around the interaction, and scores
as eager does; multi-hot features keep their sum; torchrec's DLRM_DCN, DLRM_Projection and a two-tower model
export too."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from bench.backends.deploy import export_twin
from bench.models.dlrm import build_dlrm, embedding_bag_collection
from bench.workloads.random_batch import random_batch, tiny_model_config
from bench.workloads.workload import TableSpec
from examples.torchrec_models import dlrm_dcn, dlrm_projection
from examples.two_tower import build as two_tower

needs_ort = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("onnx", "onnxruntime")),
                               reason="the onnxruntime extra is not installed: pip install -e '.[onnxruntime]'")


def tables(pooling):
    return [TableSpec(name=f"t_cat_{i}", feature=f"cat_{i}", num_embeddings=50 + 7 * i, pooling=k) for i, k in enumerate(pooling)]


def onnx_graph(twin, batch, tmp_path):
    import onnx

    from bench.backends.toolkit import export_onnx

    path = export_onnx(twin, twin.inputs(batch.dense, batch.sparse), tmp_path / "twin.onnx")
    return path, onnx.load(str(path)).graph


def ort_scores(path, twin, batch):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {n: t.numpy() for n, t in zip(twin.input_names(), twin.inputs(batch.dense, batch.sparse))})[0]


def eager(model, batch):
    with torch.no_grad():
        return model(batch.dense, batch.sparse).numpy()


@needs_ort
@pytest.mark.parametrize("triangle", ["gather", "fold"])
def test_one_hot_export_is_one_gather_without_bag_sums_or_transposes(triangle, tmp_path):
    torch.manual_seed(0)
    specs = tables([1] * 6)
    model = build_dlrm(tiny_model_config(8), specs, num_dense=13).eval()
    calibration = [random_batch(specs, 128, seed=s) for s in (1, 2)]
    twin = export_twin(model, calibration[0], form="deploy", triangle=triangle, calibration=calibration)
    assert twin.input_names() == ["dense", "ids_0"] and twin.details["triangle"] == triangle
    assert twin.details["stacked_tables"] == [6] and twin.details["keyed_tensor"].startswith("bypassed")
    path, graph = onnx_graph(twin, calibration[0], tmp_path)
    ops = [n.op_type for n in graph.node]
    weights = {t.name for t in graph.initializer}
    assert "ReduceSum" not in ops  # no sum over a bag axis of length 1
    assert [n for n in graph.node if n.op_type == "Gather" and n.input[0] in weights] == \
           [n for n in graph.node if n.op_type == "Gather" and "stacks" in n.input[0]]  # the only table gather is the stack's
    assert sum(1 for n in graph.node if n.op_type == "Gather" and n.input[0] in weights) == 1
    producer = {o: n for n in graph.node for o in n.output}
    product = next(n for n in graph.node if n.op_type == "MatMul" and not any(i in weights for i in n.input))  # the interaction
    after = [n for n in graph.node if any(producer.get(i) is product for i in n.input)]
    after += [n for n in graph.node if any(producer.get(i) in after for i in n.input)]
    assert after and "Transpose" not in {n.op_type for n in after}
    assert ops.count("Transpose") == 1  # only the product's own transposed operand, which the runtimes fold into it
    batch = random_batch(specs, 256, seed=5)
    np.testing.assert_allclose(ort_scores(path, twin, batch), eager(model, batch), rtol=0, atol=1e-6)


@needs_ort
def test_multi_hot_features_keep_their_sum(tmp_path):
    torch.manual_seed(0)
    specs = tables([1, 3, 1, 2, 1])  # workload.pooling above 1 for two features
    model = build_dlrm(tiny_model_config(8), specs, num_dense=13).eval()
    calibration = [random_batch(specs, 128, seed=s) for s in (1, 2)]
    twin = export_twin(model, calibration[0], form="deploy", calibration=calibration)
    assert twin.input_names() == ["dense", "ids_0", "cat_1", "cat_3"]
    assert (twin.details["one_hot_features"], twin.details["multi_hot_features"]) == (3, 2)
    path, graph = onnx_graph(twin, calibration[0], tmp_path)
    assert [n.op_type for n in graph.node].count("ReduceSum") == 2  # the two multi-hot bags, summed
    for seed in (5, 6):
        batch = random_batch(specs, 200, seed=seed)
        with torch.no_grad():
            np.testing.assert_allclose(twin(*twin.inputs(batch.dense, batch.sparse)).numpy(), eager(model, batch), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ort_scores(path, twin, batch), eager(model, batch), rtol=1e-5, atol=1e-6)
    longer = random_batch(tables([2, 3, 1, 2, 1]), 8, seed=9)  # a bag of two ids for a feature exported one-hot
    with pytest.raises(ValueError, match="feature 'cat_0' was exported one-hot .* backend.export=plain"):
        twin.inputs(longer.dense, longer.sparse)


@pytest.mark.parametrize("kind", ["dlrm_dcn", "dlrm_projection", "two_tower"])
def test_other_models_export_in_the_deploy_form(kind):
    torch.manual_seed(0)
    specs = tables([1, 1, 2, 1])
    ebc = embedding_bag_collection(specs, 8)
    model = {"dlrm_dcn": lambda: dlrm_dcn.build(ebc, 13), "dlrm_projection": lambda: dlrm_projection.build(ebc, 13),
             "two_tower": lambda: two_tower(ebc, 13, item_features=["cat_0", "cat_2"])}[kind]().eval()
    calibration = [random_batch(specs, 64, seed=s) for s in (1, 2)]
    twin = export_twin(model, calibration[0], form="deploy", triangle="fold", calibration=calibration)  # checks its scores itself
    assert twin.details["triangle"].startswith("none")  # none of them has torchrec's pairwise triangle
    assert twin.input_names() == ["dense", "ids_0", "cat_2"]
    batch = random_batch(specs, 100, seed=4)
    with torch.no_grad():
        np.testing.assert_allclose(twin(*twin.inputs(batch.dense, batch.sparse)).numpy(), eager(model, batch), rtol=1e-5, atol=1e-6)


def test_fold_falls_back_to_gather_with_its_reason_outside_torchrec_dlrm():
    torch.manual_seed(0)
    specs = tables([1, 1, 1])
    model = build_dlrm(tiny_model_config(8), specs, num_dense=13).eval()

    class Wrapped(torch.nn.Module):  # the interaction inside a forward of the user's own
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, dense, sparse):
            return self.inner(dense, sparse) * 2

    batch = random_batch(specs, 32, seed=1)
    twin = export_twin(model, batch, form="deploy", triangle="fold")
    assert twin.details["triangle"] == "fold"
    wrapped = export_twin(Wrapped().eval(), batch, form="deploy", triangle="fold")
    assert wrapped.details["triangle"] == "gather" and "DLRM forward" in wrapped.details["triangle_fallback"]


def test_a_bad_export_option_is_one_line_naming_the_choices():
    from bench.backends.toolkit import ToolkitConfig, check_export_options
    from bench.errors import UserError

    with pytest.raises(UserError, match=r"backend.export='stacked': choose one of deploy, plain"):
        check_export_options(ToolkitConfig(name="openvino_fp32", export="stacked"))
    with pytest.raises(UserError, match=r"backend.triangle='slice': choose one of auto, gather, fold"):
        check_export_options(ToolkitConfig(name="openvino_fp32", triangle="slice"))
    check_export_options(ToolkitConfig(name="openvino_fp32"))


@needs_ort
def test_per_table_gathers_each_table_from_its_own_weight_and_scores_as_eager(tmp_path):
    torch.manual_seed(0)
    specs = tables([1, 1, 2, 1])
    model = build_dlrm(tiny_model_config(8), specs, num_dense=13).eval()
    calibration = [random_batch(specs, 128, seed=s) for s in (1, 2)]
    twin = export_twin(model, calibration[0], form="deploy", calibration=calibration, stacking="per_table")
    assert twin.details["stacking"] == "per_table" and twin.details["stacked_tables"] == [1, 1, 1, 1]
    path, graph = onnx_graph(twin, calibration[0], tmp_path)
    weights = {t.name for t in graph.initializer}
    assert sum(1 for n in graph.node if n.op_type == "Gather" and n.input[0] in weights) == 4  # one gather per table
    batch = random_batch(specs, 200, seed=5)
    np.testing.assert_allclose(ort_scores(path, twin, batch), eager(model, batch), rtol=1e-5, atol=1e-6)
    assert export_twin(model, calibration[0], form="deploy", calibration=calibration).details["stacking"] == "stacked"


def test_stacking_auto_keeps_tables_apart_where_the_quantizer_scales_a_table_per_tensor():
    from bench.backends.toolkit import ToolkitConfig, check_export_options, stacking_of
    from bench.errors import UserError
    from bench import registry

    auto = ToolkitConfig(name="onnxruntime_int8_static")
    static = registry.get("backend", "onnxruntime_int8_static").factory
    assert stacking_of(auto, static.per_tensor_tables) == ("per_table", "auto: ONNX Runtime's quantize_static scales a Gather's "
                                                           "table per tensor; stacked, every table would share one scale")
    assert stacking_of(auto, None)[0] == "stacked"  # a per-row scheme (NNCF, ONNX Runtime's 4-bit blocks): stacking is free
    assert stacking_of(ToolkitConfig(name="x", stacking="stacked"), static.per_tensor_tables) == ("stacked", "backend.stacking=stacked")
    with pytest.raises(UserError, match=r"backend.stacking='rows': choose one of auto, stacked, per_table"):
        check_export_options(ToolkitConfig(name="x", stacking="rows"))
