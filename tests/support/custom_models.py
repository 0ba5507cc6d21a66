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


class NanWhenInt8(nn.Module):
    """`log(W v)`, where fp32 gives a small positive value and any symmetric int8 weight scheme gives 0 or less.

    `v` is one positive column of the layer's input, repeated; W's rows are `[1, -1, t, ..., t]` with 16 weights
    t = 0.0015. In fp32, `W v = 16 t v > 0`. Quantized to int8 with one symmetric scale (max |w| = 1: a step of
    1/127 or so), every t rounds to 0 and the ±1 cancel (or round to a negative sum): `log` of 0 is -inf, of a
    negative value NaN. The weights are frozen: training leaves the plant as it is. Two output rows, so the
    one-output rule (the score layer kept fp32) does not spare it."""

    TINY, COUNT = 0.0015, 16

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2 + self.COUNT, 2, bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[1.0, -1.0] + [self.TINY] * self.COUNT] * 2))
        self.linear.weight.requires_grad_(False)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return torch.log(self.linear(v.expand(-1, 2 + self.COUNT)))


class _PlantedNan(nn.Module):
    """A small ranker (a Linear over the dense features and pooled embeddings) whose score adds the planted layer's
    output, weighted 1e-3: fp32 ranks as the ranker does; int8 makes every score non-finite."""

    def __init__(self, embedding_bag_collection, dense_in_features):
        super().__init__()
        self.ebc = embedding_bag_collection
        width = dense_in_features + sum(c.embedding_dim * len(c.feature_names) for c in self.ebc.embedding_bag_configs())
        self.tower = nn.Sequential(nn.Linear(width, 16), nn.ReLU(), nn.Linear(16, 1))
        self.planted = NanWhenInt8()

    def forward(self, dense, sparse):
        x = torch.cat([dense, self.ebc(sparse).values()], dim=1)
        v = 1.0 + dense[:, :1] * dense[:, :1]  # positive: 1 and above
        return self.tower(x).squeeze(1) + 1e-3 * self.planted(v).mean(dim=1)


def planted_nan(embedding_bag_collection, dense_in_features):
    return _PlantedNan(embedding_bag_collection, dense_in_features)


class _WideScore(nn.Module):
    """A score layer (one Linear, one output feature) whose input holds one wide column beside small features: a
    count near 1,000 beside a ReLU tower's outputs, as DeepFM's factorization-machine term (up to ~1,500) sits beside
    features below 10. One int8 scale over that input rounds the tower's outputs away."""

    def __init__(self, embedding_bag_collection, dense_in_features):
        super().__init__()
        self.ebc = embedding_bag_collection
        width = sum(c.embedding_dim for c in embedding_bag_collection.embedding_bag_configs())
        self.tower = nn.Sequential(nn.Linear(dense_in_features + width, 16), nn.ReLU())
        self.score = nn.Linear(17, 1)
        with torch.no_grad():
            self.score.weight[0, -1] = 1e-3
        # trained as it is built: Adam's steps on the count's weight (each a logit per 0.001) would swamp the tower's
        self.score.requires_grad_(False)

    def forward(self, dense, sparse):
        pooled = self.ebc(sparse).values()
        count = 1000.0 + dense[:, :1]
        return self.score(torch.cat([self.tower(torch.cat([dense, pooled], dim=1)), count], dim=1)).squeeze(1)


def wide_score(embedding_bag_collection, dense_in_features):
    return _WideScore(embedding_bag_collection, dense_in_features)
