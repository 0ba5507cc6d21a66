"""Kernel-level suites: TBE embedding lookups per weight type, and MLP fp32 against int8 Linear.

TBE: a model holding just an EmbeddingBagCollection (built by `bench.models.dlrm`, as the DLRM's is)
goes through `bench.backends.tbe.quantize_tables`, the code every TBE backend runs, for each weight
type (fp32, fp16, int8, int4, int2) across table size and pooling factor. Ids are uniform over the
table (`bench.workloads.random_batch.random_batch`): the worst case for caches; a big table is DRAM-bound. Every
timed call gets a fresh batch from a pool of `ID_POOL` distinct id batches, as FBGEMM's own
`nbit-cpu` benchmark draws fresh ids per iteration: re-timing one batch keeps its rows in cache
(at pooling 1 that made the int8 figure 2.35x faster than FBGEMM's own benchmark).
`test_tbe_fresh_ids_against_one_repeated_batch` records how much a repeated batch flatters.
`extra_info` holds the effective bandwidth:

    gbps = bytes_read / median time,  bytes_read = sum over tables of (batch x pooling) x row_bytes

with row_bytes read back from the module's stored rows (`bench.backends.tables.table_storage`: FP32 4D,
FP16 2D, INT8 D+4, INT4 D/2+4, INT2 D/4+4). Only the gathered rows count, not the pooled output.

MLP: torchrec's `MLP` (the block DLRM's dense and over arch use) in fp32, and the same after
`bench.backends.linear.quantize_int8(..., "dynamic")`, the int8 MLP of the TBE backends (Linear+ReLU
fused, torch.ao dynamic int8 kernels; CPU only). `extra_info` holds GFLOP/s (2 x batch x sum of
in x out per call) and the int8 output's relative error against fp32.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import nn
from torchrec.modules.mlp import MLP

from bench.backends.linear import quantize_int8
from bench.backends.tables import table_storage
from bench.backends.tbe import WEIGHT_DTYPES, quantize_tables
from bench.models.dlrm import embedding_bag_collection
from bench.workloads.random_batch import random_batch
from bench.workloads.workload import TableSpec

NUM_TABLES = 2
EMBEDDING_DIM = 128  # DLRM-v2's; packs into whole bytes at every weight type (INT2: D % 4 == 0)
TBE_BATCH = 1024
ID_POOL = 64  # distinct id batches cycled through by the timed calls
QUICK_DIM, QUICK_BATCH = 16, 32

# DLRM-v2 (MLPerf): bottom 13-512-256-128; top 1024-1024-512-256-1 over the DCN output, 27 x 128 wide.
MLP_SHAPES = ["13-512-256-128", "3456-1024-1024-512-256-1"]

# arg -> (full grid, quick grid, test id prefix); the last argument varies fastest.
GRID = {
    "rows": ([10_000, 100_000, 1_000_000], [1000], "rows"),
    "weight_type": (list(WEIGHT_DTYPES), list(WEIGHT_DTYPES), ""),
    "pooling": ([1, 8, 64], [2], "pool"),
    "mlp_shape": (MLP_SHAPES, ["13-32-16"], ""),
    "mlp_batch": ([256, 2048], [32], "bs"),
    "precision": (["fp32", "int8"], ["fp32", "int8"], ""),
}


class EmbeddingsOnly(nn.Module):
    """A TorchRec-style model that is just an EmbeddingBagCollection: `forward(kjt) -> [B, T x D]`."""

    def __init__(self, ebc: nn.Module) -> None:
        super().__init__()
        self.ebc = ebc

    def forward(self, sparse):
        return self.ebc(sparse).values()


def _tables(rows: int) -> list[TableSpec]:
    return [TableSpec(name=f"t_{i}", feature=f"f_{i}", num_embeddings=rows) for i in range(NUM_TABLES)]


@functools.lru_cache(maxsize=1)
def _eager(rows: int, dim: int) -> nn.Module:
    torch.manual_seed(0)
    return EmbeddingsOnly(embedding_bag_collection(_tables(rows), dim)).eval()


@functools.lru_cache(maxsize=1)
def _tbe(rows: int, dim: int, weight_type: str, device_str: str) -> nn.Module:
    device = torch.device(device_str)
    model = copy.deepcopy(_eager(rows, dim)).to(device)
    quantize_tables(model, {t.name: weight_type for t in _tables(rows)}, device)  # checks the stored dtypes
    return model


class FreshIds:
    """`module(next batch of the pool)`: each call looks up ids the call before did not."""

    def __init__(self, module: nn.Module, pool: list) -> None:
        self.module, self.pool, self.calls = module, pool, 0

    def __call__(self):
        batch = self.pool[self.calls % len(self.pool)]
        self.calls += 1
        return self.module(batch)


def _id_pool(tables: list[TableSpec], batch_size: int, device: torch.device, size: int = ID_POOL) -> list:
    return [random_batch(tables, batch_size, seed=1 + i).sparse.to(device) for i in range(size)]


def test_tbe_lookup(benchmark, timed, device, is_quick, rows, weight_type, pooling):
    dim, batch_size = (QUICK_DIM, QUICK_BATCH) if is_quick else (EMBEDDING_DIM, TBE_BATCH)
    module = _tbe(rows, dim, weight_type, str(device))
    tables = [TableSpec(t.name, t.feature, rows, pooling) for t in _tables(rows)]
    fresh = FreshIds(module, _id_pool(tables, batch_size, device, 4 if is_quick else ID_POOL))

    storage = table_storage(module)
    rows_gathered = batch_size * pooling * len(tables)
    bytes_read = sum(batch_size * pooling * storage[t.name]["row_bytes"] for t in tables)

    benchmark.group = f"tbe rows={rows} pooling={pooling}"
    out, median = timed(fresh)
    assert out.shape == (batch_size, len(tables) * dim) and bool(torch.isfinite(out).all())

    benchmark.extra_info.update(
        distinct_id_batches=len(fresh.pool),
        weight_type=weight_type,
        rows=rows,
        pooling=pooling,
        tables=len(tables),
        dim=dim,
        batch_size=batch_size,
        row_bytes=storage[tables[0].name]["row_bytes"],
        rows_gathered=rows_gathered,
        bytes_read=bytes_read,
        table_bytes=sum(s["rows"] * s["row_bytes"] for s in storage.values()),
    )
    if median:
        benchmark.extra_info.update(gbps=bytes_read / median / 1e9, lookups_per_s=rows_gathered / median)


def test_tbe_fresh_ids_against_one_repeated_batch(benchmark, timed, device, is_quick, weight_type):
    """Pooling 1, the largest table, every weight type: the same kernel on fresh ids (the figure the suite
    reports) and on one batch timed again and again; `repeated_over_fresh` > 1 is what a replayed batch flatters."""
    rows = GRID["rows"][1 if is_quick else 0][-1]
    dim, batch_size = (QUICK_DIM, QUICK_BATCH) if is_quick else (EMBEDDING_DIM, TBE_BATCH)
    module = _tbe(rows, dim, weight_type, str(device))
    tables = [TableSpec(t.name, t.feature, rows, 1) for t in _tables(rows)]
    fresh = FreshIds(module, _id_pool(tables, batch_size, device, 4 if is_quick else ID_POOL))
    repeated = FreshIds(module, fresh.pool[:1])
    benchmark.group = f"tbe fresh vs repeated rows={rows} pooling=1"
    _, fresh_median = timed(fresh)
    benchmark.extra_info.update(weight_type=weight_type, rows=rows, distinct_id_batches=len(fresh.pool))
    if fresh_median:
        with torch.inference_mode():
            import time

            for _ in range(3):
                repeated()
            start = time.perf_counter()
            n = 200 if not is_quick else 5
            for _ in range(n):
                repeated()
            repeated_s = (time.perf_counter() - start) / n
        benchmark.extra_info.update(fresh_ms=fresh_median * 1e3, repeated_ms=repeated_s * 1e3,
                                    repeated_over_fresh=fresh_median / repeated_s)


def _sizes(shape: str) -> list[int]:
    return [int(x) for x in shape.split("-")]


@functools.lru_cache(maxsize=2)
def _mlp(shape: str, precision: str, device_str: str) -> nn.Module:
    sizes = _sizes(shape)
    torch.manual_seed(0)
    model = MLP(sizes[0], sizes[1:]).eval()
    if precision == "int8":
        layers = quantize_int8(model, "dynamic", [], torch.device(device_str))  # dynamic: no calibration
        assert layers == len(sizes) - 1, f"{layers} int8 layers, expected {len(sizes) - 1}"
    return model.to(device_str)


def test_mlp(benchmark, timed, device, mlp_shape, mlp_batch, precision):
    if precision == "int8" and device.type != "cpu":
        pytest.skip("torch.ao's int8 Linear runs on CPU only")
    sizes = _sizes(mlp_shape)
    module = _mlp(mlp_shape, precision, str(device))
    x = torch.randn(mlp_batch, sizes[0], generator=torch.Generator().manual_seed(1)).to(device)
    flops = 2 * mlp_batch * sum(a * b for a, b in zip(sizes, sizes[1:]))

    benchmark.group = f"mlp {mlp_shape} bs={mlp_batch}"
    out, median = timed(module, x)
    assert out.shape == (mlp_batch, sizes[-1])

    benchmark.extra_info.update(precision=precision, shape=mlp_shape, batch_size=mlp_batch, flops=flops)
    if precision != "fp32":
        with torch.inference_mode():
            ref = _mlp(mlp_shape, "fp32", str(device))(x)
        benchmark.extra_info["rel_error_vs_fp32"] = float((out - ref).norm() / ref.norm())
    if median:
        benchmark.extra_info.update(gflops=flops / median / 1e9, samples_per_s=mlp_batch / median)
