"""`openvino_int8`: NNCF's post-training quantization (`nncf.quantize`) of the exported twin in OpenVINO:
int8 weights and activations, scales from NNCF's own statistics over the workload's calibration batches.

The MatMuls of two activations (DLRM's interaction) are in NNCF's `ignored_scope`: quantized per tensor,
the interaction cost ΔAUC -0.047 in a prototype on the default model. Activations are quantized asymmetrically
(`QuantizationPreset.MIXED`): with NNCF's default preset (symmetric activations) the tiny workload's
trained DLRM fell to AUC 0.506 (ΔAUC -0.199), with MIXED its ΔAUC is inside the gate's margin."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ov_runtime import OvBackend, activation_products
from bench.backends.toolkit import ToolkitConfig
from bench.registry import register


@dataclass
class OpenvinoInt8Config(ToolkitConfig):
    name: str = "openvino_int8"


@register("backend", "openvino_int8", config=OpenvinoInt8Config, in_sweeps=False, toolkit="openvino")
class OpenvinoInt8Backend(OvBackend):
    quantizes = "weights int8 symmetric, activations int8 asymmetric (nncf.quantize, MIXED preset, calibrated); activation x activation MatMuls fp32"

    def transform(self, model, calibration):
        import nncf

        ignored = activation_products(model)
        quantized = nncf.quantize(model, nncf.Dataset(calibration), subset_size=len(calibration), preset=nncf.QuantizationPreset.MIXED,
                                  ignored_scope=nncf.IgnoredScope(names=ignored) if ignored else None)
        return quantized, {"nncf_ignored_scope": ignored}
