"""Embedding storage, read from a prepared module's real buffers and parameters.

Works on the eager EmbeddingBagCollection (fp32 or fp16 parameters, or torch's rowwise-quantized bags swapped
into it by `ao_embeddingbag`, bench.backends.rowwise) and EmbeddingCollection (a sequence model's unpooled
tables), and on torchrec's quantized EmbeddingBagCollection and EmbeddingCollection, whose tables live in
FBGEMM table-batched-embedding (TBE) buffers (the EmbeddingCollection's kernel with `PoolingMode.NONE`).
`table_precisions` names each table's stored type and its lookup: `pooled` (a bag collection) or `sequence`. For the
quantized one, the dtype is the one the TBE kernel was built with (its embedding specs), and the row
bytes are the width of the stored rows: weights plus, for INT8/INT4/INT2, the fp16 scale and bias of the
row, plus any row-alignment padding (none at CPU row alignment 1).

A module that holds its tables in another form (an exported graph's gather weights) reports them itself:
`stored_tables()`, table name -> the same fields.

`embedding_bytes` sums rows x row bytes over every table: the table payload. The TBE allocation also
rounds each table up to a 128-byte boundary; that padding (< 128 bytes per table) is not counted.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import nn
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.quant.embedding_modules import (
    EmbeddingBagCollection as QuantEmbeddingBagCollection,
)
from torchrec.quant.embedding_modules import (
    EmbeddingCollection as QuantEmbeddingCollection,
)
from torchrec.tensor_types import UIntXTensor

from bench.backends.modules import configs_of, holders_of
from bench.backends.rowwise import RowwiseEmbeddingBag

FLOAT_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _bytes_per_row(t: torch.Tensor) -> int:
    if isinstance(t, UIntXTensor):  # packed INT4/INT2: its shape counts elements, not bytes
        t = t.view(torch.uint8)
    return int(t.shape[1]) * t.element_size()


def _eager_tables(collection: nn.Module) -> Iterator[tuple[str, dict]]:
    for cfg in configs_of(collection):
        bag = holders_of(collection)[cfg.name]
        if isinstance(bag, RowwiseEmbeddingBag):  # swapped in place by ao_embeddingbag: its packed rows
            yield cfg.name, bag.storage()
            continue
        w = bag.weight
        dtype = FLOAT_DTYPES.get(w.dtype, str(w.dtype).removeprefix("torch."))
        yield cfg.name, {"dtype": dtype, "rows": int(w.shape[0]), "row_bytes": _bytes_per_row(w)}


def _kernel_dtypes(collection: nn.Module) -> dict[str, str]:
    """Table -> weight type, as the FBGEMM TBE kernels were built (their embedding specs)."""
    # spec: (name, rows, dim, SparseType, location); `_emb_modules` holds the kernels whether or not
    # they are also registered as `tbes`
    return {spec[0]: spec[3].value for kernel in collection._emb_modules for spec in kernel.embedding_specs}


def _quantized_tables(collection: nn.Module) -> Iterator[tuple[str, dict]]:
    dtypes = _kernel_dtypes(collection)
    for cfg in configs_of(collection):
        holder = holders_of(collection)[cfg.name]
        w = holder.weight  # full stored rows, or weights only when scale/bias are split out
        row_bytes = _bytes_per_row(w)
        for extra in ("weight_qscale", "weight_qbias"):  # split out (None for fp32/fp16 tables)
            if getattr(holder, extra, None) is not None:
                row_bytes += _bytes_per_row(getattr(holder, extra))
        yield cfg.name, {"dtype": dtypes[cfg.name], "rows": int(w.shape[0]), "row_bytes": row_bytes}


def _collections(module: nn.Module) -> Iterator[tuple[str, str, Iterator[tuple[str, dict]]]]:
    """(module path, lookup, its tables) of every module in `module` that holds tables."""
    for path, m in module.named_modules():
        lookup = "sequence" if isinstance(m, (EmbeddingCollection, QuantEmbeddingCollection)) else "pooled"
        if callable(getattr(m, "stored_tables", None)):  # a module that keeps its tables its own way (an exported graph)
            yield path, lookup, iter(m.stored_tables().items())
        elif isinstance(m, (QuantEmbeddingBagCollection, QuantEmbeddingCollection)):
            yield path, lookup, _quantized_tables(m)
        elif isinstance(m, (EmbeddingBagCollection, EmbeddingCollection)):
            yield path, lookup, _eager_tables(m)


def _qualified(module: nn.Module) -> Iterator[tuple[str, str, dict]]:
    seen: set[str] = set()
    for path, lookup, tables in _collections(module):
        for name, info in tables:
            key = f"{path}.{name}" if name in seen else name
            seen.add(key)
            yield key, lookup, info


def table_storage(module: nn.Module) -> dict[str, dict]:
    """Table name -> {"dtype", "rows", "row_bytes"} for every embedding table in `module`.

    dtype is one of fp32, fp16, int8, int4, int2 (also fp8, bf16 where used). A table name used by two
    collections is qualified with the collection's module path.
    """
    return {name: info for name, _, info in _qualified(module)}


def table_precisions(module: nn.Module) -> dict[str, dict[str, str]]:
    """Table name -> {"dtype": its stored weight type, "lookup": pooled | sequence}: what a record names per table
    (`sequence`: an EmbeddingCollection's table, one row per id, unpooled)."""
    return {name: {"dtype": info["dtype"], "lookup": lookup} for name, lookup, info in _qualified(module)}


def embedding_bytes(module: nn.Module) -> int:
    """Bytes of every embedding table in `module` (rows x stored row bytes, summed); for a toolkit runtime's
    module, the tables as the runtime holds them (`runtime_table_bytes()`, bench.backends.toolkit)."""
    runtime = getattr(module, "runtime_table_bytes", None)
    if callable(runtime):
        return runtime()
    return sum(t["rows"] * t["row_bytes"] for t in table_storage(module).values())
