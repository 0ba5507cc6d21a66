"""`openvino_int8`: NNCF's post-training quantization (`nncf.quantize`) of the exported twin in OpenVINO:
int8 weights and activations, scales from NNCF's own statistics over the workload's calibration batches.

The MatMuls of two activations (DLRM's interaction) are in NNCF's `ignored_scope`: quantized per tensor,
the interaction cost ΔAUC -0.047 in a prototype on the default model. Activations are quantized asymmetrically
(`QuantizationPreset.MIXED`): with NNCF's default preset (symmetric activations) the tiny workload's
trained DLRM fell to AUC 0.506 (ΔAUC -0.199), with MIXED its ΔAUC is inside the gate's margin.

So is the score layer (one output feature) with `backend.output_layer=fp32`, the default (bench.backends.toolkit.OUTPUT_LAYER_WHY).
The record says what stayed fp32 and why (`nncf_kept_fp32`). A model that returns probabilities is quantized as it
ends, at its sigmoid; the harness's read-back to logits runs after the runtime (bench.backends.toolkit.deployed_model):
inside the graph NNCF quantized its clamp and its 1 - p, and a DCN-v2-style ranker's smallest probabilities became
0, their logits -inf."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ov_runtime import OvBackend, activation_products, output_layers
from bench.backends.toolkit import OUTPUT_LAYER_WHY, ToolkitConfig
from bench.registry import register


@dataclass
class OpenvinoInt8Config(ToolkitConfig):
    name: str = "openvino_int8"
    output_layer: str = "fp32"  # fp32 | int8: the score layer (one output feature) kept fp32, or quantized like the rest


@register("backend", "openvino_int8", config=OpenvinoInt8Config, in_sweeps=False, toolkit="openvino")
class OpenvinoInt8Backend(OvBackend):
    quantizes = "weights int8 symmetric, activations int8 asymmetric (nncf.quantize, MIXED preset, calibrated); activation x activation MatMuls fp32"

    def transform(self, model, calibration):
        import nncf

        kinds = {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()}
        # what stays fp32, and why (the rule that found it in the graph)
        kept = {name: f"{kinds[name]} of two activations: int8 on both inputs multiplies their rounding errors" for name in activation_products(model)}
        if self.cfg.output_layer == "fp32":
            kept.update({name: OUTPUT_LAYER_WHY for name in output_layers(model)})
        ignored = list(kept)
        quantized = nncf.quantize(model, nncf.Dataset(calibration), subset_size=len(calibration), preset=nncf.QuantizationPreset.MIXED,
                                  ignored_scope=nncf.IgnoredScope(names=ignored) if ignored else None)
        return quantized, {"nncf_ignored_scope": ignored, "nncf_kept_fp32": kept}
