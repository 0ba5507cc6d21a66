"""User models that break the custom-model contract, or that a backend cannot apply to (model=custom
model.factory=tests.support.custom_models:NAME). Each factory takes what the harness passes."""

import torch
from torch import nn


class _Pooled(nn.Module):
    """Sums every pooled embedding: one score per sample, no Linear layer."""

    def __init__(self, embedding_bag_collection, shift: float = 0.0):
        super().__init__()
        self.ebc = embedding_bag_collection
        self.shift = shift

    def forward(self, dense, sparse):
        return self.ebc(sparse).values().sum(dim=1) + self.shift


def no_linear(embedding_bag_collection, dense_in_features):
    return _Pooled(embedding_bag_collection)


def logits_below_zero(embedding_bag_collection, dense_in_features):
    """Logits far below 0 (declared as probabilities, they are refused)."""
    return _Pooled(embedding_bag_collection, shift=-5.0)


class _NoEbc(nn.Module):
    def __init__(self, dense_in_features):
        super().__init__()
        self.bag = nn.EmbeddingBag(100, 4, mode="sum")
        self.out = nn.Linear(dense_in_features + 4, 1)

    def forward(self, dense, sparse):
        ids = sparse.values() % 100
        return self.out(torch.cat([dense, self.bag(ids, sparse.offsets()[: len(dense)])], dim=1))


def no_ebc(embedding_bag_collection, dense_in_features):
    return _NoEbc(dense_in_features)


class _OneArgument(nn.Module):
    def __init__(self, embedding_bag_collection):
        super().__init__()
        self.ebc = embedding_bag_collection

    def forward(self, batch):
        return self.ebc(batch).values().sum(dim=1)


def wrong_arguments(embedding_bag_collection, dense_in_features):
    return _OneArgument(embedding_bag_collection)


class _TwoScores(nn.Module):
    def __init__(self, embedding_bag_collection, dense_in_features):
        super().__init__()
        self.ebc = embedding_bag_collection
        dim = sum(c.embedding_dim for c in embedding_bag_collection.embedding_bag_configs())
        self.out = nn.Linear(dense_in_features + dim, 2)

    def forward(self, dense, sparse):
        return self.out(torch.cat([dense, self.ebc(sparse).values()], dim=1))


def wrong_shape(embedding_bag_collection, dense_in_features):
    return _TwoScores(embedding_bag_collection, dense_in_features)


class _WithItsOwnEmbedding(nn.Module):
    """The harness's EBC plus an nn.Embedding of its own (a position bias): the TBE backends would leave it in fp32."""

    def __init__(self, embedding_bag_collection, dense_in_features):
        super().__init__()
        self.ebc = embedding_bag_collection
        dim = sum(c.embedding_dim for c in embedding_bag_collection.embedding_bag_configs())
        self.position = nn.Embedding(4, 1)
        self.out = nn.Linear(dense_in_features + dim, 1)

    def forward(self, dense, sparse):
        score = self.out(torch.cat([dense, self.ebc(sparse).values()], dim=1)).squeeze(1)
        return score + self.position(torch.zeros(len(dense), dtype=torch.long)).squeeze(1)


def own_embedding(embedding_bag_collection, dense_in_features):
    return _WithItsOwnEmbedding(embedding_bag_collection, dense_in_features)


class _SeveralOutputs(nn.Module):
    """A ranker with two heads, as production rankers return them: a dict {"ctr": logit, "cvr": logit}, or the
    tuple (cvr, ctr), or with `sigmoid` the dict's ctr as a probability (through an nn.Sigmoid module)."""

    def __init__(self, embedding_bag_collection, dense_in_features, as_tuple: bool = False, sigmoid: bool = False):
        super().__init__()
        self.ebc = embedding_bag_collection
        dim = sum(c.embedding_dim for c in embedding_bag_collection.embedding_bag_configs())
        self.hidden = nn.Sequential(nn.Linear(dense_in_features + dim, 32), nn.ReLU())
        self.ctr = nn.Linear(32, 1)
        self.cvr = nn.Linear(32, 1)
        self.as_tuple = as_tuple
        self.sigmoid = nn.Sigmoid() if sigmoid else None

    def forward(self, dense, sparse):
        h = self.hidden(torch.cat([dense, self.ebc(sparse).values()], dim=1))
        ctr, cvr = self.ctr(h).squeeze(1), self.cvr(h).squeeze(1)
        if self.sigmoid is not None:
            ctr = self.sigmoid(ctr)
        return (cvr, ctr) if self.as_tuple else {"ctr": ctr, "cvr": cvr}


def dict_outputs(embedding_bag_collection, dense_in_features, sigmoid: bool = False):
    return _SeveralOutputs(embedding_bag_collection, dense_in_features, sigmoid=sigmoid)


def tuple_outputs(embedding_bag_collection, dense_in_features):
    return _SeveralOutputs(embedding_bag_collection, dense_in_features, as_tuple=True)
