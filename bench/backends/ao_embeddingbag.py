"""`ao_embeddingbag`: torch's own rowwise-quantized EmbeddingBag for every table, 8-bit rows, with torch.ao's
dynamic int8 Linear for the MLP: the Intel Neural Compressor (LPOT) DLRM recipe, in eager mode, no export.

Each table of each EmbeddingBagCollection (in torchrec 1.9 a plain `nn.EmbeddingBag`, include_last_offset)
is swapped in place for a `RowwiseEmbeddingBag` packed from its own weights (bench.backends.rowwise): the
collection's forward, its KJT handling and the model around it run as they are. `ao_embeddingbag4` is the
same with 4-bit rows. The Linear layers become torch.ao's dynamic int8 modules (Linear+ReLU fused, the output
layer kept in fp32 unless `backend.mlp_output=int8`; bench.backends.linear), or stay fp32 with `backend.mlp=fp32`.

Tables that pool by mean (or max) are `skipped`: the ops sum whatever mode they are given.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import torch
from torch import nn
from torchrec.modules.embedding_configs import PoolingType

from bench.backends.backend import Backend, NotApplicable
from bench.backends.linear import MLP_CHOICES, OUTPUT_CHOICES, WIDE_RATIO, check_choice, check_wide, kept_text, quantize_int8, wide_record
from bench.backends.modules import materialize_random_tables, require_embedding_bag_collections
from bench.backends.rowwise import DTYPES, RowwiseEmbeddingBag
from bench.batch import Batch
from bench.config import BackendConfig
from bench.metrics import TOOLKIT
from bench.registry import register


@dataclass
class AoEmbeddingBagConfig(BackendConfig):
    name: str = "ao_embeddingbag"
    mlp: str = "int8"  # fp32 | int8 (torch.ao dynamic int8 Linear, the recipe's)
    mlp_output: str = "fp32"  # the output layers (one output feature): fp32 | int8, as the TBE backends' mlp_output
    mlp_wide: str = "fp32"  # a Linear with a wide input: fp32 | smooth | int8, as the TBE backends' mlp_wide
    mlp_wide_ratio: float = WIDE_RATIO

    def validate(self) -> None:
        check_config(self)


def check_config(cfg) -> None:
    check_choice(cfg.mlp, MLP_CHOICES, "backend.mlp")
    check_choice(cfg.mlp_output, OUTPUT_CHOICES, "backend.mlp_output")
    check_wide(cfg)


def quantize_bags(model: nn.Module, bits: int, backend: str) -> int:
    """Swap every table of every EmbeddingBagCollection for its rowwise-quantized bag, in place; returns how many."""
    swapped = 0
    for name, ebc in require_embedding_bag_collections(model, backend):
        for cfg in ebc.embedding_bag_configs():
            if cfg.pooling != PoolingType.SUM:
                raise NotApplicable(f"backend {backend!r}: torch's rowwise-quantized EmbeddingBag ops pool by sum only, "
                                    f"and table {cfg.name!r}{f' in {name}' if name else ''} pools by {cfg.pooling.name}")
            dim = cfg.embedding_dim
            if (dim * bits) % 8:
                raise NotApplicable(f"backend {backend!r}: table {cfg.name!r} has dim {dim}, which does not pack into whole bytes at {bits} bits")
            ebc.embedding_bags[cfg.name] = RowwiseEmbeddingBag(ebc.embedding_bags[cfg.name], bits)
            swapped += 1
    return swapped


@register("backend", "ao_embeddingbag", config=AoEmbeddingBagConfig, in_sweeps=False, toolkit="torch.ao")
class AoEmbeddingBagBackend(Backend):
    devices = ("cpu",)  # torch's quantized EmbeddingBag and int8 Linear kernels are CPU kernels
    not_shardable = "its tables are torch.ao quantized EmbeddingBags, which torchrec's sharders do not take"
    bits: ClassVar[int] = 8

    def check(self) -> None:
        check_config(self.cfg)

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        check_config(self.cfg)
        model = materialize_random_tables(copy.deepcopy(model)).eval()
        quantize_bags(model, self.bits, self.cfg.name)
        model.to(device)
        if self.cfg.mlp == "int8" and quantize_int8(model, "dynamic", calibration_batches, device, self.cfg.mlp_output,
                                                         wide=self.cfg.mlp_wide, wide_ratio=self.cfg.mlp_wide_ratio) == 0:
            raise NotApplicable(f"backend {self.cfg.name!r} runs the model's nn.Linear layers in dynamic int8, and the model has none"
                                f"{kept_text(self.cfg)}: set backend.mlp=fp32")
        return model

    def stored_table_dtypes(self, tables: Mapping[str, int]) -> dict[str, str]:
        return {name: DTYPES[self.bits] for name in tables}

    def scores_depend_on_batch(self) -> bool:
        return self.cfg.mlp == "int8"  # dynamic int8: each call's activation range is its batch's

    def job_metrics(self, prepared: nn.Module) -> dict[str, Any]:
        mlp = "Linear layers dynamic int8" + (", the output layer fp32" if self.cfg.mlp_output == "fp32" else "")
        return {TOOLKIT: "torch.ao", "quantizes": f"tables {DTYPES[self.bits]} per row; " + (mlp if self.cfg.mlp == "int8" else "MLP fp32"),
                **wide_record(prepared)}

    def emulation(self) -> dict | None:
        # fake_quant rounds each row on FBGEMM's grid: the same min/max grid as torch's ops, with the scale and
        # bias in fp16 (torch's 8-bit rows keep them in fp32, so at 8 bits the twin differs in that rounding too)
        return {"name": "fake_quant", "bits": self.bits, "mlp": self.cfg.mlp, "activations": "dynamic",
                "mlp_output": self.cfg.mlp_output, "mlp_wide": self.cfg.mlp_wide, "mlp_wide_ratio": self.cfg.mlp_wide_ratio}
