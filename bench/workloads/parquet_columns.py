"""Columns of the `parquet` workload: the schema mapping checked against the files, and one Arrow
record batch decoded into labels, dense features and per-feature ids, with bad rows found by kind.

Column kinds
    label   integer, floating-point or boolean; each value 0 or 1
    dense   integer or floating-point; read as float32
    sparse  a scalar id (one-hot) or a list of ids (multi-hot), integer or string; strings are hashed
            with pandas' stable hash (`pandas.util.hash_array`: SipHash with a fixed key), the same on
            every machine and run
    oracle  optional, numeric: the true score of generated data (the oracle AUC)

Left to inference (`workload.dense`/`workload.sparse` null), every column not taken by the label or the
oracle becomes a feature, so a column whose name suggests a value derived from the label (`LEAK_WORDS`:
label, target, click, score, logit, prob, oracle, ...) is refused: used as a feature it would be the
answer. Declared columns are taken as declared.

Ids become table rows per column, as declared: `modulo` (an integer id i is row i mod rows; ids must not
be negative) or `hash` (the id's stable 64-bit hash mod rows; strings always go this way).

A row with a missing or malformed value is dropped and counted under the first of `BAD_KINDS` it
shows, as the Criteo readers count malformed lines by reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from bench.errors import UserError

MODULO, HASH = "modulo", "hash"
ID_REDUCTIONS = (MODULO, HASH)
# Words of a column name that suggest a value derived from the label (an inferred feature of that name is refused).
LEAK_WORDS = ("label", "target", "click", "clicked", "clicks", "score", "logit", "prob", "proba", "probability", "oracle",
              "ctr", "pred", "prediction", "predicted", "outcome", "conversion", "converted", "truth")
BAD_KINDS = ("missing label", "label not 0 or 1", "missing dense value", "non-finite dense value", "missing id", "negative id")


@dataclass(frozen=True)
class SparseColumn:
    name: str
    multi_hot: bool  # a list of ids per row
    strings: bool  # string ids (always hashed)
    reduction: str  # modulo | hash


@dataclass(frozen=True)
class Columns:
    """The resolved schema mapping: which column plays which part."""

    label: str
    dense: tuple[str, ...]
    sparse: tuple[SparseColumn, ...]
    oracle: str | None

    def names(self) -> list[str]:
        return [self.label, *self.dense, *(s.name for s in self.sparse), *([self.oracle] if self.oracle else [])]

    def line(self, inferred: tuple[str, ...] = ()) -> str:
        """Which column became which, on one line; `inferred` names the parts left to inference."""
        def part(name: str, columns: list[str]) -> str:
            return f"{name}{' (inferred)' if name in inferred else ''} [{', '.join(columns)}]"

        parts = [f"label {self.label}", part("dense", list(self.dense)), part("sparse", [s.name for s in self.sparse])]
        if self.oracle:
            parts.append(f"oracle {self.oracle}")
        return "; ".join(parts)

    def describe(self) -> dict:
        return {
            "label": self.label,
            "dense": list(self.dense),
            "sparse": {s.name: {"multi_hot": s.multi_hot, "ids": "string" if s.strings else "integer", "reduction": s.reduction}
                       for s in self.sparse},
            **({"oracle": self.oracle} if self.oracle else {}),
        }


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _string(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _string(t.value_type)
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _id_type(t: pa.DataType) -> tuple[bool, bool] | None:
    """(multi_hot, strings) of an id column type, or None when it cannot hold ids."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _id_type(t.value_type)
        return None if inner is None or inner[0] else (True, inner[1])
    if pa.types.is_integer(t):
        return False, False
    if _string(t):
        return False, True
    return None


def leak_words(column: str) -> list[str]:
    """The words of `column`'s name (split at non-letters, digits and camelCase) that suggest a label-derived value."""
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", column)
    return [w.lower() for w in words if w.lower() in LEAK_WORDS]


def _refuse_leaks(inferred: list[str], key: str, taken: list[str], where: str) -> None:
    """An inferred feature whose name suggests the answer is refused: one line naming the keys that decide it."""
    for column in inferred:
        words = leak_words(column)
        if words:
            rest = [c for c in taken if c != column]
            raise UserError(
                f"{where}: column {column!r} would become a {key.split('.')[-1]} feature by inference, but its name "
                f"({', '.join(repr(w) for w in words)}) suggests a value derived from the label: take it anyway with "
                f"{key}=[{','.join(taken)}], use it as the oracle with workload.oracle={column}, "
                f"or leave it out with {key}=[{','.join(rest)}]"
            )


def resolve_columns(cfg, schema: pa.Schema, where: str) -> Columns:
    """The config's mapping checked against one file's schema; undeclared dense/sparse columns inferred.
    `where` names the file in messages."""
    types = {f.name: f.type for f in schema}

    def need(column: str, key: str) -> pa.DataType:
        if column not in types:
            raise UserError(f"{where} has no column {column!r} ({key}); its columns: {', '.join(list(types)[:20])}")
        return types[column]

    label_type = need(cfg.label, "workload.label")
    if not _numeric(label_type):
        raise UserError(f"{where}: label column {cfg.label!r} is {label_type}; the label must be numbers 0/1 (integer, float or bool)")
    oracle = cfg.oracle
    if oracle is not None and not _numeric(need(oracle, "workload.oracle")):
        raise UserError(f"{where}: oracle column {oracle!r} is {types[oracle]}, not numeric")
    taken = {cfg.label, *([oracle] if oracle else [])}
    if cfg.dense is None:
        dense = [n for n, t in types.items() if n not in taken and pa.types.is_floating(t)]
        _refuse_leaks(dense, "workload.dense", dense, where)
    else:
        dense = list(cfg.dense)
    for column in dense:
        t = need(column, "workload.dense")
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise UserError(f"{where}: dense column {column!r} is {t}; dense features must be integer or floating-point numbers")
    taken |= set(dense)
    if cfg.sparse is None:
        sparse_names = [n for n, t in types.items() if n not in taken and _id_type(t) is not None]
        _refuse_leaks(sparse_names, "workload.sparse", sparse_names, where)
    else:
        sparse_names = list(cfg.sparse)
    if not sparse_names:
        raise UserError(f"{where}: no sparse (id) columns; name them with workload.sparse=[col,...] (integer or string ids, or lists of them)")
    unknown = sorted(set(cfg.ids_per_column) - set(sparse_names))
    if unknown:
        raise UserError(f"workload.ids_per_column names {unknown}, which are not sparse columns ({sparse_names})")
    unknown = sorted(set(cfg.table_rows) - set(sparse_names))
    if unknown:
        raise UserError(f"workload.table_rows names {unknown}, which are not sparse columns ({sparse_names})")
    sparse = []
    for column in sparse_names:
        t = need(column, "workload.sparse")
        kind = _id_type(t)
        if kind is None:
            raise UserError(f"{where}: sparse column {column!r} is {t}; ids must be integers or strings, or lists of them")
        reduction = cfg.ids_per_column.get(column, cfg.ids)
        if reduction not in ID_REDUCTIONS:
            raise UserError(f"workload.ids={reduction!r} for column {column!r}: choose modulo or hash")
        sparse.append(SparseColumn(column, kind[0], kind[1], HASH if kind[1] else reduction))
    return Columns(cfg.label, tuple(dense), tuple(sparse), oracle)


# ------------------------------------------------------------------------------------- decoding


def _numbers(array: pa.Array) -> np.ndarray:
    """float64 values, nulls as 0 (their rows are dropped by `problems`)."""
    return pc.fill_null(array.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)


def _ids_and_parents(array: pa.Array, column: SparseColumn) -> tuple[pa.Array, np.ndarray]:
    """Every id of the batch (flattened) and the row each belongs to."""
    if column.multi_hot:
        return array.flatten(), pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
    return array, np.arange(len(array))


def problems(batch: pa.RecordBatch, columns: Columns) -> np.ndarray:
    """Per row: 0 when whole, else 1 + the index in BAD_KINDS of the first problem found."""
    n = batch.num_rows
    out = np.zeros(n, dtype=np.int8)

    def mark(kind: str, rows: np.ndarray) -> None:
        out[(out == 0) & rows] = BAD_KINDS.index(kind) + 1

    label = batch.column(columns.label)
    mark("missing label", label.is_null().to_numpy(zero_copy_only=False))
    values = _numbers(label)
    mark("label not 0 or 1", (values != 0) & (values != 1))
    for name in columns.dense:
        array = batch.column(name)
        mark("missing dense value", array.is_null().to_numpy(zero_copy_only=False))
        mark("non-finite dense value", ~np.isfinite(_numbers(array)))
    for column in columns.sparse:
        array = batch.column(column.name)
        mark("missing id", array.is_null().to_numpy(zero_copy_only=False))
        ids, parents = _ids_and_parents(array, column)
        if column.multi_hot:
            mark("missing id", np.bincount(parents[ids.is_null().to_numpy(zero_copy_only=False)], minlength=n) > 0)
        if column.reduction == MODULO and not column.strings:
            negative = pc.fill_null(pc.less(ids, 0), False).to_numpy(zero_copy_only=False)
            mark("negative id", np.bincount(parents[negative], minlength=n) > 0)
    return out


def hashed(ids: pa.Array) -> np.ndarray:
    """Stable uint64 hashes of integer or string ids (pandas' hash_array); each distinct string hashed once."""
    if _string(ids.type):
        encoded = ids if pa.types.is_dictionary(ids.type) else pc.dictionary_encode(ids)
        words = pd.util.hash_array(np.asarray(encoded.dictionary.to_pylist(), dtype=object))
        return words[encoded.indices.to_numpy(zero_copy_only=False)]
    return pd.util.hash_array(ids.to_numpy(zero_copy_only=False).astype(np.int64))


@dataclass
class Decoded:
    """Rows of a batch, all whole: labels [n], dense [n, d], and per sparse column lengths [n] and raw
    ids (int64 for modulo columns, uint64 hashes for hashed ones)."""

    labels: np.ndarray
    dense: np.ndarray
    lengths: list[np.ndarray]
    ids: list[np.ndarray]
    oracle: np.ndarray | None

    def __len__(self) -> int:
        return len(self.labels)


def decode(batch: pa.RecordBatch, columns: Columns) -> Decoded:
    """The values of a batch whose rows are all whole (filtered by `problems` first)."""
    n = batch.num_rows
    labels = _numbers(batch.column(columns.label)).astype(np.float32)
    dense = np.empty((n, len(columns.dense)), dtype=np.float32)
    for j, name in enumerate(columns.dense):
        dense[:, j] = _numbers(batch.column(name))
    lengths, ids = [], []
    for column in columns.sparse:
        array = batch.column(column.name)
        flat, _ = _ids_and_parents(array, column)
        lengths.append(pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int32) if column.multi_hot
                       else np.ones(n, dtype=np.int32))
        ids.append(hashed(flat) if column.reduction == HASH else flat.to_numpy(zero_copy_only=False).astype(np.int64))
    oracle = _numbers(batch.column(columns.oracle)) if columns.oracle else None
    return Decoded(labels, dense, lengths, ids, oracle)


def reduce_ids(ids: np.ndarray, rows: int) -> np.ndarray:
    """Table rows of raw ids: i mod rows (int64 ids) or hash mod rows (uint64 hashes)."""
    return (ids % np.array(rows, dtype=ids.dtype)).astype(np.int64)
