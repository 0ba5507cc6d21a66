"""Quantized tables built directly: for models with random weights (`model.weights=random`), and for any
model's tables on a GPU.

torchrec's quantized EmbeddingBagCollection (or EmbeddingCollection, for a sequence model's unpooled
tables) is built from the table configs with each table's `data_type`; its FBGEMM kernel allocates one
zeroed uint8 buffer (pages untouched until written), and each table's rows are written into it chunk by
chunk from `bench.models.random_weights`, so an fp32 table never exists: the full MLPerf DLRM-v2 tables in INT4 peak at their own 13.9 GB.

Row layout: FBGEMM's table stores, for INT8/INT4/INT2 rows, the fp16 scale and fp16 bias FIRST and
then the packed codes; FBGEMM's quantize op (`FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf`, the
one torchrec's own quantize path uses) returns the codes first and scale/bias last, so each chunk is
rotated by 4 bytes. fp32 and fp16 rows are their raw bytes. With `backend.row_range=greedy` (the sub-byte
backends' default) an int4/int2 row's range is torch's greedy search instead of its min-max, in the same layout;
a CPU job's trained tables then go through torchrec's quantize path as before and their rows are rewritten in place
(`rewrite_rows`), since that path only spans min to max. tests/test_direct_build.py checks the
result is bit-identical to torchrec's quantize path on the same weights.

On a GPU the trained tables are built this way too (`build_tables_from_weights`): their rows are quantized
on the CPU, chunk by chunk, with the same FBGEMM op the CPU jobs use, and written into the GPU kernel's
16-byte rows. torchrec's own path would quantize them on the GPU instead, after copying every fp32 table to
it: the CUDA quantize kernel (`_float_to_fusednbitrowwise_cuda_kernel`) is a second implementation, whose
row pointer arithmetic is 32-bit (rows x columns past 2^31 values, as DLRM-v2's 40M-row tables at dim 128,
overflow it), and the fp32 copy alone of the full DLRM-v2 is larger than an 80 GB GPU. Built here, a CUDA
job's tables hold the same bytes as the CPU job's, row for row (tests/test_row_layout.py).
"""

from __future__ import annotations

import copy
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Optional

import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
import torch
from torch import nn
from torchrec.modules.embedding_configs import DataType
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.quant.embedding_modules import (
    EmbeddingBagCollection as QuantEmbeddingBagCollection,
)
from torchrec.quant.embedding_modules import (
    EmbeddingCollection as QuantEmbeddingCollection,
)
from torchrec.tensor_types import UIntXTensor

from bench.backends.modules import configs_of, holders_of, on_meta
from bench.models.random_weights import (
    CHUNK_ROWS,
    random_weights_seed,
    table_chunks,
)

Chunks = Callable[[object], Iterable[tuple[int, torch.Tensor]]]  # table config -> (first row, fp32 rows on the CPU)

DATA_TYPES = {"fp32": DataType.FP32, "fp16": DataType.FP16, "int8": DataType.INT8, "int4": DataType.INT4, "int2": DataType.INT2}
BITS = {"int8": 8, "int4": 4, "int2": 2}
SCALE_BIAS_BYTES = 4  # fp16 scale + fp16 bias

# How an integer row's range is chosen: minmax (FBGEMM's quantize op, what torchrec's quantize path stores) |
# greedy (torch's `embedding_bag_{4,2}bit_prepack(optimized_qparams=True)`: each row's [min, max] shrunk step by
# step while its L2 rounding error falls, the range torch's own sub-byte embedding path offers). The same
# fused layout either way (codes, then fp16 scale and bias); int8 rows keep min-max (torch offers no search at
# 8 bits, and their rounding error is 16x smaller than int4's).
ROW_RANGES = ("minmax", "greedy")
GREEDY_PREPACK = {4: torch.ops.quantized.embedding_bag_4bit_prepack, 2: torch.ops.quantized.embedding_bag_2bit_prepack}


GREEDY_CHUNK_ROWS = 16384


def fused_rows(rows: torch.Tensor, bits: int, row_range: str = "minmax") -> torch.Tensor:
    """fp32 rows quantized row-wise to `bits` in FBGEMM's fused layout (codes, then fp16 scale and bias)."""
    rows = rows.detach().float().contiguous()
    if row_range == "greedy" and bits in GREEDY_PREPACK:
        # torch's search runs one row at a time on one thread (about 200 ns a value here): chunks of rows on every
        # core (the op releases the GIL), each row's result the same as in one call
        chunks = rows.split(GREEDY_CHUNK_ROWS)
        with ThreadPoolExecutor(max_workers=min(len(chunks), os.cpu_count() or 1)) as pool:
            done = list(pool.map(lambda chunk: GREEDY_PREPACK[bits](chunk, optimized_qparams=True), chunks))
        return torch.cat(done) if len(done) > 1 else done[0]
    return torch.ops.fbgemm.FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf(rows, bits)


def greedy_applies(dtypes, row_range: str) -> bool:
    """Whether `row_range` changes any of these tables' rows (greedy, on a sub-byte table)."""
    return row_range == "greedy" and any(BITS.get(d, 8) in GREEDY_PREPACK for d in dtypes)


def stored_rows(rows: torch.Tensor, dtype: str, row_range: str = "minmax") -> torch.Tensor:
    """fp32 rows as the bytes FBGEMM's table stores for weight type `dtype` (uint8, unpadded)."""
    if dtype == "fp32":
        return rows.contiguous().view(torch.uint8)
    if dtype == "fp16":
        return rows.half().view(torch.uint8)
    fused = fused_rows(rows, BITS[dtype], row_range)  # codes, then scale/bias
    return torch.cat([fused[:, -SCALE_BIAS_BYTES:], fused[:, :-SCALE_BIAS_BYTES]], dim=1)


def _stored(weight: torch.Tensor) -> torch.Tensor:
    return weight.elem if isinstance(weight, UIntXTensor) else weight


@torch.no_grad()
def build_quantized_ebc(ebc: nn.Module, dtypes: dict[str, str], device: torch.device, row_alignment: int, seed: Optional[int] = None,
                        chunks: Optional[Chunks] = None, row_range: str = "minmax") -> nn.Module:
    """A quantized EmbeddingBagCollection (or, for an EmbeddingCollection, a quantized EmbeddingCollection) with
    the tables of `ebc`, stored as `dtypes`, filled with the rows `chunks` gives (default: the random-weights rows
    of `seed`, `ebc` on the meta device); configured as torchrec's inference path configures it."""
    if chunks is None:
        chunks = lambda cfg: table_chunks(seed, cfg.name, cfg.num_embeddings, cfg.embedding_dim)  # noqa: E731
    configs = []
    for cfg in configs_of(ebc):
        cfg = copy.deepcopy(cfg)
        cfg.data_type = DATA_TYPES[dtypes[cfg.name]]
        configs.append(cfg)
    common = dict(device=device, output_dtype=torch.float32, register_tbes=True, row_alignment=row_alignment, cache_features_order=True)
    if isinstance(ebc, EmbeddingCollection):
        quantized = QuantEmbeddingCollection(configs, need_indices=ebc.need_indices(), **common)
    else:
        quantized = QuantEmbeddingBagCollection(configs, is_weighted=ebc.is_weighted(), **common)
    for cfg in configs:
        target = _stored(holders_of(quantized)[cfg.name].weight)  # a view into the kernel's buffer
        for start, rows in chunks(cfg):
            chunk = stored_rows(rows, dtypes[cfg.name], row_range)
            target[start:start + len(chunk), : chunk.shape[1]].copy_(chunk)
    return quantized


def build_tables_directly(model: nn.Module, dtypes: dict[str, str], device: torch.device, row_alignment: int,
                          row_range: str = "minmax") -> None:
    """Replace every meta-device EmbeddingBagCollection and EmbeddingCollection of `model` by its directly built
    quantized one, in place."""
    seed = random_weights_seed(model)
    for name, module in list(model.named_modules()):
        if on_meta(module):
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            tables = {cfg.name: dtypes[cfg.name] for cfg in configs_of(module)}
            setattr(parent, attr, build_quantized_ebc(module, tables, device, row_alignment, seed, row_range=row_range))


def weight_chunks(ebc: nn.Module, chunk_rows: int = CHUNK_ROWS) -> Chunks:
    """The rows of each of `ebc`'s own (trained) tables, chunk by chunk, as fp32 on the CPU."""
    def chunks(cfg) -> Iterable[tuple[int, torch.Tensor]]:
        weight = holders_of(ebc)[cfg.name].weight.detach()
        for start in range(0, weight.shape[0], chunk_rows):
            yield start, weight[start:start + chunk_rows].float().cpu()

    return chunks


@torch.no_grad()
def rewrite_rows(model: nn.Module, weights: dict[str, torch.Tensor], dtypes: dict[str, str], row_range: str,
                 chunk_rows: int = CHUNK_ROWS) -> list[str]:
    """Overwrite, in place, the rows of `model`'s quantized int4/int2 tables (torchrec's own modules, as its quantize
    path built them) with their fp32 `weights` quantized with `row_range`: the same module, state dict and kernel,
    only the row bytes differ. Returns the tables rewritten."""
    done = []
    for module in model.modules():
        if not isinstance(module, (QuantEmbeddingBagCollection, QuantEmbeddingCollection)):
            continue
        for cfg in configs_of(module):
            dtype = dtypes.get(cfg.name)
            if not greedy_applies([dtype], row_range):
                continue
            holder = holders_of(module)[cfg.name]
            target = _stored(holder.weight)  # a view into the kernel's buffer: whole rows, or (split) the codes alone
            split = hasattr(holder, "weight_qscale")  # a sharded job's modules split scale and bias out (torchrec's views)
            weight = weights[cfg.name]
            for start in range(0, weight.shape[0], chunk_rows):
                chunk = stored_rows(weight[start:start + chunk_rows].float().cpu(), dtype, row_range)
                rows = slice(start, start + len(chunk))
                if split:
                    codes = chunk[:, SCALE_BIAS_BYTES:]
                    target[rows, : codes.shape[1]].copy_(codes)
                    holder.weight_qscale[rows].copy_(chunk[:, :2].contiguous().view(torch.float16).view_as(holder.weight_qscale[rows]))
                    holder.weight_qbias[rows].copy_(chunk[:, 2:4].contiguous().view(torch.float16).view_as(holder.weight_qbias[rows]))
                else:
                    target[rows, : chunk.shape[1]].copy_(chunk)
            done.append(cfg.name)
    return done


def build_tables_from_weights(model: nn.Module, dtypes: dict[str, str], device: torch.device, row_alignment: int,
                              row_range: str = "minmax") -> None:
    """Replace every eager EmbeddingBagCollection and EmbeddingCollection of `model` by a quantized one on `device`
    whose rows are its own weights quantized on the CPU (FBGEMM's CPU op, or torch's greedy range), in place."""
    for name, module in list(model.named_modules()):
        if type(module) in (EmbeddingBagCollection, EmbeddingCollection):
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            tables = {cfg.name: dtypes[cfg.name] for cfg in configs_of(module)}
            setattr(parent, attr, build_quantized_ebc(module, tables, device, row_alignment, chunks=weight_chunks(module), row_range=row_range))
