"""`model=hstu`: a DLRMv3-shaped sequential ranker (HSTU, the model of MLPerf Inference's DLRMv3).

One request's sequence is `[contextual tokens, history (oldest first), candidates]`:

- a contextual token per pooled feature (the EmbeddingBagCollection's lookups, e.g. `user_id`);
- the history: the EmbeddingCollection's unpooled lookups of the workload's history feature, plus a
  timestamp encoding (a learned vector per bucket of sqrt(age in minutes), the age at the request) and a
  position encoding (how many events before the request);
- the candidates: the rows of the request (consecutive rows with one `request` id; a workload without that
  key makes each row its own request), each its item's embedding at age 0, looked up in the history's table.

Each layer (an STU block): U, V, Q, K = SiLU(Linear(LayerNorm(x))); the jagged SiLU attention
`SiLU(Q K^T * alpha) / max_seq_len`, masked, times V; `LayerNorm(attention) * U`; a Linear back to the
width, added to x. The mask is causal over the history; M-FALCON for the candidates: each candidate sees
the contextual tokens, the whole history and itself, and no other candidate, so a row's score does not
depend on the other candidates of its batch (nor, with the fixed normaliser `model.hstu.max_seq_len`, on
how long the batch's longest sequence is). The score: an MLP over the candidate's final state and its item
embedding. `hstu_attention` is checked against generative-recommenders' PyTorch reference
(tests/test_hstu.py, on a fixture its own code produced).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.config import HstuConfig
from bench.errors import UserError
from bench.models.dlrm import embedding_bag_collection, embedding_collection, pooled
from bench.workloads.workload import Sequences, TableSpec


def attention_mask(lengths: torch.Tensor, num_targets: torch.Tensor, n: int) -> torch.Tensor:
    """[G, n, n] bool: may position i of sequence g read position j. Every candidate (the last num_targets
    positions) takes the position right after the history, so it reads the history and itself only."""
    positions = torch.arange(n, device=lengths.device).view(1, n)
    ids = torch.minimum(positions, (lengths - num_targets).view(-1, 1))
    earlier = ids.unsqueeze(2) > ids.unsqueeze(1)
    return earlier | torch.eye(n, dtype=torch.bool, device=lengths.device).unsqueeze(0)


def hstu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor, num_targets: torch.Tensor,
                   alpha: float, normalizer: float) -> torch.Tensor:
    """HSTU's pointwise attention on padded sequences: q, k [G, N, H, A], v [G, N, H, V] -> [G, N, H, V].
    Positions past a sequence's length are padding (their outputs are not read)."""
    n = q.shape[1]
    scores = torch.einsum("gnha,gmha->ghnm", q, k) * alpha
    weights = F.silu(scores) / normalizer * attention_mask(lengths, num_targets, n).unsqueeze(1).to(scores.dtype)
    return torch.einsum("ghnm,gmhv->gnhv", weights, v)


class STULayer(nn.Module):
    """One HSTU block, pre-norm and residual."""

    def __init__(self, dim: int, shape: HstuConfig) -> None:
        super().__init__()
        self.heads, self.attention_dim, self.linear_dim = shape.num_heads, shape.attention_dim, shape.linear_dim
        self.alpha = 1.0 / math.sqrt(shape.attention_dim)
        self.normalizer = float(shape.max_seq_len)
        self.norm = nn.LayerNorm(dim)
        self.uvqk = nn.Linear(dim, shape.num_heads * 2 * (shape.linear_dim + shape.attention_dim))
        self.attention_norm = nn.LayerNorm(shape.num_heads * shape.linear_dim)
        self.out = nn.Linear(shape.num_heads * shape.linear_dim, dim)
        self.dropout = nn.Dropout(shape.dropout)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, num_targets: torch.Tensor) -> torch.Tensor:
        g, n, _ = x.shape
        h, a, lv = self.heads, self.attention_dim, self.linear_dim
        u, v, q, k = torch.split(F.silu(self.uvqk(self.norm(x))), [h * lv, h * lv, h * a, h * a], dim=-1)
        attended = hstu_attention(q.reshape(g, n, h, a), k.reshape(g, n, h, a), v.reshape(g, n, h, lv), lengths, num_targets,
                                  self.alpha, self.normalizer)
        y = self.attention_norm(attended.reshape(g, n, h * lv)) * u
        return x + self.out(self.dropout(y))


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class HSTU(nn.Module):
    """forward(dense_features, KeyedJaggedTensor) -> [B] logits, one per (request, candidate) row."""

    def __init__(self, embedding_collection: nn.Module, embedding_bag_collection: nn.Module | None, sequences: Sequences,
                 shape: HstuConfig, dim: int) -> None:
        super().__init__()
        self.ec = embedding_collection
        self.ebc = embedding_bag_collection
        self.sequences = sequences
        self.context_features = [f for c in embedding_bag_collection.embedding_bag_configs() for f in c.feature_names] if embedding_bag_collection else []
        self.time_buckets = shape.time_buckets
        self.max_position = shape.max_seq_len
        # Plain parameters indexed by bucket, not nn.Embedding modules: the backends quantize the torchrec
        # collections and leave these small encodings in fp32.
        self.time_encoding = nn.Parameter(torch.randn(shape.time_buckets + 1, dim) * 0.02)
        self.position_encoding = nn.Parameter(torch.randn(shape.max_seq_len + 1, dim) * 0.02)
        self.context_encoding = nn.Parameter(torch.randn(max(1, len(self.context_features)), dim) * 0.02)
        self.layers = nn.ModuleList(STULayer(dim, shape) for _ in range(shape.num_layers))
        self.final_norm = nn.LayerNorm(dim)
        self.over_arch = _mlp([2 * dim, *shape.over_arch_layer_sizes])

    def time_bucket(self, ages: torch.Tensor) -> torch.Tensor:
        minutes = ages.to(torch.float32).clamp(min=0) / 60.0
        return torch.sqrt(minutes).long().clamp(max=self.time_buckets)

    def forward(self, dense_features: torch.Tensor, sparse_features: KeyedJaggedTensor) -> torch.Tensor:
        seq = self.sequences
        looked = self.ec(sparse_features)
        history, candidate = looked[seq.history], looked[seq.candidate]
        item = candidate.values()  # [B, D]: one candidate per row
        rows = item.shape[0]
        device = item.device
        ages = sparse_features[seq.ages].values() if seq.ages else torch.zeros_like(history.values()[:, 0], dtype=torch.long)
        request = sparse_features[seq.request].values() if seq.request else torch.arange(rows, device=device)
        # the requests: runs of consecutive rows with one request id; each reads its first row's history
        starts = torch.ones(rows, dtype=torch.bool, device=device)
        starts[1:] = request[1:] != request[:-1]
        group = torch.cumsum(starts.long(), 0) - 1
        first = torch.nonzero(starts).squeeze(1)
        groups = first.numel()
        num_targets = torch.bincount(group, minlength=groups)
        rank = torch.arange(rows, device=device) - first[group]
        n_context = len(self.context_features)
        hist_lengths = history.lengths()[first].long()
        lengths = n_context + hist_lengths + num_targets
        x = torch.zeros(groups, int(lengths.max()), item.shape[1], dtype=item.dtype, device=device)
        if n_context:
            pooled_kt = self.ebc(sparse_features).to_dict()
            context = torch.stack([pooled_kt[f] for f in self.context_features], dim=1)  # [B, C, D]
            x[:, :n_context] = context[first] + self.context_encoding
        total = int(hist_lengths.sum())
        if total:
            owner = torch.repeat_interleave(torch.arange(groups, device=device), hist_lengths)
            step = torch.arange(total, device=device) - torch.repeat_interleave(torch.cumsum(hist_lengths, 0) - hist_lengths, hist_lengths)
            source = history.offsets()[first][owner] + step
            before = (hist_lengths[owner] - step).clamp(max=self.max_position)  # events before the request, 1 for the last
            x[owner, n_context + step] = (history.values()[source] + F.embedding(self.time_bucket(ages[source]), self.time_encoding)
                                          + F.embedding(before, self.position_encoding))
        at = n_context + hist_lengths[group] + rank  # each row's candidate position
        x[group, at] = item + self.time_encoding[0] + self.position_encoding[0]
        for layer in self.layers:
            x = layer(x, lengths, num_targets)
        state = self.final_norm(x[group, at])
        return self.over_arch(torch.cat([state, item], dim=1)).squeeze(1)


def hstu_shape(cfg) -> HstuConfig:
    """model.hstu as the typed shape (a plain dict where the config was read back from JSON)."""
    shape = cfg.hstu
    if isinstance(shape, dict):
        shape = HstuConfig(**shape)
    shape.validate()
    return shape


def build_hstu(cfg, tables: list[TableSpec], num_dense: int, sequences: Sequences | None,
               table_device: torch.device | str = "cpu") -> nn.Module:
    if sequences is None:
        raise UserError("model=hstu reads a history and candidates: use a sequential workload "
                        "(workload=synthetic_seq or workload=movielens; docs/sequential.md)")
    ec = embedding_collection(tables, cfg.embedding_dim, table_device)
    ebc = embedding_bag_collection(tables, cfg.embedding_dim, table_device) if pooled(tables) else None
    return HSTU(ec, ebc, sequences, hstu_shape(cfg), cfg.embedding_dim)
