"""A two-tower ranker on TorchRec's EmbeddingBagCollection: not a DLRM, run by the harness as is.

    python -m bench model=custom model.factory=examples.two_tower:build workload=parquet workload.path=clicks.parquet

The user tower reads the dense features and the user-side sparse features, the item tower the item-side
ones; the score is the dot product of the two towers' outputs plus a bias: a logit, or, with
`sigmoid=True` (`model.kwargs={sigmoid: true} model.output=probabilities`), a probability.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    """Linear layers with a ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class TwoTower(nn.Module):
    def __init__(self, embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, item_features: Sequence[str],
                 tower_sizes: Sequence[int] = (64, 32), sigmoid: bool = False) -> None:
        super().__init__()
        self.ebc = embedding_bag_collection
        configs = self.ebc.embedding_bag_configs()
        features = [f for c in configs for f in c.feature_names]
        self.item_features = [f for f in features if f in set(item_features)]
        self.user_features = [f for f in features if f not in set(item_features)]
        dim = configs[0].embedding_dim
        self.user_tower = mlp([dense_in_features + dim * len(self.user_features), *tower_sizes])
        self.item_tower = mlp([dim * len(self.item_features), *tower_sizes])
        self.bias = nn.Parameter(torch.zeros(1))
        self.sigmoid = sigmoid

    def forward(self, dense_features: torch.Tensor, sparse_features: KeyedJaggedTensor) -> torch.Tensor:
        pooled = self.ebc(sparse_features).to_dict()
        user = self.user_tower(torch.cat([dense_features, *(pooled[f] for f in self.user_features)], dim=1))
        item = self.item_tower(torch.cat([pooled[f] for f in self.item_features], dim=1))
        score = (user * item).sum(dim=1) + self.bias
        return torch.sigmoid(score) if self.sigmoid else score


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int,
          item_features: Sequence[str] = ("item_id", "item_category"), tower_sizes: Sequence[int] = (64, 32),
          sigmoid: bool = False) -> TwoTower:
    """The factory the harness calls (model.factory=examples.two_tower:build); the rest comes from model.kwargs."""
    return TwoTower(embedding_bag_collection, dense_in_features, item_features, tower_sizes, sigmoid)
