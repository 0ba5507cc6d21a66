"""What every factory here reads off the EmbeddingBagCollection the harness passes."""

from __future__ import annotations

from torchrec.modules.embedding_modules import EmbeddingBagCollection


def embedding_dim(ebc: EmbeddingBagCollection) -> int:
    """The tables' common width (`model.embedding_dim`): torchrec's DLRMs need the dense arch to end at it."""
    return ebc.embedding_bag_configs()[0].embedding_dim
