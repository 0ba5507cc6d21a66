"""`quark_w8a8`: AMD Quark's eager-mode post-training quantization of the model as it is (no export): every Linear
W8A8 (weights int8 per output channel, symmetric; inputs int8 per tensor, symmetric, static: calibrated on the
workload's calibration batches), every table's rows per row (`backend.tables`: uint4 asymmetric, Quark's DLRM-v2
recipe, or int8).

The calls, Quark's own (`quark.torch`): `ModelQuantizer(QConfig(...)).quantize_model(model, batches)`, which swaps
each `nn.Linear` and each `nn.EmbeddingBag` (torchrec's tables, inside their EmbeddingBagCollection) for Quark's
quantized module and runs the calibration forwards, then `ModelQuantizer.freeze`. By hand: a one-line wrapper
so Quark's calibration loop, which calls `model(batch)`, hands the model `(dense, KJT)`.

Quark runs eagerly in PyTorch as fake quantization: the frozen weights are their dequantized fp32 values, and
each Linear's input is quantized and dequantized on every call. So this backend measures Quark's accuracy on
equal terms, and its eager speed (slower than fp32: 0.66x measured here); its bytes are fp32 bytes.

Quark lives in its own environment (`make setup-quark`: about 30 packages over the stack, onnx pinned to 1.22.0,
`transformers`, which `quark.torch` imports without declaring it; its first import compiles C++ kernels). In the
default environment the job is `skipped` naming that. Its records join the others' through the same
`reports_dir` and `cache_dir`: the same workload and the same cached trained weights.
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from bench.backends.backend import Backend, NotApplicable
from bench.backends.linear import check_choice
from bench.backends.modules import materialize_random_tables, require_embedding_bag_collections
from bench.batch import Batch
from bench.config import BackendConfig
from bench.metrics import TOOLKIT
from bench.registry import register

TABLES = ("uint4", "int8")
INSTALL = "its own environment: `make setup-quark`, then run with .venv-quark/bin/python (or pip install -e '.[quark]')"


@dataclass
class QuarkW8A8Config(BackendConfig):
    name: str = "quark_w8a8"
    tables: str = "uint4"  # uint4 (asymmetric per row, the DLRM-v2 recipe) | int8 (symmetric per row)


class _BatchCall(nn.Module):
    """Quark calls `model(batch)` on each calibration item: this hands the model the batch's own inputs."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.model(*batch.model_inputs())


def quark_config(tables: str):
    """Quark's QConfig: W8A8 for every Linear (the global config), rows per row for every EmbeddingBag."""
    from quark.torch.quantization.config.config import (
        Int8PerChannelSpec,
        Int8PerTensorSpec,
        QConfig,
        QLayerConfig,
        Uint4PerChannelSpec,
    )

    linear = QLayerConfig(input_tensors=Int8PerTensorSpec(symmetric=True).to_quantization_spec(),
                          weight=Int8PerChannelSpec(ch_axis=0, symmetric=True).to_quantization_spec())
    rows = (Uint4PerChannelSpec(ch_axis=0, symmetric=False, is_dynamic=False) if tables == "uint4"
            else Int8PerChannelSpec(ch_axis=0, symmetric=True)).to_quantization_spec()
    return QConfig(global_quant_config=linear, layer_type_quant_config={nn.EmbeddingBag: QLayerConfig(weight=rows)})


@register("backend", "quark_w8a8", config=QuarkW8A8Config, in_sweeps=False, toolkit="quark")
class QuarkW8A8Backend(Backend):
    devices = ("cpu",)
    not_shardable = "Quark's quantized EmbeddingBags replace torchrec's tables, which torchrec's sharders do not take"

    def check(self) -> None:
        check_choice(self.cfg.tables, TABLES, "backend.tables")

    def unsupported_reason(self, device: torch.device) -> str | None:
        # a missing Quark skips the job before the model is trained or loaded
        if importlib.util.find_spec("quark") is None:
            return f"backend {self.cfg.name!r} needs AMD Quark, not installed here: it lives in {INSTALL}"
        return super().unsupported_reason(device)

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        self.check()
        if not calibration_batches:
            raise NotApplicable(f"backend {self.cfg.name!r} calibrates its static int8 activations on the calibration batches, and none was given")
        try:
            from quark.torch import ModelQuantizer
        except ImportError as exc:
            raise NotApplicable(f"backend {self.cfg.name!r} needs AMD Quark ({exc}), which lives in {INSTALL}") from exc
        model = materialize_random_tables(copy.deepcopy(model)).to(device).eval()
        require_embedding_bag_collections(model, self.cfg.name)
        quantizer = ModelQuantizer(quark_config(self.cfg.tables))
        with torch.no_grad():
            wrapped = quantizer.quantize_model(_BatchCall(model), [b.to(device) for b in calibration_batches])
            return ModelQuantizer.freeze(wrapped).model.eval()

    def scores_depend_on_batch(self) -> bool:
        return False  # static activations: a sample's score does not depend on its batch

    def job_metrics(self, prepared: nn.Module) -> dict[str, Any]:
        return {TOOLKIT: "quark", "quantizes": f"Linear W8A8 (static), tables {self.cfg.tables} per row; "
                "fake-quantized in eager PyTorch (fp32 kernels and bytes)"}
