"""A DIN-style ranker (Deep Interest Network): the candidate item attends over the user's history.

    python -m bench model=custom model.factory=examples.din:build workload=synthetic_seq
    python -m bench model=custom model.factory=examples.din:build workload=parquet \\
        workload.path=examples/data/clicks.parquet workload.oracle=oracle_logit workload.sequence_features=[history]

The history is looked up unpooled in the `embedding_collection=` the harness passes (the workload's sequence
features); the candidate in it too where the workload puts it there (synthetic_seq, movielens: the history's
own table), else in the pooled `embedding_bag_collection=` (the Parquet click log's `item_id`). Each history
item gets a weight from a small MLP over [item, candidate, item * candidate, item - candidate] (DIN's local
activation unit, no softmax); the weighted sum, the candidate, the other pooled features and the dense
features go through an MLP to one logit.
"""

from __future__ import annotations

import torch
from torch import nn
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from examples.two_tower import mlp


class DIN(nn.Module):
    def __init__(self, embedding_collection: EmbeddingCollection, embedding_bag_collection: EmbeddingBagCollection | None,
                 dense_in_features: int, history: str, candidate: str, attention_sizes=(32,), top_sizes=(64, 32)) -> None:
        super().__init__()
        self.ec, self.ebc = embedding_collection, embedding_bag_collection
        self.history, self.candidate = history, candidate
        sequence_features = {f for c in embedding_collection.embedding_configs() for f in c.feature_names}
        if history not in sequence_features:
            raise ValueError(f"history feature {history!r} is not a sequence feature of the workload ({sorted(sequence_features)})")
        self.candidate_in_sequences = candidate in sequence_features
        pooled = [f for c in embedding_bag_collection.embedding_bag_configs() for f in c.feature_names] if embedding_bag_collection else []
        self.context = [f for f in pooled if f != candidate]
        dim = embedding_collection.embedding_configs()[0].embedding_dim
        self.attention = mlp([4 * dim, *attention_sizes, 1])
        self.top = mlp([dense_in_features + dim * (2 + len(self.context)), *top_sizes, 1])

    def forward(self, dense_features: torch.Tensor, sparse_features: KeyedJaggedTensor) -> torch.Tensor:
        sequences = self.ec(sparse_features)
        pooled = self.ebc(sparse_features).to_dict() if self.ebc is not None else {}
        target = sequences[self.candidate].values() if self.candidate_in_sequences else pooled[self.candidate]  # [B, D]
        history = sequences[self.history]
        items, lengths = history.values(), history.lengths().long()  # [n, D], [B]
        owner = torch.repeat_interleave(torch.arange(lengths.numel(), device=items.device), lengths)
        t = target[owner]
        weights = self.attention(torch.cat([items, t, items * t, items - t], dim=1))  # [n, 1]
        interest = torch.zeros_like(target).index_add_(0, owner, weights * items)
        features = torch.cat([dense_features, interest, target, *(pooled[f] for f in self.context)], dim=1)
        return self.top(features).squeeze(1)


def build(embedding_collection: EmbeddingCollection, dense_in_features: int, embedding_bag_collection: EmbeddingBagCollection | None = None,
          history: str = "history", candidate: str = "item_id", attention_sizes=(32,), top_sizes=(64, 32)) -> DIN:
    """The factory the harness calls (model=custom model.factory=examples.din:build); the rest from model.kwargs."""
    return DIN(embedding_collection, embedding_bag_collection, dense_in_features, history, candidate, tuple(attention_sizes), tuple(top_sizes))
