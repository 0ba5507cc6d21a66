"""`openvino_w8`: NNCF's weight compression (`nncf.compress_weights`, INT8_ASYM per output channel) of the
exported twin in OpenVINO: Linear weights and tables int8 in memory, computed in fp32; no calibration."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ov_runtime import OvBackend
from bench.backends.toolkit import ToolkitConfig
from bench.registry import register


@dataclass
class OpenvinoW8Config(ToolkitConfig):
    name: str = "openvino_w8"


@register("backend", "openvino_w8", config=OpenvinoW8Config, in_sweeps=False, toolkit="openvino")
class OpenvinoW8Backend(OvBackend):
    quantizes = "Linear weights and tables int8 asymmetric per channel, weight-only (nncf.compress_weights)"

    def transform(self, model, calibration):
        import nncf

        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM), {}
