"""What the ONNX Runtime backends share: the session (CPU provider, the job's thread count), the graph's
bytes and operators, and which nodes are products of two activations.

The four backends (`onnxruntime_fp32`, `onnxruntime_int8_dynamic`, `onnxruntime_int8_static`,
`onnxruntime_w4`) quantize the same exported twin (bench.backends.toolkit) with ONNX Runtime's own
quantization API and run it in `onnxruntime.InferenceSession`. A MatMul of two activations (DLRM's
pairwise interaction) stays fp32 in every one: quantized per tensor it costs AUC (a prototype on the
default model: ΔAUC -0.047 in OpenVINO), and it holds no weights to shrink.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from bench.backends.layer_outputs import LayerOutput, all_finite, summary
from bench.backends.toolkit import OUTPUT_LAYER_WHY, Feeds, ToolkitBackend, ToolkitConfig

EXTRA = "onnxruntime"
SPIN_STOP = "session.force_spinning_stop"  # "1": the intra-op threads stop spinning when a call returns


@dataclass
class OrtConfig(ToolkitConfig):
    """The ONNX Runtime backends' options."""

    # keep the intra-op threads spinning after a call returns, ONNX Runtime's default: up to 1.34x faster back to back
    # with nothing between the calls, slower where the caller works between them, as a server does (docs/toolkits.md)
    spin_between_calls: bool = False


class OrtRunner:
    """An InferenceSession over the model bytes, rebuilt when the thread count changes (the timed calls
    run at the job's timing threads), with ONNX Runtime's documented CPU settings for a fixed thread
    count: every graph optimization (ORT_ENABLE_ALL), the job's threads inside an operator and one
    between them (sequential execution: the graph is one chain), the memory-pattern planner and the CPU
    arena on, and the intra-op threads' spinning stopped when a call returns (`session.force_spinning_stop`):
    left on, they spin on after each call, on the cores the caller's next work needs (a server's batcher, the fp32
    reference timed beside it: on a 2-core host fp32's 4096-row served batch took 24.5 ms beside a spinning ONNX
    Runtime against 12.5 ms beside a stopped one, and ONNX Runtime's own 16.2 against 12.7 ms; docs/toolkits.md).
    The settings as the session was given them join the record (`runtime_settings`). `spin_between_calls` restores
    ONNX Runtime's default (`backend.spin_between_calls=true`)."""

    def __init__(self, model_bytes: bytes, spin_between_calls: bool = False) -> None:
        self.model_bytes = model_bytes
        self.spin_between_calls = spin_between_calls
        self.session = None
        self.threads: int | None = None
        self.settings: dict = {}

    def _session(self, model_bytes: bytes, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.enable_mem_pattern = True
        options.enable_cpu_mem_arena = True
        options.add_session_config_entry(SPIN_STOP, "0" if self.spin_between_calls else "1")
        return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"]), options

    def __call__(self, feeds: Feeds, threads: int) -> np.ndarray:
        if threads != self.threads:
            self.session, options = self._session(self.model_bytes, threads)
            self.threads = threads
            self.settings = {"graph_optimization_level": options.graph_optimization_level.name,
                             "execution_mode": options.execution_mode.name, "intra_op_num_threads": options.intra_op_num_threads,
                             "inter_op_num_threads": options.inter_op_num_threads, "enable_mem_pattern": options.enable_mem_pattern,
                             "enable_cpu_mem_arena": options.enable_cpu_mem_arena,
                             SPIN_STOP: self.session.get_session_options().get_session_config_entry(SPIN_STOP), "providers": self.session.get_providers()}
        return self.session.run(None, feeds)[0]

    def layer_outputs(self, feeds: Feeds, threads: int) -> list[LayerOutput]:
        """Every node's output on `feeds`, in the graph's order: a copy of the graph with each node's output a graph output."""
        import onnx

        model = onnx.load_from_string(self.model_bytes)
        have = {o.name for o in model.graph.output}
        names = [o for n in model.graph.node for o in n.output if o and o not in have]
        model.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
        session, _ = self._session(model.SerializeToString(), threads)
        values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        return [summary(n.name or n.output[0], n.op_type, [values[o] for o in n.output if o in values],
                        all_finite(values[i] for i in n.input if i in values))
                for n in model.graph.node if any(o in values for o in n.output)]

    def metrics(self) -> dict:
        return {"runtime_threads": self.threads, "runtime_settings": self.settings}


def initializer_bytes(model) -> int:
    """Bytes of the graph's weights (initializers), as the session is handed them."""
    return sum(_nbytes(t) for t in model.graph.initializer)


# Ops between a stored table and its gather (dequantizing it or changing its type or shape).
_THROUGH = ("DequantizeLinear", "Cast", "Reshape", "Mul", "Sub")


def table_bytes(model) -> int:
    """Bytes of the initializers the graph's gathers read rows from (the tables, with their scales)."""
    sizes = {t.name: _nbytes(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    seen: set[str] = set()

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        node = producer.get(name)
        if node is not None and node.op_type in _THROUGH:
            for i in node.input:
                walk(i)

    for node in model.graph.node:
        if node.op_type in ("Gather", "GatherBlockQuantized"):
            for position, name in enumerate(node.input):
                if position != 1:  # input 1 holds the ids
                    walk(name)
    return sum(sizes[name] for name in seen if name in sizes)


def _nbytes(tensor) -> int:
    """Stored bytes: raw data as held (4-bit types packed two to a byte; numpy would unpack them)."""
    if tensor.raw_data:
        return len(tensor.raw_data)
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor).nbytes


def activation_products(model) -> list[str]:
    """Names of the MatMul nodes whose inputs are both activations (no initializer): left fp32."""
    weights = {t.name for t in model.graph.initializer}
    constants = {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and not any(i in weights | constants for i in n.input)]


def _constant_shapes(model) -> dict[str, list[int]]:
    """Each constant tensor's shape: the initializers and the outputs of Constant nodes."""
    shapes = {t.name: list(t.dims) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            if value is not None:
                shapes[n.output[0]] = list(value.dims)
    return shapes


def output_layers(model) -> list[str]:
    """Names of the MatMul and Gemm nodes whose constant weight has one output feature (a model's score layer):
    a MatMul's `[in, 1]`, a Gemm's `[in, 1]` (or `[1, in]` with transB). Found by the rule, not by a layer's name."""
    shapes = _constant_shapes(model)

    def one_wide(node) -> bool:
        weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
        if weight is None or len(weight) != 2:
            return False
        trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
        return (weight[0] if trans_b else weight[1]) == 1

    return [n.name for n in model.graph.node if n.op_type in ("MatMul", "Gemm") and one_wide(n)]


def kept_fp32(model, output_layer: str, products: bool = True) -> dict[str, str]:
    """The nodes a quantizing ONNX Runtime backend leaves fp32 (its `nodes_to_exclude`, in order) and why, for the
    record: the activation products (`products`), and the score layer with `backend.output_layer=fp32`."""
    why = {name: "MatMul of two activations: int8 on both inputs multiplies their rounding errors"
           for name in (activation_products(model) if products else [])}
    if output_layer == "fp32":
        why.update({name: OUTPUT_LAYER_WHY for name in output_layers(model)})
    return why


def preprocessed(onnx_path: Path, workdir: Path) -> Path:
    """ONNX Runtime's recommended step before quantizing (`quant_pre_process`: shape inference and graph
    optimization), so the quantizer sees each tensor's shape."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out = workdir / "preprocessed.onnx"
    quant_pre_process(str(onnx_path), str(out), skip_symbolic_shape=True)
    return out


class OrtBackend(ToolkitBackend):
    toolkit = EXTRA
    best_triangle = "fold"  # the deploy form's triangle: a Gather on axis 1 is ONNX Runtime's slow spot (docs/toolkits.md)
    modules = ("onnx", "onnxruntime", "onnxruntime.quantization")

    # whether `quantize` starts from ONNX Runtime's pre-processed graph (its node names are that graph's)
    preprocesses: ClassVar[bool] = False

    def reference_runner(self, onnx_path: Path, workdir: Path) -> OrtRunner:
        import onnx

        path = preprocessed(onnx_path, workdir) if self.preprocesses else onnx_path
        return OrtRunner(onnx.load(str(path)).SerializeToString(), self.cfg.spin_between_calls)

    def quantize(self, onnx_path: Path, workdir: Path, calibration: list[Feeds]) -> tuple[Path, dict[str, str]]:
        """The quantized model's path (ONNX Runtime's quantization API), and the nodes it left fp32 with why (the
        record's `ort_kept_fp32`); fp32 returns `onnx_path` and nothing."""
        raise NotImplementedError

    def build(self, onnx_path: Path, workdir: Path, calibration: list[Feeds]) -> tuple[Callable[[Feeds, int], np.ndarray], int, int, dict]:
        import onnx

        path, kept = self.quantize(onnx_path, workdir, calibration)
        model = onnx.load(str(path))
        details = {"runtime": f"onnxruntime {_version()} CPUExecutionProvider", **({"ort_kept_fp32": kept} if kept else {}),
                   "onnx_ops": dict(sorted(Counter(n.op_type for n in model.graph.node).items()))}
        return OrtRunner(model.SerializeToString(), self.cfg.spin_between_calls), initializer_bytes(model), table_bytes(model), details


def _version() -> str:
    import onnxruntime

    return onnxruntime.__version__
