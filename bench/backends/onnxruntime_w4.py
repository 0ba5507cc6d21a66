"""`onnxruntime_w4`: ONNX Runtime's 4-bit weight-only quantizer (`MatMulNBitsQuantizer`): Linear weights
to MatMulNBits and tables to GatherBlockQuantized, symmetric int4 in blocks of 32; activations stay fp32."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ort_runtime import OrtBackend, OrtConfig
from bench.registry import register

BLOCK_SIZE = 32


@dataclass
class OnnxruntimeW4Config(OrtConfig):
    name: str = "onnxruntime_w4"


@register("backend", "onnxruntime_w4", config=OnnxruntimeW4Config, in_sweeps=False, toolkit="onnxruntime")
class OnnxruntimeW4Backend(OrtBackend):
    quantizes = f"Linear weights int4 (MatMulNBits) and tables int4 (GatherBlockQuantized), blocks of {BLOCK_SIZE}, weight-only"

    modules = (*OrtBackend.modules, "onnx_ir")  # MatMulNBitsQuantizer imports onnx_ir, which onnxruntime does not declare

    def quantize(self, onnx_path, workdir, calibration):
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

        config = DefaultWeightOnlyQuantConfig(block_size=BLOCK_SIZE, is_symmetric=True, op_types_to_quantize=("MatMul", "Gather"),
                                              quant_axes=(("MatMul", 0), ("Gather", 1)))
        quantizer = MatMulNBitsQuantizer(onnx.load(str(onnx_path)), algo_config=config)
        quantizer.process()
        out = workdir / "w4.onnx"
        quantizer.model.save_model_to_file(str(out))
        return out
