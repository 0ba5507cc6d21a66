"""torchrec's `DLRM_DCN` (torchrec.models.dlrm): DLRM-v2, a low-rank cross network as the interaction;
returns logits.

    python -m bench model=custom model.factory=examples.torchrec_models.dlrm_dcn:build
"""

from __future__ import annotations

from typing import Sequence

from torchrec.models.dlrm import DLRM_DCN
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from examples.torchrec_models._sizes import embedding_dim


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, dense_hidden: Sequence[int] = (64,),
          over_arch_layer_sizes: Sequence[int] = (64, 32, 1), dcn_num_layers: int = 2, dcn_low_rank_dim: int = 32) -> DLRM_DCN:
    return DLRM_DCN(embedding_bag_collection=embedding_bag_collection, dense_in_features=dense_in_features,
                    dense_arch_layer_sizes=[*dense_hidden, embedding_dim(embedding_bag_collection)],
                    over_arch_layer_sizes=list(over_arch_layer_sizes), dcn_num_layers=dcn_num_layers,
                    dcn_low_rank_dim=dcn_low_rank_dim)
