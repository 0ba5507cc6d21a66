"""Untrained models whose embedding tables are never materialized in fp32 by the model itself.

`model.weights=random` builds the model with its EmbeddingBagCollections on the meta device (no
memory) and its dense part on the CPU with torch's default initialization from `seed`. The table
values are a pure function of (seed, table name, row): `table_chunk` yields them chunk by chunk,
uniform in +-sqrt(1/rows) as torchrec's default initializer draws them. A backend that needs the
tables builds them from these chunks in the form it stores (fp32 rows for the eager model, FBGEMM
rows for the TBE backends, quantized chunk by chunk), so the full MLPerf DLRM-v2 tables (104 GB in
fp32) exist only as their 13.9 GB of INT4 rows. Every backend sees the same underlying weights.

Such a model measures speed and memory only: it has no accuracy to report.
"""

from __future__ import annotations

import math
import zlib
from typing import Iterator

import numpy as np
import torch
from torch import nn
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

CHUNK_ROWS = 1 << 18  # rows generated at a time: 128 MiB of fp32 at dim 128
RANDOM = "random"
TRAINED = "trained"
WEIGHTS = (TRAINED, RANDOM)


PIECE_BYTES = 4 << 20  # fp32 rows handed out at a time: a 512-wide table's 256K-row chunk (512 MiB) would outweigh a small INT4 table


def _chunk_generator(seed: int, table: str, chunk: int) -> torch.Generator:
    entropy = [seed, zlib.crc32(table.encode()), chunk]
    return torch.Generator().manual_seed(int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> 1))


def table_chunk(seed: int, table: str, rows: int, dim: int, chunk: int) -> torch.Tensor:
    """fp32 rows [chunk * CHUNK_ROWS, ...) of `table`; the same values whoever asks."""
    start = chunk * CHUNK_ROWS
    n = min(CHUNK_ROWS, rows - start)
    bound = math.sqrt(1.0 / rows)
    return torch.rand(n, dim, generator=_chunk_generator(seed, table, chunk)).mul_(2 * bound).sub_(bound)


def table_chunks(seed: int, table: str, rows: int, dim: int, piece_bytes: int = PIECE_BYTES) -> Iterator[tuple[int, torch.Tensor]]:
    """(first row, fp32 rows) of every piece of a table, in order: each chunk's rows (`table_chunk`'s values)
    drawn in pieces of at most `piece_bytes` from the chunk's generator, which draws the same values in pieces
    as at once, so the build's transient memory stays small beside the stored table."""
    bound = math.sqrt(1.0 / rows)
    piece = max(1, piece_bytes // (4 * dim))
    for chunk in range(-(-rows // CHUNK_ROWS)):
        generator = _chunk_generator(seed, table, chunk)
        first, end = chunk * CHUNK_ROWS, min(rows, (chunk + 1) * CHUNK_ROWS)
        for start in range(first, end, piece):
            yield start, torch.rand(min(piece, end - start), dim, generator=generator).mul_(2 * bound).sub_(bound)


def unmaterialized(ebc: nn.Module) -> bool:
    """True for an EmbeddingBagCollection or EmbeddingCollection whose tables live on the meta device (random weights)."""
    return isinstance(ebc, (EmbeddingBagCollection, EmbeddingCollection)) and any(p.is_meta for p in ebc.parameters())


def random_weights_seed(model: nn.Module) -> int:
    """The seed a random-weights model's tables come from (set by `bench.models.train.trained_model`)."""
    return int(getattr(model, "random_weights_seed"))


@torch.no_grad()
def materialize_tables(ebc: EmbeddingBagCollection | EmbeddingCollection, seed: int) -> None:
    """Give a meta-device EmbeddingBagCollection (or a sequence model's EmbeddingCollection) its fp32 tables
    on the CPU, filled chunk by chunk."""
    pooled = isinstance(ebc, EmbeddingBagCollection)
    for cfg in ebc.embedding_bag_configs() if pooled else ebc.embedding_configs():
        bag = (ebc.embedding_bags if pooled else ebc.embeddings)[cfg.name]
        weight = torch.empty(cfg.num_embeddings, cfg.embedding_dim)
        for start, rows in table_chunks(seed, cfg.name, cfg.num_embeddings, cfg.embedding_dim):
            weight[start:start + len(rows)] = rows
        bag.weight = nn.Parameter(weight, requires_grad=False)
