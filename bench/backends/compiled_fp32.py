"""`compiled_fp32`: the exported twin compiled by `torch.compile` (inductor, freezing on), unquantized: torch's own
compiled fp32 speed, beside eager fp32. It splits "compiled" from "quantized" for `inc_int8_static`, which
compiles the same twin with its Linear layers int8, as `onnxruntime_fp32` and `openvino_fp32` do for their
runtimes: a quantized row's speedup over its fp32 runtime row is the quantization's part.

The calls: `torch.export.export` of the twin (bench.backends.twin; `backend.export` and `backend.triangle` as for
every toolkit backend, batch and bag widths dynamic), then `torch.compile` of the exported module, each call
under `torch._inductor.config.patch(freezing=True)` (weights folded into the compiled code as constants, the
Linear layers lowered to oneDNN's packed fp32 kernels). `prepare` makes the first call, so its compilation is
in the build time (`prepare_seconds`), not in the timed calls; another batch size compiles once more in the
warm-up. Inputs: scoring hands the module `(dense, KJT)`; the timed calls hand it the twin's id matrices,
built before timing. Model bytes: the exported module's parameters (fp32)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from bench.backends.backend import NotApplicable
from bench.backends.inc_int8_static import CompiledTwin, CompiledTwinBackend, exported_twin
from bench.backends.toolkit import ToolkitConfig, check_export_options, stacking_of, twin_of
from bench.batch import Batch
from bench.metrics import TOOLKIT
from bench.registry import register

BEST_TRIANGLE = "gather"  # the deploy form's triangle under inductor when backend.triangle=auto (docs/toolkits.md)


@dataclass
class CompiledFp32Config(ToolkitConfig):
    name: str = "compiled_fp32"


@register("backend", "compiled_fp32", config=CompiledFp32Config, in_sweeps=False, toolkit="torch")
class CompiledFp32Backend(CompiledTwinBackend):
    devices = ("cpu",)  # inductor's CPU code with oneDNN's packed fp32 kernels
    not_shardable = "it runs an exported graph in one process"
    timed_input_format = "the exported twin's dense id matrices (torch tensors), built before timing"

    def check(self) -> None:
        check_export_options(self.cfg)

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        if not calibration_batches:
            raise NotApplicable(f"backend {self.cfg.name!r} builds its exported twin from a calibration batch, and none was given")
        twin = twin_of(model, calibration_batches, self.cfg, BEST_TRIANGLE, stacking_of(self.cfg, None)[0])
        inputs = [twin.inputs(b.dense, b.sparse) for b in calibration_batches[:1]]
        with torch.no_grad():
            program, _ = exported_twin(twin, inputs)
            module = CompiledTwin(program.module(), twin, compile=True)
            module(*inputs[0])  # compiles now, inside the build time, not in the first scored or timed call
        return module

    def job_metrics(self, prepared: nn.Module) -> dict[str, Any]:
        return {TOOLKIT: "torch", "quantizes": "nothing (compiled fp32 reference)", "compiled": True, **prepared.details}
