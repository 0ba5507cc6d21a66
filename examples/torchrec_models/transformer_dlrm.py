"""torchrec's experimental `DLRM_Transformer` (torchrec.models.experimental.transformerdlrm): a transformer
encoder over the dense and sparse embeddings as the interaction; returns logits. torchrec says it is for
benchmarking, not for model quality.

    python -m bench model=custom model.factory=examples.torchrec_models.transformer_dlrm:build
"""

from __future__ import annotations

from typing import Sequence

from torchrec.models.experimental.transformerdlrm import DLRM_Transformer
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from examples.torchrec_models._sizes import embedding_dim


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, dense_hidden: Sequence[int] = (64,),
          over_arch_layer_sizes: Sequence[int] = (64, 32, 1), nhead: int = 4, ntransformer_layers: int = 1) -> DLRM_Transformer:
    """`nhead` must divide the tables' width (model.embedding_dim)."""
    return DLRM_Transformer(embedding_bag_collection=embedding_bag_collection, dense_in_features=dense_in_features,
                            dense_arch_layer_sizes=[*dense_hidden, embedding_dim(embedding_bag_collection)],
                            over_arch_layer_sizes=list(over_arch_layer_sizes), nhead=nhead,
                            ntransformer_layers=ntransformer_layers)
