"""What the OpenVINO backends share: the exported twin read by OpenVINO, compiled for the CPU at the job's
thread count with fp32 inference precision pinned, its constants' bytes, and the activation products.

OpenVINO's CPU plugin computes in bf16 by default on a CPU with AVX-512-BF16 (or AMX): an "fp32" model would
quietly lose precision there. Every compile sets `INFERENCE_PRECISION_HINT=f32`, reads the property back,
and refuses to run (the job fails) when the compiled model reports anything else; the record keeps it.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bench.backends.layer_outputs import LayerOutput, all_finite, summary
from bench.backends.toolkit import Feeds, ToolkitBackend

EXTRA = "openvino"
PRECISION = "f32"


class OvRunner:
    """A compiled model over an `ov.Model`, recompiled when the thread count changes."""

    def __init__(self, model) -> None:
        self.model = model
        self.request = None
        self.threads: int | None = None
        self.precision: str | None = None
        self.settings: dict = {}

    def compile(self, threads: int) -> None:
        import openvino as ov
        import openvino.properties.hint as hints

        pinned = getattr(ov.Type, PRECISION)
        compiled = ov.Core().compile_model(self.model, "CPU", _config(threads))
        precision = compiled.get_property(hints.inference_precision)
        if precision != pinned:
            raise RuntimeError(f"OpenVINO compiled the model at inference precision {precision.get_type_name()}, not {PRECISION} as pinned")
        self.precision = precision.get_type_name()
        # read back from the compiled model: what it runs with, for the record
        self.settings = {name: str(compiled.get_property(name)) for name in
                         ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "ENABLE_CPU_PINNING", "ENABLE_HYPER_THREADING",
                          "SCHEDULING_CORE_TYPE") if name in compiled.get_property("SUPPORTED_PROPERTIES")}
        self.request = compiled.create_infer_request()
        self.threads = threads

    def __call__(self, feeds: Feeds, threads: int) -> np.ndarray:
        if threads != self.threads:
            self.compile(threads)
        return np.array(self.request.infer(feeds)[0])  # a copy: the request reuses its output buffer

    def layer_outputs(self, feeds: Feeds, threads: int) -> list[LayerOutput]:
        """Every op's output on `feeds`, in the graph's order: a copy of the model with each op's output a model output."""
        import openvino as ov

        model = self.model.clone()
        model.add_outputs([o for op in model.get_ordered_ops() if op.get_type_name() not in ("Parameter", "Result", "Constant")
                           for o in op.outputs()])
        compiled = ov.Core().compile_model(model, "CPU", _config(threads))
        result = compiled.create_infer_request().infer(feeds)
        values = {}  # (op, port) -> its output, found through the Result each one feeds
        for i, out in enumerate(model.outputs):
            source = out.get_node().input(0).get_source_output()
            values[(source.get_node().get_friendly_name(), source.get_index())] = np.asarray(result[i])
        found = []
        for op in model.get_ordered_ops():
            name = op.get_friendly_name()
            if (name, 0) not in values:
                continue
            given = [values.get((i.get_source_output().get_node().get_friendly_name(), i.get_source_output().get_index()))
                     for i in op.inputs()]
            found.append(summary(name, op.get_type_name(), [values[(name, k)] for k in range(op.get_output_size()) if (name, k) in values],
                                 all_finite(v for v in given if v is not None)))
        return found

    def metrics(self) -> dict:
        # the precision the compiled model reported, read back after the pin: the correctness guard's record
        return {"runtime_threads": self.threads, "inference_precision": self.precision, "inference_precision_pinned": PRECISION,
                "runtime_settings": self.settings}


def _config(threads: int) -> dict:
    """OpenVINO's CPU guidance for one synchronous request at a fixed thread count: the LATENCY hint, one stream
    holding every thread the job times with; fp32 inference precision pinned."""
    import openvino as ov
    import openvino.properties as props
    import openvino.properties.hint as hints

    return {hints.inference_precision: getattr(ov.Type, PRECISION), props.inference_num_threads: threads,
            hints.performance_mode: hints.PerformanceMode.LATENCY, props.num_streams: 1}


def constant_bytes(model) -> int:
    """Bytes of the model's constants (weights, int8/int4 where compressed), as the runtime is handed them."""
    return sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")


def table_bytes(model) -> int:
    """Bytes of the constants the model's gathers read rows from (the tables, with their scales)."""
    found: dict[str, int] = {}

    def walk(node) -> None:
        kind = node.get_type_name()
        if kind == "Constant":
            found[node.get_friendly_name() + str(id(node))] = node.get_byte_size()
        elif kind in ("Convert", "Subtract", "Multiply", "Reshape"):
            for i in node.inputs()[:1] if kind == "Reshape" else node.inputs():  # a Reshape's shape is no table
                walk(i.get_source_output().get_node())

    for op in model.get_ops():
        if op.get_type_name() == "Gather":
            walk(op.input(0).get_source_output().get_node())
    return sum(found.values())


def _is_constant(node) -> bool:
    """A Constant, seen through the Convert / dequantizing ops NNCF puts between a weight and its user."""
    kind = node.get_type_name()
    if kind == "Constant":
        return True
    return kind in ("Convert", "Subtract", "Multiply", "Reshape") and all(_is_constant(i.get_source_output().get_node()) for i in node.inputs())


# Products whose two inputs can both be activations: a matrix product (DLRM's pairwise interaction) or an
# elementwise one (a DCN cross layer's x0 * (W x + b), a two-tower score's user * item).
PRODUCTS = ("MatMul", "Multiply")


def activation_products(model) -> list[str]:
    """Friendly names of the MatMuls and elementwise Multiplies whose inputs are both activations: left fp32
    by the quantizing backends (NNCF's ignored scope), found by the rule, not by a model's layer names."""
    return [op.get_friendly_name() for op in model.get_ops()
            if op.get_type_name() in PRODUCTS and not any(_is_constant(i.get_source_output().get_node()) for i in op.inputs())]


def output_layers(model) -> list[str]:
    """Friendly names of the MatMuls whose constant weight has one output feature (a model's score layer)."""
    def one_wide(i) -> bool:
        node = i.get_source_output().get_node()
        return node.get_type_name() == "Constant" and 1 in list(i.get_source_output().get_shape())

    return [op.get_friendly_name() for op in model.get_ops() if op.get_type_name() == "MatMul" and any(one_wide(i) for i in op.inputs())]


class OvBackend(ToolkitBackend):
    toolkit = EXTRA
    best_triangle = "gather"  # the deploy form's triangle: OpenVINO runs the Gather on axis 1 with a JIT kernel (docs/toolkits.md)
    modules = ("openvino", "nncf")

    def load_toolkit(self) -> None:
        super().load_toolkit()
        # NNCF's statistics tables and progress bars are not the job's output. The logger's level alone:
        # nncf.set_log_level also sets the level of every handler on its logger, which are not all NNCF's
        # (pytest attaches its capture handlers to non-propagating loggers, and kept WARNING out of them).
        logging.getLogger("nncf").setLevel(logging.ERROR)

    def transform(self, model, calibration: list[Feeds]) -> tuple[Any, dict]:
        """The model after NNCF (fp32 returns it as it is), and what NNCF was told to leave out, for the record."""
        raise NotImplementedError

    def reference_runner(self, onnx_path: Path, workdir: Path) -> OvRunner:
        import openvino as ov

        return OvRunner(ov.Core().read_model(str(onnx_path)))

    def build(self, onnx_path: Path, workdir: Path, calibration: list[Feeds]) -> tuple[Callable[[Feeds, int], np.ndarray], int, int, dict]:
        import openvino as ov

        with contextlib.redirect_stdout(io.StringIO()):  # NNCF's progress bars (rich, on stdout) are not the job's output
            model, details = self.transform(ov.Core().read_model(str(onnx_path)), calibration)
        ops: dict[str, int] = {}
        for op in model.get_ops():
            ops[op.get_type_name()] = ops.get(op.get_type_name(), 0) + 1
        details.update(runtime=f"openvino {ov.__version__} CPU", openvino_ops=dict(sorted(ops.items())), constant_types=_constant_types(model))
        return OvRunner(model), constant_bytes(model), table_bytes(model), details


def _constant_types(model) -> dict[str, int]:
    """Element type -> bytes of the constants of that type (how much is int8, int4, fp32)."""
    out: dict[str, int] = {}
    for op in model.get_ops():
        if op.get_type_name() == "Constant":
            kind = op.get_element_type().get_type_name()
            out[kind] = out.get(kind, 0) + op.get_byte_size()
    return dict(sorted(out.items()))
