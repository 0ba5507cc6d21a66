"""torchrec's `SimpleDeepFMNN` (torchrec.models.deepfm): a DeepFM ranker that ends in `nn.Sigmoid`, so it
returns probabilities (`model.output=probabilities`).

    python -m bench +sweep=quant model=custom model.factory=examples.torchrec_models.deepfm:build \
        model.output=probabilities
"""

from __future__ import annotations

from torchrec.models.deepfm import SimpleDeepFMNN
from torchrec.modules.embedding_modules import EmbeddingBagCollection


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, hidden_layer_size: int = 64,
          deep_fm_dimension: int = 32) -> SimpleDeepFMNN:
    """SimpleDeepFMNN names its arguments differently (`num_dense_features`): this maps the harness's names."""
    return SimpleDeepFMNN(num_dense_features=dense_in_features, embedding_bag_collection=embedding_bag_collection,
                          hidden_layer_size=hidden_layer_size, deep_fm_dimension=deep_fm_dimension)
