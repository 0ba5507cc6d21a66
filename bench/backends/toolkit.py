"""What the toolkit backends (ONNX Runtime, OpenVINO with NNCF, ...) share: a lazy import that names the
missing extra, the exported twin as ONNX, and a module that runs a toolkit's runtime behind the
harness's forward signature.

A toolkit backend quantizes the exported twin (bench.backends.twin) with the toolkit's own calls and
calibration, and runs it in the toolkit's own runtime. Its module (`RuntimeModule`) keeps the model's
forward signature for scoring, `module(dense, kjt)`, and also takes the runtime's own feeds, built
once before timing (`ToolkitBackend.timed_inputs`), as a torch backend's KJTs are. The runtime
follows torch's intra-op thread count at each call: the job's timed thread count while it is timed.
"""

from __future__ import annotations

import importlib
import importlib.util
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.backends.backend import Backend, NotApplicable
from bench.backends.deploy import FORMS as EXPORT_FORMS
from bench.backends.layer_outputs import LayerOutput
from bench.backends.linear import OUTPUT_CHOICES, check_choice
from bench.backends.deploy import STACKINGS, TRIANGLES, export_twin
from bench.backends.twin import Twin
from bench.batch import Batch, concat_batches, take_rows
from bench.config import BackendConfig
from bench.errors import UserError
from bench.metrics import RUNTIME_REFERENCE, TOOLKIT
from bench.models.logits import CLAMP, LogitsOf, clamped_logit


@dataclass
class ToolkitConfig(BackendConfig):
    """The options every backend that runs the exported twin shares."""

    # deploy: the graph a deployer ships (bench.backends.deploy: stacked tables, one-hot gathers, the triangle
    # without transposes); plain: the twin as torchrec's code exports line by line (to show the difference)
    export: str = "deploy"
    # how the deploy form takes the interaction's upper triangle: gather or fold; auto: the runtime's measured best
    triangle: str = "auto"
    # the deploy form's tables: stacked (one weight per dim, one gather) or per_table (one weight and gather each);
    # auto: per_table where the backend's quantizer scales a gathered table per tensor, else stacked
    stacking: str = "auto"


# `backend.output_layer` of the quantizing toolkit backends (a field of each one's config, default fp32): the score
# layer, a Linear with one output feature, kept fp32 or quantized like the rest. fp32 is the choice the harness's own
# backends make (`backend.mlp_output=fp32`), here found in the exported graph by that rule, never by a layer's name.
OUTPUT_LAYER_WHY = ("the score layer (one output feature; backend.output_layer=fp32): it reads every feature side by side, and a "
                    "scale shared across its input (int8 activations per tensor, its one output column's weight scale or block) "
                    "rounds the small ones away beside a wide one (DeepFM's factorization-machine term, up to ~1,500, beside "
                    "features below 10)")


def check_export_options(cfg) -> None:
    """backend.export / backend.triangle / backend.output_layer, as one-line UserErrors."""
    if hasattr(cfg, "output_layer"):
        check_choice(cfg.output_layer, OUTPUT_CHOICES, "backend.output_layer")
    if cfg.export not in EXPORT_FORMS:
        raise UserError(f"backend.export={cfg.export!r}: choose one of {', '.join(EXPORT_FORMS)}")
    if cfg.triangle not in ("auto", *TRIANGLES):
        raise UserError(f"backend.triangle={cfg.triangle!r}: choose one of auto, {', '.join(TRIANGLES)}")
    if cfg.stacking not in ("auto", *STACKINGS):
        raise UserError(f"backend.stacking={cfg.stacking!r}: choose one of auto, {', '.join(STACKINGS)}")


def stacking_of(cfg, per_tensor_tables: str | None) -> tuple[str, str]:
    """The deploy form's tables (`backend.stacking`) and why: `auto` keeps the tables apart where the quantizer
    scales a gathered table per tensor (`per_tensor_tables` says how), as a stacked weight would share one scale."""
    if cfg.stacking != "auto":
        return cfg.stacking, f"backend.stacking={cfg.stacking}"
    if per_tensor_tables:
        return "per_table", f"auto: {per_tensor_tables}; stacked, every table would share one scale"
    return "stacked", "auto: the quantizer keeps a scale per row (or none), so stacking changes no table's scale"


def twin_of(model: nn.Module, calibration_batches: Sequence[Batch], cfg, best_triangle: str, stacking: str = "stacked") -> Twin:
    """The exported twin in the form the backend config asks for (`backend.export`, `backend.triangle`; `stacking` resolved)."""
    triangle = best_triangle if cfg.triangle == "auto" else cfg.triangle
    return export_twin(model, calibration_batches[0], form=cfg.export, triangle=triangle, calibration=calibration_batches,
                       stacking=stacking)

Feeds = dict[str, np.ndarray]


def install_line(extra: str) -> str:
    return f"pip install -e '.[{extra}]'"


def missing(modules: Sequence[str], extra: str, backend: str) -> str | None:
    """Why the backend cannot run (a module of its extra is not installed), without importing anything; None: all there."""
    absent = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    return f"backend {backend!r} needs {', '.join(absent)}, not installed: {install_line(extra)}" if absent else None


def require(module: str, extra: str, backend: str):
    """`import module`, or NotApplicable naming the pip extra that installs it (the job is `skipped`)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise NotApplicable(f"backend {backend!r} needs {module} ({exc}): {install_line(extra)}") from exc


class MatMulLinear(nn.Linear):
    """A Linear that exports as MatMul + Add instead of Gemm: ONNX Runtime's dynamic int8 quantizer
    rewrites MatMul (to MatMulInteger) and leaves Gemm in fp32. Same weights, same arithmetic."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.matmul(x, self.weight.t())
        return out + self.bias if self.bias is not None else out


def _linears_as_matmul(module: nn.Module) -> None:
    for name, child in module.named_children():
        if type(child) is nn.Linear:
            child.__class__ = MatMulLinear  # the same parameters; only the exported node changes
        else:
            _linears_as_matmul(child)


def export_onnx(twin: Twin, example: tuple[torch.Tensor, ...], path: Path) -> Path:
    """The twin as an ONNX file (TorchScript exporter: about 0.1 s where the dynamo one takes 5 s on a
    tiny model), batch and bag widths dynamic, Linears as MatMul + Add. The twin itself is not changed."""
    import copy

    graph = copy.deepcopy(twin)
    _linears_as_matmul(graph)
    names = twin.input_names()
    axes = {"dense": {0: "batch"}, "score": {0: "batch"},
            **{f: {0: "batch", 1: f"ids_{f}"} if wide else {0: "batch"} for f, wide in zip(twin.features, twin.layout.dynamic_width())}}
    with torch.inference_mode(False), torch.no_grad():
        torch.onnx.export(graph, example, str(path), input_names=names, output_names=["score"], dynamic_axes=axes,
                          opset_version=20, dynamo=False)
    return path


def feeds_of(twin_inputs: tuple[torch.Tensor, ...], names: Sequence[str]) -> Feeds:
    return {name: t.numpy() for name, t in zip(names, twin_inputs)}


READ_BACK = ("the runtime returns the model's probabilities; the harness reads them as logits (log(p / (1 - p)), clamped) "
             "in fp32 after the call: that read-back is its scoring, not part of the graph a deployer ships, and quantized "
             "with it (its clamp and its 1 - p) rounded the smallest and largest probabilities to 0 and 1, whose logits are infinite")


def deployed_model(model: nn.Module) -> tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor] | None]:
    """The model a deployer exports, and the read-back the harness applies to its output after the runtime (None:
    none). A probabilities model read through the clamp (bench.models.logits) is exported as it ends, at its
    sigmoid; one read before a trailing nn.Sigmoid module exports that pre-sigmoid value, with no read-back."""
    if isinstance(model, LogitsOf) and model.score_read() == CLAMP:
        return model.model, clamped_logit
    return model, None


class RuntimeModule(nn.Module):
    """A toolkit runtime behind the harness's signature: `module(dense, kjt)` (scoring) or `module(feeds)`
    (timing: the feeds built beforehand). `runner(feeds, threads)` runs the runtime at that thread count;
    `read_back` turns its output into the harness's logits (bench.backends.toolkit.deployed_model)."""

    def __init__(self, twin: Twin, runner: Callable[[Feeds, int], np.ndarray], runtime_bytes: int, table_bytes: int,
                 details: dict[str, Any], read_back: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.read_back = read_back
        self.layout, self.names = twin.layout, twin.input_names()  # not the twin: its fp32 weights are freed
        self.runner = runner
        self._runtime_bytes, self._table_bytes = runtime_bytes, table_bytes
        # what the build found (the graph's operators, ...): the module is reused by the jobs of other batch sizes,
        # each with a backend object of its own, so the record's details live here, not in the backend
        self.details = {**twin.details, **details}

    def feeds(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> Feeds:
        return feeds_of(self.layout(dense.cpu(), sparse), self.names)

    def forward(self, first, sparse: KeyedJaggedTensor | None = None) -> torch.Tensor:
        feeds = first if sparse is None else self.feeds(first, sparse)
        out = torch.from_numpy(np.asarray(self.runner(feeds, torch.get_num_threads())))  # the exported output's shape
        return out if self.read_back is None else self.read_back(out)

    def runtime_bytes(self) -> int:
        """The weights as the runtime was handed them (bench.measure.memory reads this)."""
        return self._runtime_bytes

    def runtime_table_bytes(self) -> int:
        """The part of them its gathers read rows from: the tables (bench.backends.tables reads this)."""
        return self._table_bytes


def batch_size_bound(module: RuntimeModule, traced: Batch) -> None:
    """NotApplicable where the runtime does not give one score per sample at a batch size other than the one the
    export was traced at: a graph that kept that size as a constant (torchrec's sequence-first transformer folds it
    into its attention's Reshape) fails, or silently returns the traced count, at every other batch size."""
    rows = len(traced)
    other = rows // 2 + 1 if rows > 2 else rows + 1  # any size but the traced one
    batch = take_rows(concat_batches([traced, traced]), torch.arange(other))
    with torch.inference_mode():
        module(traced.dense, traced.sparse)  # at the traced size first: a runtime that fails there fails the job as itself
    try:
        with torch.inference_mode():
            scores = module(batch.dense, batch.sparse)
        got = f"{scores.reshape(-1).shape[0]} scores" if scores.reshape(-1).shape[0] != other else None
    except Exception as exc:  # noqa: BLE001 - the runtime's own error, named in the reason
        got = f"an error ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    if got is not None:
        raise NotApplicable(f"the exported graph keeps the batch size it was traced at ({rows} rows): at {other} rows the "
                            f"runtime gave {got}; the model's forward folds its batch size into a constant (a sequence-first "
                            "attention's Reshape), which this toolkit export cannot make dynamic")


class ToolkitBackend(Backend):
    """The shared steps: twin, export, the toolkit's own quantization (`build`), the runtime module."""

    devices = ("cpu",)
    not_shardable = "it runs in a toolkit's own runtime, in one process"
    timed_input_format = "the exported twin's dense id matrices as the runtime's feeds (numpy), built before timing"
    toolkit: ClassVar[str]  # the pip extra (and the family) of the backend
    modules: ClassVar[tuple[str, ...]]  # what it imports from that extra, lazily
    quantizes: ClassVar[str]  # what is integer, in the record
    # the deploy form's triangle when backend.triangle=auto: the runtime's faster one, measured (docs/toolkits.md)
    best_triangle: ClassVar[str] = "gather"
    # how the quantizer scales a gathered table when it scales it per tensor (None: per row, or not at all):
    # `backend.stacking=auto` then keeps the deploy form's tables apart
    per_tensor_tables: ClassVar[str | None] = None

    def check(self) -> None:
        check_export_options(self.cfg)

    def twin(self, model: nn.Module, calibration_batches: Sequence[Batch]) -> Twin:
        """The exported twin as this backend's config asks (`backend.export`, `triangle`, `stacking`); the record says
        which tables' form ran and why (`stacking`, `stacking_why`; the plain form keeps every table apart)."""
        stacking, why = stacking_of(self.cfg, self.per_tensor_tables)
        twin = twin_of(model, calibration_batches, self.cfg, self.best_triangle, stacking)
        if self.cfg.export != "plain":
            twin.details["stacking_why"] = why
        return twin

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        if not calibration_batches:
            raise NotApplicable(f"backend {self.cfg.name!r} builds its exported twin from a calibration batch, and none was given")
        self.load_toolkit()
        deployed, read_back = deployed_model(model)
        twin = self.twin(deployed, calibration_batches)
        calibration = [feeds_of(twin.inputs(b.dense, b.sparse), twin.input_names()) for b in calibration_batches]
        with tempfile.TemporaryDirectory(prefix="bench-toolkit-") as tmp:
            onnx_path = export_onnx(twin, twin.inputs(calibration_batches[0].dense, calibration_batches[0].sparse), Path(tmp) / "twin.onnx")
            built = self.build(onnx_path, Path(tmp), calibration)
        module = RuntimeModule(twin, *built, read_back=read_back).eval()
        if read_back is not None:
            module.details["score_read_outside"] = READ_BACK
        batch_size_bound(module, calibration_batches[0])
        return module

    def unsupported_reason(self, device: torch.device) -> str | None:
        # a missing extra skips the job before the model is trained or loaded
        return super().unsupported_reason(device) or missing(self.modules, self.toolkit, self.cfg.name)

    def load_toolkit(self) -> None:
        """Import the toolkit (NotApplicable naming the extra when it is missing or fails to import)."""
        for module in self.modules:
            require(module, self.toolkit, self.cfg.name)

    def build(self, onnx_path: Path, workdir: Path, calibration: list[Feeds]) -> tuple[Callable[[Feeds, int], np.ndarray], int, int, dict]:
        """The quantized model in the toolkit's runtime: `(runner(feeds, threads) -> scores, bytes the runtime
        is handed, the tables' share of them, details for the record)`; the runner's `metrics()` joins the record."""
        raise NotImplementedError

    def timed_inputs(self, prepared: nn.Module, inputs: list[tuple]) -> list[tuple]:
        return [(prepared.feeds(dense, sparse),) for dense, sparse in inputs]

    def reference_runner(self, onnx_path: Path, workdir: Path):
        """A runner of the fp32 exported graph in this toolkit's runtime, whose op names are the quantized graph's."""
        raise NotImplementedError

    def layer_outputs(self, prepared: nn.Module, fp32: nn.Module, calibration: Sequence[Batch],
                      batch: Batch) -> tuple[list[LayerOutput], list[LayerOutput]]:
        """Every op's output in the runtime: the quantized graph's, and the fp32 twin's exported again from `fp32`
        (as `prepare` exported it) and run unquantized in the same runtime."""
        feeds = prepared.feeds(batch.dense, batch.sparse)
        threads = torch.get_num_threads()
        twin = self.twin(deployed_model(fp32)[0], calibration)
        with tempfile.TemporaryDirectory(prefix="bench-toolkit-") as tmp:
            onnx_path = export_onnx(twin, twin.inputs(calibration[0].dense, calibration[0].sparse), Path(tmp) / "twin.onnx")
            reference = self.reference_runner(onnx_path, Path(tmp))
        return prepared.runner.layer_outputs(feeds, threads), reference.layer_outputs(feeds, threads)

    def job_metrics(self, prepared: nn.Module) -> dict[str, Any]:
        reference = f"{self.toolkit}_fp32"  # the same runtime unquantized: the quantization's part of the speedup is over it
        return {TOOLKIT: self.toolkit, "quantizes": self.quantizes, "runtime_bytes": prepared.runtime_bytes(),
                **({RUNTIME_REFERENCE: reference} if reference != self.cfg.name else {}),
                "runtime_table_bytes": prepared.runtime_table_bytes(), **prepared.details, **prepared.runner.metrics()}
