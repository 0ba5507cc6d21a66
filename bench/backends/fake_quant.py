"""`fake_quant`: the fused quantize-dequantize (QDQ) model, the "pseudo-quantization mode" of the vendor
recipes: the accuracy of a quantized deployment, computed with fp32 kernels.

Embedding rows (of every EmbeddingBagCollection and EmbeddingCollection) are quantized and dequantized
row-wise exactly as FBGEMM stores them (asymmetric, fp16
scale and bias per row, FBGEMM's own quantize and dequantize ops; each row's range min-max or greedy, as
`backend.row_range` says), at `backend.bits` (8, 4 or 2; 16 is an
fp16 round trip, 32 leaves a table alone) with `backend.per_table` overrides in bits. With `backend.mlp=int8`,
each Linear (fused with the ReLU that follows it) is wrapped in torch.ao's fused observer/fake-quant
modules: int8 per-channel symmetric weights, per-tensor activations, either calibrated on the
calibration batches (`activations=static`) or taken per batch (`activations=dynamic`), the schemes of
the int8 backends' `mlp_mode` (see `bench.backends.linear`). With `backend.mlp=fp16|bf16` (the default on
CUDA, as for the integer backends it emulates) each dense Linear's weights, inputs and outputs are rounded to
that type (`bench.backends.half_mlp.emulate_half`). An integer backend's `emulation()` names the overrides
that make this its twin.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Optional

import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
import torch

from bench.backends.backend import Backend, NotApplicable
from bench.backends.direct import ROW_RANGES, fused_rows
from bench.backends.half_mlp import HALF_SCHEMES, emulate_half
from bench.backends.linear import MLP_CHOICES, MODES, OUTPUT_CHOICES, WIDE_RATIO, check_choice, check_wide, fake_quantize, kept_text, wide_record
from bench.backends.modules import (
    materialize_random_tables,
    require_table_collections,
    table_dims,
    table_rows,
    table_weights,
)
from bench.backends.tbe import BITS, resolve_table_bits
from bench.config import BackendConfig
from bench.errors import UserError
from bench.metrics import DENSE_PATH
from bench.registry import register

ROW_BITS = sorted(BITS.values())  # 2, 4, 8, 16, 32
# The one description of backend.bits: the error message says it, and the README's backend table
# says the same (tests/test_cli_help.py checks).
ROW_BITS_TEXT = f"{', '.join(str(b) for b in sorted((b for b in ROW_BITS if b < 16), reverse=True)[:-1])} or {min(ROW_BITS)} (16: an fp16 round trip, 32: rows unchanged)"


@dataclass
class FakeQuantConfig(BackendConfig):
    name: str = "fake_quant"
    bits: int = 8  # embedding rows: 8 | 4 | 2 (16: fp16 round trip, 32: unchanged)
    per_table: dict[str, int] = field(default_factory=dict)  # table name -> bits; CLI: +backend.per_table={t: 8}
    small_table_rows: Optional[int] = None  # tables with fewer rows get small_table_bits (per_table still wins)
    small_table_bits: int = 8
    mlp: str = "int8"  # fp32 | int8 (fake-quantized) | fp16 | bf16 (rounded); its YAML: int8 on CPU, fp16 on CUDA
    activations: str = "static"  # static (calibrated) | dynamic (per batch)
    mlp_output: str = "fp32"  # the output layers (one output feature): fp32 | int8, as the int8 backends' mlp_output
    mlp_wide: str = "fp32"  # a Linear with a wide input: fp32 | smooth | int8, as the int8 backends' mlp_wide
    mlp_wide_ratio: float = WIDE_RATIO
    row_range: str = "minmax"  # an int4/int2 row's range: minmax | greedy, as the TBE backends' row_range

    def validate(self) -> None:
        check_config(self)


def check_config(cfg) -> None:
    """The choices of a fake_quant config (the schema, or its composed DictConfig), before anything is built."""
    check_choice(cfg.mlp, MLP_CHOICES + HALF_SCHEMES, "backend.mlp")
    check_choice(cfg.activations, MODES, "backend.activations")
    check_choice(cfg.mlp_output, OUTPUT_CHOICES, "backend.mlp_output")
    check_wide(cfg)
    check_choice(cfg.row_range, ROW_RANGES, "backend.row_range")
    for key, b in [("backend.bits", cfg.bits), ("backend.small_table_bits", cfg.small_table_bits),
                   *((f"backend.per_table.{n}", b) for n, b in cfg.per_table.items())]:
        if int(b) not in ROW_BITS:
            raise UserError(f"{key}={b}: choose {ROW_BITS_TEXT}")


def qdq_rows(weight: torch.Tensor, bits: int, row_range: str = "minmax") -> torch.Tensor:
    """Quantize-dequantize rows as FBGEMM's TBE stores them: q = round((w - bias) / scale), fp16 scale and bias,
    the range per row chosen as `row_range` says (bench.backends.direct.fused_rows)."""
    if bits == 32:
        return weight
    if bits == 16:
        return weight.half().to(weight.dtype)
    fused = fused_rows(weight.cpu(), bits, row_range)
    return torch.ops.fbgemm.FusedNBitRowwiseQuantizedSBHalfToFloat(fused, bits).to(weight.device, weight.dtype)


@register("backend", "fake_quant", config=FakeQuantConfig)
class FakeQuantBackend(Backend):
    def scores_depend_on_batch(self) -> bool:
        # dynamic: ranges from each batch. Static too: the fake-quantized output takes few distinct values, so
        # scores tie, and fp32 products that differ in the last bit between batch shapes break those ties.
        return self.cfg.mlp == "int8"

    def prepare(self, model, calibration_batches, device):
        cfg = self.cfg
        check_config(cfg)
        model = materialize_random_tables(copy.deepcopy(model)).eval()
        require_table_collections(model, cfg.name)
        small = {n: cfg.small_table_bits for n, rows in table_rows(model).items() if cfg.small_table_rows is not None and rows < cfg.small_table_rows}
        bits = resolve_table_bits(table_dims(model), cfg.bits, {**small, **cfg.per_table}, "backend.per_table")
        with torch.no_grad():
            for name, (w, _) in table_weights(model).items():
                w.copy_(qdq_rows(w, bits[name], cfg.row_range))
        model.to(device)
        if cfg.mlp in HALF_SCHEMES and emulate_half(model, cfg.mlp) == 0:
            raise NotApplicable(f"backend 'fake_quant' emulates {cfg.mlp} nn.Linear layers, and the model has none outside its "
                                "embedding modules: set backend.mlp=fp32")
        if cfg.mlp == "int8" and fake_quantize(model, cfg.activations, calibration_batches, device, cfg.mlp_output,
                                                    cfg.mlp_wide, cfg.mlp_wide_ratio) == 0:
            raise NotApplicable("backend 'fake_quant' emulates int8 nn.Linear layers, and the model has none"
                                f"{kept_text(cfg)}: set backend.mlp=fp32")
        return model

    def job_metrics(self, prepared) -> dict:
        mlp = self.cfg.mlp
        return {DENSE_PATH: "fp32" if mlp == "fp32" else f"{mlp} emulated ({self.cfg.activations})" if mlp == "int8" else f"{mlp} emulated",
                **wide_record(prepared)}
