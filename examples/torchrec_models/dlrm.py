"""torchrec's `DLRM` (torchrec.models.dlrm): dot-product interaction; returns logits.

    python -m bench model=custom model.factory=examples.torchrec_models.dlrm:build

The harness's built-in `model=small` is this model too; here it comes in as a user's model would.
"""

from __future__ import annotations

from typing import Sequence

from torchrec.models.dlrm import DLRM
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from examples.torchrec_models._sizes import embedding_dim


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, dense_hidden: Sequence[int] = (64,),
          over_arch_layer_sizes: Sequence[int] = (64, 32, 1)) -> DLRM:
    """The dense arch is `dense_hidden` then the tables' width (DLRM's dot products need it to end there)."""
    return DLRM(embedding_bag_collection=embedding_bag_collection, dense_in_features=dense_in_features,
                dense_arch_layer_sizes=[*dense_hidden, embedding_dim(embedding_bag_collection)],
                over_arch_layer_sizes=list(over_arch_layer_sizes))
