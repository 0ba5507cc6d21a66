"""Small random tables, model configs and batches for the kernel suites and the tests (not a workload:
no planted signal)."""

from __future__ import annotations

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch
from bench.config import ModelConfig
from bench.workloads.workload import TableSpec



def tiny_tables(num_tables: int = 4, rows: int = 100, pooling: int = 1) -> list[TableSpec]:
    return [TableSpec(name=f"t_cat_{i}", feature=f"cat_{i}", num_embeddings=rows + 7 * i, pooling=pooling) for i in range(num_tables)]


def tiny_model_config(embedding_dim: int = 8) -> ModelConfig:
    return ModelConfig(
        name="tiny",
        embedding_dim=embedding_dim,
        dense_arch_layer_sizes=[16, embedding_dim],
        over_arch_layer_sizes=[16, 1],
    )


def random_batch(tables: list[TableSpec], batch_size: int, num_dense: int = 13, seed: int = 0) -> Batch:
    """Uniform ids; each sample has `pooling` ids per table (0 ids when pooling is 0)."""
    rng = np.random.default_rng(seed)
    lengths, values = [], []
    for t in tables:
        lengths.append(np.full(batch_size, t.pooling, dtype=np.int64))
        values.append(rng.integers(0, t.num_embeddings, size=batch_size * t.pooling))
    sparse = KeyedJaggedTensor.from_lengths_sync(
        keys=[t.feature for t in tables],
        values=torch.from_numpy(np.concatenate(values)),
        lengths=torch.from_numpy(np.concatenate(lengths)),
    )
    dense = torch.from_numpy(rng.standard_normal((batch_size, num_dense)).astype(np.float32))
    labels = torch.from_numpy((rng.random(batch_size) < 0.25).astype(np.float32))
    return Batch(dense=dense, sparse=sparse, labels=labels)
