"""A tiny sequential ranker for the backends' tests: a DIN-style target attention over unpooled history
embeddings (a torchrec EmbeddingCollection) beside pooled user features (an EmbeddingBagCollection).

`model(dense, kjt) -> [B, 1]` logits, as every harness model. The KJT holds the pooled features, the
`history` (variable length, possibly empty), the `candidate` (one id per sample, looked up in the same
item table as the history) and a `history_genre` sequence of the same length as the history. The
attention's query and key projections and the MLP are `nn.Linear` layers, so a backend's dense path
(int8, fp16/bf16) applies to them. `din` is the same model as a `model=custom` factory.
"""

from __future__ import annotations

import torch
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch

NUM_DENSE = 4
POOLED = {"user": 30, "city": 12}  # pooled feature -> table rows (one table each)
ITEMS, GENRES = 60, 8
MAX_HISTORY = 6


def pooled_tables(dim: int) -> list[EmbeddingBagConfig]:
    return [EmbeddingBagConfig(name=f"t_{f}", embedding_dim=dim, num_embeddings=n, feature_names=[f]) for f, n in POOLED.items()]


def sequence_tables(dim: int) -> list[EmbeddingConfig]:
    return [EmbeddingConfig(name="t_item", embedding_dim=dim, num_embeddings=ITEMS, feature_names=["history", "candidate"]),
            EmbeddingConfig(name="t_genre", embedding_dim=dim, num_embeddings=GENRES, feature_names=["history_genre"])]


class TargetAttentionRanker(nn.Module):
    def __init__(self, embedding_bag_collection: EmbeddingBagCollection, embedding_collection: EmbeddingCollection,
                 dense_in_features: int) -> None:
        super().__init__()
        self.ebc, self.ec = embedding_bag_collection, embedding_collection
        dim = embedding_collection.embedding_dim()
        pooled = sum(c.embedding_dim for c in embedding_bag_collection.embedding_bag_configs())
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dense_in_features + pooled + 2 * dim, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        pooled = self.ebc(sparse).values()
        seq = self.ec(sparse)
        history = seq["history"].to_padded_dense(MAX_HISTORY) + seq["history_genre"].to_padded_dense(MAX_HISTORY)  # [B, L, D]
        mask = torch.arange(MAX_HISTORY).unsqueeze(0) < seq["history"].lengths().unsqueeze(1)  # [B, L]
        candidate = seq["candidate"].values()  # one id per sample: [B, D]
        scores = (self.key(history) @ self.query(candidate).unsqueeze(2)).squeeze(2) / history.shape[-1] ** 0.5
        weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=1) * mask  # an empty history attends to nothing
        interest = (weights.unsqueeze(2) * history).sum(dim=1)
        return self.mlp(torch.cat([dense, pooled, interest, candidate], dim=1))


def build_ranker(dim: int = 32, seed: int = 0) -> TargetAttentionRanker:
    torch.manual_seed(seed)
    cpu = torch.device("cpu")
    model = TargetAttentionRanker(EmbeddingBagCollection(pooled_tables(dim), device=cpu),
                                  EmbeddingCollection(sequence_tables(dim), device=cpu), NUM_DENSE)
    return model.eval()


def din(embedding_bag_collection, dense_in_features, embedding_collection=None):
    """The ranker as a `model=custom` factory (it needs the sequence features' EmbeddingCollection)."""
    if embedding_collection is None:
        raise ValueError("din reads sequence features: it needs embedding_collection=")
    return TargetAttentionRanker(embedding_bag_collection, embedding_collection, dense_in_features)


def sequence_batch(batch_size: int, seed: int) -> Batch:
    """Random inputs: dense features, pooled bags of 1-2 ids, histories of 0..MAX_HISTORY ids, one candidate."""
    g = torch.Generator().manual_seed(seed)
    keys, lengths, values = [], [], []
    for feature, rows in POOLED.items():
        n = torch.randint(1, 3, (batch_size,), generator=g)
        keys.append(feature), lengths.append(n), values.append(torch.randint(0, rows, (int(n.sum()),), generator=g))
    history = torch.randint(0, MAX_HISTORY + 1, (batch_size,), generator=g)
    history[0] = 0  # one empty history in every batch
    for feature, rows, n in (("history", ITEMS, history), ("candidate", ITEMS, torch.ones(batch_size, dtype=torch.long)),
                             ("history_genre", GENRES, history)):
        keys.append(feature), lengths.append(n), values.append(torch.randint(0, rows, (int(n.sum()),), generator=g))
    sparse = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.cat(values), lengths=torch.cat(lengths))
    dense = torch.randn(batch_size, NUM_DENSE, generator=g)
    return Batch(dense=dense, sparse=sparse, labels=torch.randint(0, 2, (batch_size,), generator=g).float())


class HistoryAttention(nn.Module):
    """A DIN-style ranker over examples/make_parquet.py's click log, handed in as `model=custom` with today's factory
    arguments: beside the harness's EmbeddingBagCollection it builds an EmbeddingCollection of its own that looks
    the `history` column up unpooled, and the candidate `item_id` (pooled, one id) attends over it."""

    def __init__(self, embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int) -> None:
        super().__init__()
        self.ebc = embedding_bag_collection
        history = next(c for c in embedding_bag_collection.embedding_bag_configs() if c.feature_names == ["history"])
        dim = history.embedding_dim
        self.ec = EmbeddingCollection([EmbeddingConfig(name="s_history", embedding_dim=dim, num_embeddings=history.num_embeddings,
                                                       feature_names=["history"])], device=torch.device("cpu"))
        pooled = sum(c.embedding_dim for c in embedding_bag_collection.embedding_bag_configs())
        self.query, self.key = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dense_in_features + pooled + dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        pooled = self.ebc(sparse)
        history = self.ec(sparse)["history"]
        width = max(1, int(history.lengths().max())) if history.lengths().numel() else 1
        rows = history.to_padded_dense(width)  # [B, L, D]
        mask = torch.arange(width).unsqueeze(0) < history.lengths().unsqueeze(1)
        scores = (self.key(rows) @ self.query(pooled["item_id"]).unsqueeze(2)).squeeze(2) / rows.shape[-1] ** 0.5
        weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=1) * mask
        interest = (weights.unsqueeze(2) * rows).sum(dim=1)
        return self.mlp(torch.cat([dense, pooled.values(), interest], dim=1))


def history_attention(embedding_bag_collection, dense_in_features):
    return HistoryAttention(embedding_bag_collection, dense_in_features)
