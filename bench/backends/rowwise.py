"""torch's rowwise-quantized EmbeddingBag as a drop-in for a torchrec table (`nn.EmbeddingBag`).

The rows are packed by torch's own ops (`quantized::embedding_bag_byte_prepack`, `..._4bit_prepack`): per
row an asymmetric min/max grid, 8-bit codes with an fp32 scale and bias (D + 8 bytes a row), or 4-bit codes
with an fp16 scale and bias (D/2 + 4 bytes). The lookup is `quantized::embedding_bag_byte_rowwise_offsets` /
`..._4bit_rowwise_offsets`, the kernels under torch.ao's quantized `EmbeddingBag` (the LPOT/INC DLRM recipe).

Written by hand around the ops rather than taking `torch.ao.nn.quantized.EmbeddingBag` itself, because that
module keeps its rows in an opaque packed object: the packed rows here are a plain buffer, so the bytes the
model holds are counted as they are (bench.measure.memory, bench.backends.tables). Its scores match the
torch.ao module's (tests/test_backends_ao_embeddingbag.py).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

PREPACK = {8: torch.ops.quantized.embedding_bag_byte_prepack, 4: torch.ops.quantized.embedding_bag_4bit_prepack}
LOOKUP = {8: torch.ops.quantized.embedding_bag_byte_rowwise_offsets, 4: torch.ops.quantized.embedding_bag_4bit_rowwise_offsets}
DTYPES = {8: "int8", 4: "int4"}
SUM = 0  # the ops' pooling mode argument: they pool by sum only (asked for mean, they still sum)


class RowwiseEmbeddingBag(nn.Module):
    """A sum-pooled EmbeddingBag whose rows are stored rowwise-quantized at `bits` (8 or 4)."""

    def __init__(self, bag: nn.EmbeddingBag, bits: int) -> None:
        super().__init__()
        if bag.mode != "sum":
            raise ValueError(f"torch's rowwise-quantized EmbeddingBag ops pool by sum only, this table pools by {bag.mode}")
        self.bits = bits
        self.num_embeddings, self.embedding_dim = bag.num_embeddings, bag.embedding_dim
        self.include_last_offset = bag.include_last_offset
        self.register_buffer("packed", PREPACK[bits](bag.weight.detach().float().contiguous()))

    def forward(self, input: torch.Tensor, offsets: Optional[torch.Tensor] = None,
                per_sample_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        # torchrec's EmbeddingBagCollection calls its bags with `input=`, torch.ao's module names it `indices`
        if offsets is not None and offsets.dtype != input.dtype:  # the ops take one index type for both
            offsets = offsets.to(input.dtype)
        return LOOKUP[self.bits](self.packed, input, offsets, False, SUM, False, per_sample_weights, None,
                                 self.include_last_offset)

    def storage(self) -> dict:
        """What bench.backends.tables reports of this table: its stored type, rows and bytes a row."""
        return {"dtype": DTYPES[self.bits], "rows": int(self.packed.shape[0]),
                "row_bytes": int(self.packed.shape[1]) * self.packed.element_size()}

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, bits={self.bits}"
