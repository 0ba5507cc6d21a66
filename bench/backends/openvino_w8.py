"""`openvino_w8`: NNCF's weight compression (`nncf.compress_weights`, INT8_ASYM per output channel) of the
exported twin in OpenVINO: Linear weights and tables int8 in memory, computed in fp32; no calibration.
The score layer (one output feature) stays fp32 with `backend.output_layer=fp32`, the default: one output channel's
scale is its whole input's, a wide input's beside small ones (bench.backends.toolkit.OUTPUT_LAYER_WHY)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ov_runtime import OvBackend, output_layers
from bench.backends.toolkit import OUTPUT_LAYER_WHY, ToolkitConfig
from bench.registry import register


@dataclass
class OpenvinoW8Config(ToolkitConfig):
    name: str = "openvino_w8"
    output_layer: str = "fp32"  # fp32 | int8: the score layer (one output feature) kept fp32, or quantized like the rest


@register("backend", "openvino_w8", config=OpenvinoW8Config, in_sweeps=False, toolkit="openvino")
class OpenvinoW8Backend(OvBackend):
    quantizes = "Linear weights and tables int8 asymmetric per channel, weight-only (nncf.compress_weights)"

    def transform(self, model, calibration):
        import nncf

        kept = {name: OUTPUT_LAYER_WHY for name in output_layers(model)} if self.cfg.output_layer == "fp32" else {}
        compressed = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM,
                                           ignored_scope=nncf.IgnoredScope(names=list(kept)) if kept else None)
        return compressed, ({"nncf_ignored_scope": list(kept), "nncf_kept_fp32": kept} if kept else {})
