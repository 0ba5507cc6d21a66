"""`onnxruntime_int8_dynamic`: ONNX Runtime's `quantize_dynamic`: int8 weights for the Linears (MatMul ->
MatMulInteger, activations quantized per call) and the tables (int8 Gather); no calibration.
The activation products, and the score layer with `backend.output_layer=fp32` (the default), stay fp32
(bench.backends.ort_runtime.kept_fp32)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ort_runtime import OrtBackend, OrtConfig, kept_fp32, preprocessed
from bench.registry import register


@dataclass
class OnnxruntimeInt8DynamicConfig(OrtConfig):
    name: str = "onnxruntime_int8_dynamic"
    output_layer: str = "fp32"  # fp32 | int8: the score layer (one output feature) kept fp32, or quantized like the rest


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
        model = onnx.load(str(onnx_path))
        why = kept_fp32(model, self.cfg.output_layer)
        # quantize_dynamic first rewrites each Gemm (the pre-processing fuses MatMul + Add into one) as a MatMul named
        # `<gemm>_MatMul`, and excludes by the rewritten name
        gemms = {n.name for n in model.graph.node if n.op_type == "Gemm"}
        excluded = [f"{name}_MatMul" if name in gemms else name for name in why]
        quantize_dynamic(onnx_path, out, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gather"], nodes_to_exclude=excluded)
        return out, why
