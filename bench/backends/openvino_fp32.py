"""`openvino_fp32`: the exported twin in OpenVINO's CPU runtime, unquantized, at pinned fp32 precision: the
runtime's own speed, so the quantized OpenVINO rows can be read as runtime effect times quantization effect."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ov_runtime import OvBackend
from bench.backends.toolkit import ToolkitConfig
from bench.registry import register


@dataclass
class OpenvinoFp32Config(ToolkitConfig):
    name: str = "openvino_fp32"


@register("backend", "openvino_fp32", config=OpenvinoFp32Config, in_sweeps=False, toolkit="openvino")
class OpenvinoFp32Backend(OvBackend):
    quantizes = "nothing (fp32 runtime reference)"

    def transform(self, model, calibration):
        return model, {}
