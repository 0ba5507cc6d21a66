"""torchrec's `DLRM_Projection` (torchrec.models.dlrm): the interaction is a product of two projections of
the features (two MLP branches); returns logits.

    python -m bench model=custom model.factory=examples.torchrec_models.dlrm_projection:build
"""

from __future__ import annotations

from typing import Sequence

from torchrec.models.dlrm import DLRM_Projection
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from examples.torchrec_models._sizes import embedding_dim


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, dense_hidden: Sequence[int] = (64,),
          over_arch_layer_sizes: Sequence[int] = (64, 32, 1), branch_hidden: Sequence[int] = (64,),
          projections: Sequence[int] = (4, 4)) -> DLRM_Projection:
    """Each interaction branch is `branch_hidden` then `projections[i]` times the tables' width (it must be a multiple)."""
    d = embedding_dim(embedding_bag_collection)
    return DLRM_Projection(embedding_bag_collection=embedding_bag_collection, dense_in_features=dense_in_features,
                           dense_arch_layer_sizes=[*dense_hidden, d], over_arch_layer_sizes=list(over_arch_layer_sizes),
                           interaction_branch1_layer_sizes=[*branch_hidden, projections[0] * d],
                           interaction_branch2_layer_sizes=[*branch_hidden, projections[1] * d])
