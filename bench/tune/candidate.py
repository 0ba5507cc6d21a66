"""One copy of the fp32 model whose tables are swapped, table by table, for quantize-dequantize rows.

The tables are those of every EmbeddingBagCollection (pooled) and EmbeddingCollection (a sequence model's
unpooled history): the search treats both alike, as the TBE backends store both.

Sensitivity and search score hundreds of candidates that differ from each other in a table or two, so
nothing is prepared from scratch per candidate: the fp32 model is copied once, and a candidate writes
FBGEMM's own row-wise quantize-dequantize of just the tables it changes (`fake_quant.qdq_rows`, the
rows the integer TBE kernels read, bit for bit) into that copy, restoring the others from the fp32
model. The dense layers come in three variants built once, all sharing the copy's embedding modules:
fp32, int8 dynamic and int8 static (calibrated with fp32 tables), each the torch.ao int8 Linear layers
the integer backends run (`bench.backends.linear`); off CPU only the fp32 one, as torch.ao's int8
Linear runs on CPU only.
"""

from __future__ import annotations

import copy
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from bench.backends.fake_quant import qdq_rows
from bench.backends.linear import quantize_int8
from bench.backends.modules import require_table_collections, table_weights
from bench.backends.tbe import BITS
from bench.batch import Batch
from bench.measure.accuracy import score

# The dense-layer variants: name -> int8 mode (None: fp32).
DENSE = {"fp32": None, "int8 dynamic": "dynamic", "int8 static": "static"}


def dense_name(mlp: str, mlp_mode: str) -> str:
    return "fp32" if mlp == "fp32" else f"int8 {mlp_mode}"


class SwappableModel:
    def __init__(self, fp32: nn.Module, calibration: Sequence[Batch], device: torch.device, row_range: str = "minmax") -> None:
        self.device = device
        self.row_range = row_range  # the sub-byte rows' range, as the backends that measure the candidates choose it
        self.module = copy.deepcopy(fp32).eval().to(device)
        collections = require_table_collections(self.module, "tune")
        self._weights = {name: weight for name, (weight, _) in table_weights(self.module).items()}
        self._fp32 = {name: weight for name, (weight, _) in table_weights(fp32).items()}
        self.current = {name: "fp32" for name in self._weights}
        # Dense variants share the embedding modules (deepcopy's memo hands back the same objects).
        shared = {id(c): c for _, c in collections}
        self.dense: dict[str, nn.Module] = {}
        for name, mode in DENSE.items():
            if mode is None:
                self.dense[name] = self.module
                continue
            if device.type != "cpu":  # torch.ao's int8 Linear runs on CPU only
                continue
            variant = copy.deepcopy(self.module, memo=dict(shared))
            # as the deployed backend's defaults: mlp_output fp32, mlp_wide fp32
            quantize_int8(variant, mode, calibration, device, output="fp32", wide="fp32")
            self.dense[name] = variant

    @property
    def tables(self) -> list[str]:
        return list(self._weights)

    @torch.no_grad()
    def set_tables(self, precisions: Mapping[str, str]) -> None:
        """Every table at its precision in `precisions` (fp32 where absent); only changed tables are rewritten."""
        for name, weight in self._weights.items():
            want = precisions.get(name, "fp32")
            if self.current[name] != want:
                weight.copy_(qdq_rows(self._fp32[name].to(self.device), BITS[want], self.row_range))
                self.current[name] = want

    def logits(self, dense: str, batches: Sequence[Batch], expected: int) -> tuple[np.ndarray, np.ndarray]:
        """(labels, logits) of the current tables with the `dense` variant, every sample scored once."""
        return score(self.dense[dense], batches, self.device, expected)
