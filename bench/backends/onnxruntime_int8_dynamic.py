"""`onnxruntime_int8_dynamic`: ONNX Runtime's `quantize_dynamic`: int8 weights for the Linears (MatMul ->
MatMulInteger, activations quantized per call) and the tables (int8 Gather); no calibration."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ort_runtime import OrtBackend, OrtConfig, activation_products, preprocessed
from bench.registry import register


@dataclass
class OnnxruntimeInt8DynamicConfig(OrtConfig):
    name: str = "onnxruntime_int8_dynamic"


@register("backend", "onnxruntime_int8_dynamic", config=OnnxruntimeInt8DynamicConfig, in_sweeps=False, toolkit="onnxruntime")
class OnnxruntimeInt8DynamicBackend(OrtBackend):
    preprocesses = True
    per_tensor_tables = "ONNX Runtime's quantize_dynamic scales a Gather's table per tensor"
    quantizes = "Linear weights int8 per tensor (MatMulInteger, activations per call) and tables int8 (Gather)"

    def scores_depend_on_batch(self) -> bool:
        return True  # activation scales come from each batch

    def quantize(self, onnx_path, workdir, calibration):
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        onnx_path = preprocessed(onnx_path, workdir)
        out = workdir / "int8_dynamic.onnx"
        quantize_dynamic(onnx_path, out, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gather"],
                         nodes_to_exclude=activation_products(onnx.load(str(onnx_path))))
        return out
