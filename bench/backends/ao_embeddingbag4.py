"""`ao_embeddingbag4`: `ao_embeddingbag` with 4-bit rows (fp16 scale and bias per row), torch's
`embedding_bag_4bit_rowwise_offsets`; the MLP as there (torch.ao dynamic int8 Linear)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ao_embeddingbag import AoEmbeddingBagBackend, AoEmbeddingBagConfig
from bench.registry import register


@dataclass
class AoEmbeddingBag4Config(AoEmbeddingBagConfig):
    name: str = "ao_embeddingbag4"


@register("backend", "ao_embeddingbag4", config=AoEmbeddingBag4Config, in_sweeps=False, toolkit="torch.ao")
class AoEmbeddingBag4Backend(AoEmbeddingBagBackend):
    bits = 4
