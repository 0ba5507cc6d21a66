"""`onnxruntime_int8_static`: ONNX Runtime's `quantize_static`, QDQ format: Linear weights int8 per output
channel, activations uint8 with scales from ONNX Runtime's MinMax calibrator over the workload's
calibration batches (its `CalibrationDataReader`), and the tables int8 (Gather).
The activation products, and the score layer with `backend.output_layer=fp32` (the default), stay fp32
(bench.backends.ort_runtime.kept_fp32)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ort_runtime import OrtBackend, OrtConfig, kept_fp32, preprocessed
from bench.registry import register


@dataclass
class OnnxruntimeInt8StaticConfig(OrtConfig):
    name: str = "onnxruntime_int8_static"
    output_layer: str = "fp32"  # fp32 | int8: the score layer (one output feature) kept fp32, or quantized like the rest


@register("backend", "onnxruntime_int8_static", config=OnnxruntimeInt8StaticConfig, in_sweeps=False, toolkit="onnxruntime")
class OnnxruntimeInt8StaticBackend(OrtBackend):
    preprocesses = True
    per_tensor_tables = "ONNX Runtime's quantize_static scales a Gather's table per tensor"
    quantizes = "Linear weights int8 per channel, their inputs uint8 (static, calibrated), tables int8 (Gather): QDQ"

    def quantize(self, onnx_path, workdir, calibration):
        import onnx
        from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.feeds = iter(calibration)

            def get_next(self):
                return next(self.feeds, None)

        onnx_path = preprocessed(onnx_path, workdir)
        out = workdir / "int8_static.onnx"
        why = kept_fp32(onnx.load(str(onnx_path)), self.cfg.output_layer)
        quantize_static(onnx_path, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8,
                        calibrate_method=CalibrationMethod.MinMax, op_types_to_quantize=["MatMul", "Gemm", "Gather"],
                        nodes_to_exclude=list(why))
        return out, why
