"""A DCN-v2-style ranker written as a user would write it, run by the harness as is: not a DLRM.

    python -m bench +sweep=toolkits model=custom model.factory=examples.dcn_v2:build model.output=probabilities

The dense features and every pooled embedding are one row `x0`. Two branches read it side by side (DCN-v2's
"parallel" form): torchrec's `LowRankCrossNet` (each layer `x0 * (W (V x) + b) + x`) and a deep tower whose
Linears have a `LayerNorm` between them, held by name in an `nn.ModuleDict`. A Linear over both branches'
outputs gives the logit, and a functional `torch.sigmoid` turns it into a probability: the model returns
probabilities (`model.output=probabilities`), read back through the clamp (docs/custom-model.md).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torchrec.modules.crossnet import LowRankCrossNet
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor


class DcnV2(nn.Module):
    def __init__(self, embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, cross_layers: int = 3,
                 low_rank: int = 32, deep_sizes: Sequence[int] = (256, 64)) -> None:
        super().__init__()
        self.ebc = embedding_bag_collection
        configs = self.ebc.embedding_bag_configs()
        self.features = [f for c in configs for f in c.feature_names]
        width = dense_in_features + sum(c.embedding_dim * len(c.feature_names) for c in configs)
        self.cross = LowRankCrossNet(in_features=width, num_layers=cross_layers, low_rank=low_rank)
        hidden, out = deep_sizes
        self.deep = nn.ModuleDict({"fc1": nn.Linear(width, hidden), "norm": nn.LayerNorm(hidden), "fc2": nn.Linear(hidden, out)})
        self.head = nn.Linear(width + out, 1)

    def forward(self, dense_features: torch.Tensor, sparse_features: KeyedJaggedTensor) -> torch.Tensor:
        pooled = self.ebc(sparse_features).to_dict()
        x0 = torch.cat([dense_features, *(pooled[f] for f in self.features)], dim=1)
        crossed = self.cross(x0)
        deep = torch.relu(self.deep["norm"](self.deep["fc1"](x0)))
        deep = torch.relu(self.deep["fc2"](deep))
        return torch.sigmoid(self.head(torch.cat([crossed, deep], dim=1))).squeeze(1)


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, cross_layers: int = 3, low_rank: int = 32,
          deep_sizes: Sequence[int] = (256, 64)) -> DcnV2:
    """The factory the harness calls (model.factory=examples.dcn_v2:build); the rest comes from model.kwargs."""
    return DcnV2(embedding_bag_collection, dense_in_features, cross_layers, low_rank, deep_sizes)
