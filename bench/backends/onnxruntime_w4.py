"""`onnxruntime_w4`: ONNX Runtime's 4-bit weight-only quantizer (`MatMulNBitsQuantizer`): Linear weights
to MatMulNBits and tables to GatherBlockQuantized, symmetric int4 in blocks of 32; activations stay fp32.
The score layer stays fp32 with `backend.output_layer=fp32` (the default): its one output column in blocks of 32 puts
a wide input's weight in one block with small ones. `backend.symmetric=false` gives each block a zero point (as
FBGEMM's int4 rows keep a scale and a bias): neither is better on every model (docs/toolkits.md)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ort_runtime import OrtBackend, OrtConfig, kept_fp32
from bench.registry import register

BLOCK_SIZE = 32


@dataclass
class OnnxruntimeW4Config(OrtConfig):
    name: str = "onnxruntime_w4"
    output_layer: str = "fp32"  # fp32 | int8: the score layer (one output feature) kept fp32, or quantized like the rest
    symmetric: bool = True  # int4 without a zero point (true), or with one per group (false, as FBGEMM's int4 rows: a scale and a bias)


@register("backend", "onnxruntime_w4", config=OnnxruntimeW4Config, in_sweeps=False, toolkit="onnxruntime")
class OnnxruntimeW4Backend(OrtBackend):
    quantizes = (f"Linear weights int4 (MatMulNBits) and tables int4 (GatherBlockQuantized), blocks of {BLOCK_SIZE}, "
                 "symmetric unless backend.symmetric=false (a zero point per block), weight-only")

    modules = (*OrtBackend.modules, "onnx_ir")  # MatMulNBitsQuantizer imports onnx_ir, which onnxruntime does not declare

    def quantize(self, onnx_path, workdir, calibration):
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

        config = DefaultWeightOnlyQuantConfig(block_size=BLOCK_SIZE, is_symmetric=self.cfg.symmetric, op_types_to_quantize=("MatMul", "Gather"),
                                              quant_axes=(("MatMul", 0), ("Gather", 1)))
        model = onnx.load(str(onnx_path))
        why = kept_fp32(model, self.cfg.output_layer, products=False)  # weight-only: an activation product has no weight to quantize
        quantizer = MatMulNBitsQuantizer(model, nodes_to_exclude=list(why), algo_config=config)
        quantizer.process()
        out = workdir / "w4.onnx"
        quantizer.model.save_model_to_file(str(out))
        return out, why
