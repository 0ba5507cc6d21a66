"""`inc_int8_static`: Intel Neural Compressor's static int8 through torch.export (PT2E), run under `torch.compile`
with inductor's freezing: the exported twin (bench.backends.twin; the deploy form of bench.backends.deploy by
default, `backend.export` and `backend.triangle` as for the other toolkit backends) with its Linear layers int8.
`compiled_fp32` compiles the same twin unquantized: its speedup is the compilation's part of this one's.

The calls, all Neural Compressor's own (`neural_compressor.torch`): `export` (torch.export of the twin, batch and
bag widths dynamic), `prepare(graph, get_default_static_config())` (observers placed by PyTorch's
X86InductorQuantizer), a forward per calibration batch of the workload, `convert` (quantize/dequantize pairs
around each Linear: weights int8 per output channel, inputs uint8 per tensor). Tables stay fp32 gathers and the
interaction's matrix product fp32 (the quantizer leaves both alone). The score layer (a Linear with one output feature)
stays fp32 with `backend.output_layer=fp32`, the default (its module in Neural Compressor's fp32 op config, the record's
`inc_kept_fp32`), else is quantized like the rest.

Only `torch.compile` (freezing on) turns the quantize/dequantize pairs into oneDNN int8 Linear kernels; the
converted graph run eagerly computes in fp32 with extra rounding steps, slower than fp32 (measured here: 0.74-0.78x).
`backend.compile=false` times that eager graph. The first call of each new input shape compiles (seconds to
a minute on 2 cores); `prepare` makes the first call itself, so the build time includes it and the timed
calls do not. Freezing is switched on around each call (`torch._inductor.config.patch`), not for the process:
passed as `torch.compile(options=...)` instead, inductor failed on torch 2.14.1 ("onednn.qlinear_prepack is
not an OpOverload").

Inputs: scoring hands the module `(dense, KJT)`; the timed calls hand it the twin's dense id matrices, built
before timing (`timed_inputs`), as the KJTs are for the torch backends. Torch's intra-op threads are the job's.
Model bytes: the converted graph's parameters (fp32 tables and weights, which the runtime keeps); the int8
copies that freezing packs for oneDNN are inside the compiled code, not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.backends.backend import Backend, NotApplicable
from bench.backends.deploy import StackedBags
from bench.backends.toolkit import OUTPUT_LAYER_WHY, ToolkitConfig, check_export_options, missing, require, stacking_of, twin_of
from bench.backends.twin import GatherBags, Twin
from bench.batch import Batch
from bench.metrics import RUNTIME_REFERENCE, TOOLKIT
from bench.registry import register

# the deploy form's triangle under inductor when backend.triangle=auto (docs/toolkits.md)
BEST_TRIANGLE = "gather"
QUANTIZES = ("Linear layers int8 (weights per output channel, inputs uint8 per tensor, static: calibrated); "
             "tables and the interaction fp32")


@dataclass
class IncInt8StaticConfig(ToolkitConfig):
    name: str = "inc_int8_static"
    output_layer: str = "fp32"  # fp32 | int8: the score layer (one output feature) kept fp32, or quantized like the rest
    compile: bool = True  # torch.compile with freezing (int8 kernels); false: the converted graph run eagerly


def dynamic_shapes(twin: Twin, example: Sequence[torch.Tensor]) -> tuple:
    """torch.export's dynamic dims of the twin's inputs: the batch everywhere, each bag matrix's width."""
    batch = torch.export.Dim("batch", min=1)
    widths = tuple({0: batch, 1: torch.export.Dim(f"width_{i}", min=1)} if wide else {0: batch}
                   for i, wide in enumerate(twin.layout.dynamic_width()))
    return ({0: batch}, widths)  # the twin's signature: (dense, *ids)


def export_example(twin: Twin, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The twin's inputs with every bag matrix at least 2 wide (a column of its zero row's id added, which adds
    nothing to the sum): torch.export fixes a dimension its example gives as 1, and a bag matrix is 1 wide until
    a batch holds a longer bag. One-hot columns (the deploy form) keep their fixed width."""
    dense, *ids = inputs
    wide = [m if kind != "bag" or m.shape[1] > 1 else torch.cat([m, torch.full_like(m, pads[0])], dim=1)
            for (kind, _, _, pads), m in zip(twin.layout.specs, ids)]
    return (dense, *wide)


def gather_tables(twin: Twin) -> dict[str, dict]:
    """The twin's gather weights as bench.backends.tables reads them: each plain table, or each stack."""
    tables = {name: w for m in twin.modules() if isinstance(m, GatherBags) for name, w in m.tables.items()}
    tables.update({"+".join(names): w for m in twin.modules() if isinstance(m, StackedBags) for names, w in zip(m.stacked_tables, m.stacks)})
    return {name: {"dtype": "fp32", "rows": int(w.shape[0]), "row_bytes": int(w.shape[1]) * w.element_size()} for name, w in tables.items()}


def output_linears(twin: nn.Module) -> list[str]:
    """The twin's Linear modules with one output feature (its score layer), by name: found by the rule, not by a name."""
    return [name for name, m in twin.named_modules() if isinstance(m, nn.Linear) and m.out_features == 1]


def exported_twin(twin: Twin, calibration: Sequence[tuple[torch.Tensor, ...]]):
    """torch.export of the twin (batch and bag widths dynamic), with the example it was exported from."""
    example = export_example(twin, calibration[0])
    return torch.export.export(twin, example, dynamic_shapes=dynamic_shapes(twin, example)), example


class CompiledTwin(nn.Module):
    """The converted twin behind the harness's signature: `module(dense, kjt)` (scoring) or `module(dense, *ids)`
    (timing: the id matrices built beforehand)."""

    def __init__(self, graph: nn.Module, twin: Twin, compile: bool) -> None:
        super().__init__()
        self.graph = graph  # holds the weights (counted as the model's bytes)
        self.layout = twin.layout  # not the twin: its own copy of the weights is freed once exported
        self.details = dict(twin.details)
        self.__dict__["_run"] = torch.compile(graph) if compile else graph  # not a submodule: the same weights
        self.compiled = compile
        self._tables = gather_tables(twin)

    def dense_inputs(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> tuple[torch.Tensor, ...]:
        return self.layout(dense, sparse)

    def stored_tables(self) -> dict[str, dict]:
        """The tables as the graph holds them: fp32 gather weights, each with its zero row (bench.backends.tables)."""
        return self._tables

    def train(self, mode: bool = True) -> "CompiledTwin":
        # an exported graph refuses train()/eval() (torchao's PT2E guard); it is an inference graph either way
        self.training = False
        return self

    def forward(self, dense: torch.Tensor, *rest) -> torch.Tensor:
        ids = self.dense_inputs(dense, rest[0]) if len(rest) == 1 and isinstance(rest[0], KeyedJaggedTensor) else (dense, *rest)
        if not self.compiled:
            return self._run(*ids)
        with torch._inductor.config.patch(freezing=True):
            return self._run(*ids)


class CompiledTwinBackend(Backend):
    """What the backends that run the exported twin as a compiled torch module (`CompiledTwin`) share."""

    def scores_depend_on_batch(self) -> bool:
        return True  # compiled kernels pick their blocking by batch shape: last-bit differences between batch sizes

    def timed_inputs(self, prepared: nn.Module, inputs: list[tuple]) -> list[tuple]:
        return [prepared.dense_inputs(dense, sparse) for dense, sparse in inputs]


@register("backend", "inc_int8_static", config=IncInt8StaticConfig, in_sweeps=False, toolkit="inc")
class IncInt8StaticBackend(CompiledTwinBackend):
    devices = ("cpu",)  # the oneDNN int8 kernels inductor lowers to
    not_shardable = "it runs an exported graph in one process"
    timed_input_format = "the exported twin's dense id matrices (torch tensors), built before timing"

    def check(self) -> None:
        check_export_options(self.cfg)

    def unsupported_reason(self, device: torch.device) -> str | None:
        # a missing extra skips the job before the model is trained or loaded
        return super().unsupported_reason(device) or missing(("neural_compressor",), "inc", self.cfg.name)

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        if not calibration_batches:
            raise NotApplicable(f"backend {self.cfg.name!r} calibrates static int8 on the calibration batches, and none was given")
        require("neural_compressor", "inc", self.cfg.name)
        from neural_compressor.torch.export import export
        from neural_compressor.torch.quantization import StaticQuantConfig, convert, get_default_static_config, prepare

        twin = twin_of(model, calibration_batches, self.cfg, BEST_TRIANGLE, stacking_of(self.cfg, None)[0])
        calibration = [twin.inputs(b.dense, b.sparse) for b in calibration_batches]  # contiguous: export fixes strides
        with torch.no_grad():
            example = export_example(twin, calibration[0])
            graph = export(twin, example, dynamic_shapes=dynamic_shapes(twin, example))
            config = get_default_static_config()
            kept = {name: OUTPUT_LAYER_WHY for name in output_linears(twin)} if self.cfg.output_layer == "fp32" else {}
            for name in kept:
                config.set_local(name, StaticQuantConfig(w_dtype="fp32", act_dtype="fp32"))
            observed = prepare(graph, config)
            for inputs in calibration:
                observed(*inputs)
            module = CompiledTwin(convert(observed), twin, self.cfg.compile)
            if kept:
                module.details["inc_kept_fp32"] = kept
            module(*calibration[0])  # compiles now, inside the build time, not in the first scored or timed call
        return module

    def job_metrics(self, prepared: nn.Module) -> dict[str, Any]:
        return {TOOLKIT: "inc", "quantizes": QUANTIZES, "compiled": prepared.compiled, RUNTIME_REFERENCE: "compiled_fp32", **prepared.details}
