"""`onnxruntime_fp32`: the exported twin in ONNX Runtime, unquantized: the runtime's own speed, so the
quantized ONNX Runtime rows can be read as runtime effect times quantization effect."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ort_runtime import OrtBackend, OrtConfig
from bench.registry import register


@dataclass
class OnnxruntimeFp32Config(OrtConfig):
    name: str = "onnxruntime_fp32"


@register("backend", "onnxruntime_fp32", config=OnnxruntimeFp32Config, in_sweeps=False, toolkit="onnxruntime")
class OnnxruntimeFp32Backend(OrtBackend):
    quantizes = "nothing (fp32 runtime reference)"

    def quantize(self, onnx_path, workdir, calibration):
        return onnx_path, {}
