"""The toolkit backends (ONNX Runtime, OpenVINO with NNCF) on a tiny model: the fp32 runtimes score as the
model does, each quantized one rewrote what it declares, the runtime follows the job's thread count and
takes its feeds built beforehand, OpenVINO's precision is pinned, and a missing extra skips the job with
the install command."""

from __future__ import annotations

import importlib.util
import logging
import re

import pytest
import torch

from bench import hardware, registry
from bench.backends.toolkit import RuntimeModule
from bench.models.dlrm import build_dlrm
from bench.registry import TOOLKIT_SWEEP_OWN, toolkit_sweep_backends
from bench.config.compose import compose_dictconfig
from bench.runner import run_one
from bench.sweep import count_jobs
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables

CPU = torch.device("cpu")
# the tests that run a runtime need the extras (make setup installs them); the sweep and missing-extra tests do not
needs_toolkits = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("onnxruntime", "onnx_ir", "openvino", "nncf")),
                                    reason="the toolkits are not installed: pip install -e '.[toolkits]'")


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    tables = tiny_tables(rows=200, pooling=2)
    model_cfg = tiny_model_config(32)  # 32 wide: a whole int4 group
    model_cfg.dense_arch_layer_sizes = [64, 32]
    model = build_dlrm(model_cfg, tables, num_dense=13).eval()
    calibration = [random_batch(tables, 128, seed=s) for s in (1, 2)]
    return tables, model, calibration


def prepared(name, model, calibration):
    entry = registry.get("backend", name)
    backend = entry.factory(entry.config())
    return backend, backend.prepare(model, calibration, CPU)


@needs_toolkits
@pytest.mark.parametrize("name", ["onnxruntime_fp32", "openvino_fp32"])
def test_fp32_runtimes_score_as_the_model(name, setup):
    tables, model, calibration = setup
    backend, module = prepared(name, model, calibration)
    batch = random_batch(tables, 53, seed=7)
    with torch.inference_mode():
        want = model(batch.dense, batch.sparse)
        torch.testing.assert_close(module(batch.dense, batch.sparse), want, rtol=1e-5, atol=1e-5)
        (feeds,), = backend.timed_inputs(module, [(batch.dense, batch.sparse)])
        torch.testing.assert_close(module(feeds), want, rtol=1e-5, atol=1e-5)
    # the deploy form: the tables stacked, one zero row after them
    assert module.runtime_table_bytes() == (sum(t.num_embeddings for t in tables) + 1) * 32 * 4


SCORE_LAYER = "/model/over_arch/model/model.1/MatMul"  # the tiny DLRM's output layer in the exported graph
# What each backend says it quantizes, seen in the graph the runtime was handed.
REWRITTEN = {
    "onnxruntime_int8_dynamic": lambda m: m["onnx_ops"].get("MatMulInteger", 0) == 3,
    "onnxruntime_int8_static": lambda m: m["onnx_ops"].get("QuantizeLinear", 0) > 0 and m["onnx_ops"].get("DequantizeLinear", 0) >= 9,
    # the score layer (one output feature) stays fp32 (backend.output_layer=fp32): 3 of the 4 Linears
    "onnxruntime_w4": lambda m: m["onnx_ops"].get("MatMulNBits", 0) == 3 and m["onnx_ops"].get("GatherBlockQuantized", 0) == 4,
    "openvino_int8": lambda m: m["openvino_ops"].get("FakeQuantize", 0) > 0 and m["nncf_ignored_scope"] == ["/model/inter_arch/MatMul", SCORE_LAYER],
    "openvino_w8": lambda m: m["constant_types"].get("u8", 0) > m["constant_types"].get("f32", 0),
    "openvino_w4": lambda m: m["constant_types"].get("i4", 0) > 0,
}


@needs_toolkits
@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_quantized_backends_rewrite_what_they_declare(name, setup):
    tables, model, calibration = setup
    backend, module = prepared(name, model, calibration)
    batch = random_batch(tables, 256, seed=3)
    with torch.inference_mode(), hardware.timing_threads(1):
        got, want = module(batch.dense, batch.sparse), model(batch.dense, batch.sparse)
    # a sweep's next batch size reuses the module with a new backend object: the record's details live in the module
    metrics = registry.get("backend", name).factory(registry.get("backend", name).config()).job_metrics(module)
    assert REWRITTEN[name](metrics), metrics
    assert metrics["runtime_threads"] == 1  # the runtime follows the job's timing threads
    assert metrics["runtime_bytes"] < 0.5 * sum(p.numel() * 4 for p in model.parameters())
    assert torch.corrcoef(torch.stack([got.flatten(), want.flatten()]))[0, 1] > 0.95


@needs_toolkits
@pytest.mark.parametrize("spin, stop", [(None, "1"), (True, "0")])
def test_onnxruntime_stops_its_threads_spinning_when_a_call_returns_unless_asked(spin, stop, setup):
    tables, model, calibration = setup
    entry = registry.get("backend", "onnxruntime_fp32")
    cfg = entry.config() if spin is None else entry.config(spin_between_calls=spin)
    backend = entry.factory(cfg)
    module = backend.prepare(model, calibration, CPU)
    module(calibration[0].dense, calibration[0].sparse)
    assert backend.job_metrics(module)["runtime_settings"]["session.force_spinning_stop"] == stop  # read back from the session


@needs_toolkits
def test_openvino_precision_is_pinned_and_recorded(setup):
    tables, model, calibration = setup
    backend, module = prepared("openvino_fp32", model, calibration)
    module(calibration[0].dense, calibration[0].sparse)
    metrics = backend.job_metrics(module)
    assert metrics["inference_precision"] == metrics["inference_precision_pinned"] == "f32"


def test_toolkit_backends_join_the_toolkit_sweep_only():
    names = toolkit_sweep_backends()
    assert names[: len(TOOLKIT_SWEEP_OWN)] == list(TOOLKIT_SWEEP_OWN)
    entries = registry.entries("backend")
    for name in names[len(TOOLKIT_SWEEP_OWN):]:
        assert entries[name].toolkit and not entries[name].in_sweeps
        reason = entries[name].factory(entries[name].config()).unsupported_reason(CPU)
        if entries[name].toolkit == "quark":  # Quark lives in its own environment (make setup-quark), not in .venv
            assert reason is None or "make setup-quark" in reason
        else:
            assert reason is None, reason
    assert {"onnxruntime_int8_static", "openvino_int8"} <= set(names)


def test_the_toolkit_sweep_takes_its_backends_from_the_registry():
    hydra = compose_dictconfig(["+sweep=toolkits"], with_hydra=True)
    listed = hydra.hydra.sweeper.params.backend.split(",")
    assert listed == toolkit_sweep_backends() and listed[0] == "fp32"
    assert str(hydra.hydra.sweeper.params.batch_size) == "256,1024,4096"
    assert count_jobs(hydra) == len(listed) * 3 and compose_dictconfig(["+sweep=toolkits"]).sweep_name == "toolkits"


def test_a_missing_extra_skips_the_job_with_the_install_command(tiny_cfg, monkeypatch):
    backend_class = registry.get("backend", "onnxruntime_int8_static").factory
    # the package as if it were not installed: a module name no environment has
    monkeypatch.setattr(backend_class, "modules", ("onnxruntime_not_installed_here",))
    record = run_one(tiny_cfg("backend=onnxruntime_int8_static"))
    assert record.status == "skipped"
    assert record.error == ("backend 'onnxruntime_int8_static' needs onnxruntime_not_installed_here, not installed: "
                            "pip install -e '.[onnxruntime]'")


@needs_toolkits
def test_a_compiled_model_that_reports_another_precision_fails(setup, monkeypatch):
    """The guard: a runtime that quietly computes in another precision than the pinned f32 (OpenVINO's bf16
    default on AVX-512-BF16 CPUs) fails the call. Planted: a compiled model that reports bf16."""
    import openvino as ov

    tables, model, calibration = setup
    real_core = ov.Core

    class Bf16Core:
        def __getattr__(self, name):  # reading and converting the model: the real core's
            return getattr(real_core(), name)

        def compile_model(self, *args, **kwargs):
            compiled = real_core().compile_model(*args, **kwargs)

            class Reports:
                def get_property(self, name):
                    return ov.Type.bf16

                def create_infer_request(self):
                    return compiled.create_infer_request()

            return Reports()

    monkeypatch.setattr(ov, "Core", Bf16Core)
    with pytest.raises(RuntimeError, match="OpenVINO compiled the model at inference precision bf16, not f32 as pinned"):
        prepared("openvino_fp32", model, calibration)  # the build runs the runtime once (toolkit.batch_size_bound)


@needs_toolkits
def test_openvino_quiets_nncf_by_its_logger_level_only():
    """NNCF's tables stay off the job's output by the `nncf` logger's level; a handler someone else hung on
    that logger (pytest's capture handlers are) keeps its own level, so its WARNINGs from elsewhere still show."""
    entry = registry.get("backend", "openvino_int8")
    backend = entry.factory(entry.config())
    watcher = logging.Handler(logging.DEBUG)
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.addHandler(watcher)
    try:
        backend.load_toolkit()
        assert nncf_logger.level == logging.ERROR and watcher.level == logging.DEBUG
    finally:
        nncf_logger.removeHandler(watcher)
        nncf_logger.setLevel(level)


@needs_toolkits
def test_elementwise_products_of_activations_stay_out_of_openvino_int8():
    """A DCN cross layer's x0 * (W x + b) and a two-tower score's user * item are found by the rule (both inputs
    activations), not by name, and left fp32 by NNCF; a product with a weight is not among them."""
    from examples.torchrec_models import dlrm_dcn
    from examples.two_tower import build as two_tower

    from bench.models.dlrm import embedding_bag_collection

    torch.manual_seed(0)
    tables = tiny_tables()
    calibration = [random_batch(tables, 64, seed=s) for s in (1, 2)]
    cases = {"dcn": (dlrm_dcn.build(embedding_bag_collection(tables, 8), 13, dcn_num_layers=3), 3),
             "two_tower": (two_tower(embedding_bag_collection(tables, 8), 13, item_features=["cat_0"]), 1)}
    for name, (model, products) in cases.items():
        backend, module = prepared("openvino_int8", model.eval(), calibration)
        kept = backend.job_metrics(module)["nncf_kept_fp32"]  # what stayed fp32, and why
        assert sorted(kept) == sorted(backend.job_metrics(module)["nncf_ignored_scope"])
        ignored = [n for n, why in kept.items() if not why.startswith("the score layer")]  # the score layer: its own test
        assert len(ignored) == products and all(n.rsplit("/", 1)[-1].startswith("Mul") for n in ignored), (name, ignored)
        assert all(kept[n].startswith("Multiply of two activations") for n in ignored), kept
        batch = random_batch(tables, 128, seed=5)
        with torch.inference_mode(), hardware.timing_threads(1):
            got, want = module(batch.dense, batch.sparse), model(batch.dense, batch.sparse)
        assert torch.isfinite(got).all() and torch.corrcoef(torch.stack([got.flatten(), want.flatten()]))[0, 1] > 0.9


@needs_toolkits
@pytest.mark.parametrize("name", ["openvino_int8", "onnxruntime_int8_static"])
def test_a_probabilities_model_is_deployed_as_it_ends_and_read_back_outside_the_runtime(name):
    """A DCN-v2-style ranker with a functional sigmoid head (examples/dcn_v2.py), read through the clamp: the runtime
    runs the model as it ends, at its sigmoid, and the harness's log(p / (1 - p)) runs after it in fp32. Quantized
    inside the graph, that read-back's clamp and 1 - p rounded the probabilities near 0 and 1 to 0 and 1, whose
    logits are infinite; here the probabilities are pushed to both ends (the head's weights times 30)."""
    from examples.dcn_v2 import build as dcn_v2

    from bench.models.dlrm import embedding_bag_collection
    from bench.models.logits import LogitsOf

    torch.manual_seed(0)
    tables = tiny_tables()
    model = dcn_v2(embedding_bag_collection(tables, 8), 13, cross_layers=2, low_rank=8, deep_sizes=(32, 16)).eval()
    with torch.no_grad():
        model.head.weight.mul_(30)
    wrapped = LogitsOf(model)  # no trailing nn.Sigmoid: read through the clamp
    calibration = [random_batch(tables, 256, seed=s) for s in (1, 2)]
    backend, module = prepared(name, wrapped, calibration)
    metrics = backend.job_metrics(module)
    assert "the harness reads them as logits" in metrics["score_read_outside"]
    ops = metrics.get("openvino_ops") or metrics["onnx_ops"]
    assert "Log" not in ops and "Sigmoid" in ops  # the graph ends at the model's sigmoid
    batch = random_batch(tables, 512, seed=5)
    with torch.inference_mode(), hardware.timing_threads(1):
        got, want = module(batch.dense, batch.sparse), wrapped(batch.dense, batch.sparse)
        assert torch.sigmoid(want).min() < 1e-3 and torch.sigmoid(want).max() > 1 - 1e-3  # both ends reached
    assert torch.isfinite(got).all() and torch.corrcoef(torch.stack([got.flatten(), want.flatten()]))[0, 1] > 0.95


class _TracedSize(torch.nn.Module):
    """A runtime stand-in that returns the traced batch's count of scores whatever it is given, as OpenVINO did for
    torchrec's sequence-first transformer (or fails, as ONNX Runtime's Reshape did)."""

    def __init__(self, traced: int, fail: bool = False) -> None:
        super().__init__()
        self.traced, self.fail = traced, fail

    def forward(self, dense: torch.Tensor, sparse) -> torch.Tensor:
        if self.fail and dense.shape[0] != self.traced:
            raise RuntimeError("cannot reshape {513,27,16} to {1024,108,4}")
        return torch.zeros(self.traced)


def test_a_runtime_that_keeps_the_traced_batch_size_is_not_applicable_with_its_reason():
    from bench.backends.backend import NotApplicable
    from bench.backends.toolkit import batch_size_bound

    batch = random_batch(tiny_tables(), batch_size=8, seed=0)
    for fail, got in ((False, "gave 8 scores"), (True, "gave an error (RuntimeError: cannot reshape")):
        with pytest.raises(NotApplicable, match=r"keeps the batch size it was traced at \(8 rows\): at 5 rows the runtime " + re.escape(got)):
            batch_size_bound(_TracedSize(8, fail), batch)

    class _PerSample(torch.nn.Module):
        def forward(self, dense: torch.Tensor, sparse) -> torch.Tensor:
            return torch.zeros(dense.shape[0])
    batch_size_bound(_PerSample(), batch)  # one score per sample at another size: nothing said


# The quantizing toolkit backends and the key of the record that says what each kept fp32.
KEEPS_SCORE_LAYER = {"onnxruntime_int8_dynamic": "ort_kept_fp32", "onnxruntime_int8_static": "ort_kept_fp32",
                     "onnxruntime_w4": "ort_kept_fp32", "openvino_int8": "nncf_kept_fp32", "openvino_w8": "nncf_kept_fp32"}


def wide_score_model():
    from bench.models.dlrm import embedding_bag_collection
    from tests.support.custom_models import wide_score

    torch.manual_seed(0)
    tables = tiny_tables()
    return tables, wide_score(embedding_bag_collection(tables, 8), 13).eval(), [random_batch(tables, 128, seed=s) for s in (1, 2)]


@needs_toolkits
def test_the_score_layer_is_found_by_the_graph_rule_in_onnx_and_openvino(tmp_path):
    """The score layer is the MatMul (or, after ONNX Runtime's pre-processing, the Gemm) whose constant weight has one
    output feature: found in the graph, not by its name; the tower's Linear is not among them."""
    import onnx
    import openvino as ov

    from bench.backends import ort_runtime, ov_runtime
    from bench.backends.toolkit import export_onnx

    tables, model, calibration = wide_score_model()
    backend = registry.get("backend", "onnxruntime_int8_static").factory(registry.get("backend", "onnxruntime_int8_static").config())
    twin = backend.twin(model, calibration)
    path = export_onnx(twin, twin.inputs(calibration[0].dense, calibration[0].sparse), tmp_path / "twin.onnx")
    assert ort_runtime.output_layers(onnx.load(str(path))) == ["/model/score/MatMul"]
    fused = onnx.load(str(ort_runtime.preprocessed(path, tmp_path)))
    found = ort_runtime.output_layers(fused)
    assert len(found) == 1 and {n.op_type for n in fused.graph.node if n.name in found} == {"Gemm"}, found
    assert ov_runtime.output_layers(ov.Core().read_model(str(path))) == ["/model/score/MatMul"]


@needs_toolkits
@pytest.mark.parametrize("name", sorted(KEEPS_SCORE_LAYER))
def test_quantizing_toolkits_keep_the_score_layer_fp32_unless_asked(name):
    """backend.output_layer=fp32 (the default) leaves the score layer out of the toolkit's quantization and the record
    says why; int8 quantizes it like the rest. Where activations are int8, the count near 1,000 beside the tower's
    outputs rounds the tower away with it quantized: the scores move far more."""
    tables, model, calibration = wide_score_model()
    batch = random_batch(tables, 512, seed=5)
    error = {}
    for output_layer in ("fp32", "int8"):
        entry = registry.get("backend", name)
        backend = entry.factory(entry.config(output_layer=output_layer))
        module = backend.prepare(model, calibration, CPU)
        kept = backend.job_metrics(module).get(KEEPS_SCORE_LAYER[name], {})
        score = [n for n, why in kept.items() if why.startswith("the score layer")]
        assert len(score) == (1 if output_layer == "fp32" else 0), kept
        with torch.inference_mode(), hardware.timing_threads(1):
            got, want = module(batch.dense, batch.sparse), model(batch.dense, batch.sparse)
        error[output_layer] = (got - want).abs().mean().item()
    if name in ("onnxruntime_int8_dynamic", "onnxruntime_int8_static", "openvino_int8"):
        assert error["fp32"] < 0.5 * error["int8"], error


def test_a_bad_output_layer_choice_is_one_line():
    from bench.errors import UserError

    entry = registry.get("backend", "openvino_int8")
    with pytest.raises(UserError, match=r"^backend.output_layer='bf16' is not one of fp32, int8$"):
        entry.factory(entry.config(output_layer="bf16")).check()


@pytest.mark.slow
@needs_toolkits
def test_a_run_keeps_the_score_layer_fp32_and_loses_less_auc_than_with_it_int8(tmp_path):
    """Through the runner (the model trained on the workload, ΔAUC paired over the eval split): with the score layer
    fp32 the ΔAUC interval lies wholly above the one with it int8, for the static int8 toolkits."""
    from bench.config.compose import compose
    from bench.runner import Session

    base = ["+preset=tiny", "model=custom", "model.factory=tests.support.custom_models:wide_score", "workload.train_samples=16384",
            "workload.eval_samples=8192", "workload.calibration_samples=512", "model.train.samples=8192", "model.train.batch_size=512",
            "model.train.dense_lr=0.01", "batch_size=256", "eval_batch_size=256", "calibration_batch_size=256", "threads=1",
            "timing.trials=1", "timing.max_rounds=1", "timing.batches_per_trial=1", "timing.warmup_batches=0", "timing.pool_samples=0",
            "timing.paired=false", f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}"]
    session = Session()
    for name in ("onnxruntime_int8_static", "openvino_int8"):
        runs = {layer: run_one(compose([*base, f"backend={name}", f"backend.output_layer={layer}"]), session) for layer in ("fp32", "int8")}
        assert all(r.status == "ok" for r in runs.values()), {k: r.error for k, r in runs.items()}
        kept = runs["fp32"].metrics[KEEPS_SCORE_LAYER[name]]
        assert [n for n, why in kept.items() if why.startswith("the score layer")], kept
        assert runs["fp32"].metrics["auc_delta_lo"] > runs["int8"].metrics["auc_delta_hi"], {
            k: (r.metrics["auc_delta_lo"], r.metrics["auc_delta_hi"]) for k, r in runs.items()}


@needs_toolkits
@pytest.mark.parametrize("name", ["onnxruntime_w4", "openvino_w4"])
def test_int4_with_zero_points_when_asked(name, setup):
    """`backend.symmetric=false`: a zero point per block (ONNX Runtime: GatherBlockQuantized's fourth input) or per
    group (OpenVINO: u4 constants in place of i4)."""
    tables, model, calibration = setup
    entry = registry.get("backend", name)
    backend = entry.factory(entry.config(symmetric=False))
    module = backend.prepare(model, calibration, CPU)
    if name == "openvino_w4":
        types = backend.job_metrics(module)["constant_types"]
        assert types.get("u4", 0) > 0 and types.get("i4", 0) == 0, types
    else:
        import onnx

        gathers = [n for n in onnx.load_from_string(module.runner.model_bytes).graph.node if n.op_type == "GatherBlockQuantized"]
        assert len(gathers) == 4 and all(len(n.input) == 4 and n.input[3] for n in gathers), [list(n.input) for n in gathers]
