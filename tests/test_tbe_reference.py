"""FBGEMM's IntNBit TBE kernels against an independent reference.

The reference reads each table's stored rows from the quantized EBC's buffers, decodes them with the
row-wise formula of FBGEMM's layout ([fp16 scale | fp16 bias | packed q], low bits first), w = q * scale
+ bias, and pools them in fp64. Tolerance: rtol=atol=1e-5 — the kernel accumulates the same fp32
values in another order, so only fp32 rounding (about 1e-7 relative per add) separates them.
The decoded rows are also checked against the original fp32 weights (within half a quantization step),
so the reference cannot agree with the kernel by reading the bytes wrongly in the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.quant.embedding_modules import (
    EmbeddingBagCollection as QuantEmbeddingBagCollection,
)
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.backends.tbe import quantize_tables

DIM = 16
ROWS = (50, 31)


class Holder(nn.Module):
    def __init__(self, ebc):
        super().__init__()
        self.ebc = ebc

    def forward(self, kjt):
        return self.ebc(kjt)


def decode_rows(stored: torch.Tensor, bits: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stored uint8 rows -> (dequantized fp64 rows, per-row scale)."""
    raw = stored.numpy()
    scale = raw[:, 0:2].copy().view(np.float16).astype(np.float64)  # [rows, 1]
    bias = raw[:, 2:4].copy().view(np.float16).astype(np.float64)
    packed = raw[:, 4:].astype(np.int64)
    per_byte = 8 // bits
    j = np.arange(dim)
    q = (packed[:, j // per_byte] >> ((j % per_byte) * bits)) & ((1 << bits) - 1)
    return torch.from_numpy(q * scale + bias), torch.from_numpy(scale)


def random_kjt(rng, keys, rows, batch_size, multi_hot):
    lengths = [rng.integers(0, 5, batch_size) if multi_hot else np.ones(batch_size, dtype=np.int64) for _ in keys]
    values = [rng.integers(0, n, int(ls.sum())) for ls, n in zip(lengths, rows)]
    return KeyedJaggedTensor.from_lengths_sync(
        keys=list(keys), values=torch.from_numpy(np.concatenate(values)), lengths=torch.from_numpy(np.concatenate(lengths))
    )


def reference_pool(rows: torch.Tensor, kjt: KeyedJaggedTensor, key: str, mean: bool) -> torch.Tensor:
    jt = kjt[key]
    out = []
    for ids in jt.to_dense():
        pooled = rows[ids].sum(0) if len(ids) else torch.zeros(rows.shape[1], dtype=rows.dtype)
        out.append(pooled / len(ids) if mean and len(ids) else pooled)
    return torch.stack(out)


@pytest.mark.parametrize("dtype,bits", [("int8", 8), ("int4", 4), ("int2", 2)])
@pytest.mark.parametrize("pooling", [PoolingType.SUM, PoolingType.MEAN])
@pytest.mark.parametrize("multi_hot", [False, True], ids=["single_hot", "multi_hot"])
def test_tbe_matches_rowwise_reference(dtype, bits, pooling, multi_hot):
    torch.manual_seed(bits)
    keys = [f"f{i}" for i in range(len(ROWS))]
    configs = [
        EmbeddingBagConfig(name=f"t{i}", embedding_dim=DIM, num_embeddings=n, feature_names=[keys[i]], pooling=pooling)
        for i, n in enumerate(ROWS)
    ]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("cpu"))
    with torch.no_grad():
        for cfg in configs:
            ebc.embedding_bags[cfg.name].weight.normal_()
    original = {cfg.name: ebc.embedding_bags[cfg.name].weight.detach().double().clone() for cfg in configs}
    model = Holder(ebc)
    quantize_tables(model, {cfg.name: dtype for cfg in configs}, torch.device("cpu"))
    qebc = model.ebc
    assert isinstance(qebc, QuantEmbeddingBagCollection)

    kjt = random_kjt(np.random.default_rng(bits), keys, ROWS, batch_size=23, multi_hot=multi_hot)
    got = qebc(kjt).to_dict()
    for cfg, key in zip(configs, keys):
        stored = qebc.embedding_bags[cfg.name].weight.view(torch.uint8)
        assert stored.shape == (cfg.num_embeddings, DIM * bits // 8 + 4)
        rows, scale = decode_rows(stored, bits, DIM)
        # The decoding is right: each decoded value is within half a step (plus fp16 rounding of the bias).
        assert ((rows - original[cfg.name]).abs() <= 0.5 * scale + 2e-3 * original[cfg.name].abs().amax(1, keepdim=True)).all()
        expected = reference_pool(rows, kjt, key, mean=pooling == PoolingType.MEAN)
        torch.testing.assert_close(got[key].double(), expected, rtol=1e-5, atol=1e-5)
