"""Embedding bytes of a per-table precision map, at FBGEMM's stored row bytes (no model is built)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from bench.backends.tbe import BITS
from bench.measure.memory import row_bytes

# Widest first.
PRECISIONS = ("fp32", "fp16", "int8", "int4", "int2")


@dataclass(frozen=True)
class Table:
    name: str
    rows: int
    dim: int

    def packs(self, precision: str) -> bool:
        """Whether rows of this dim pack into whole bytes at `precision` (int2 needs dim % 4 == 0)."""
        return (self.dim * BITS[precision]) % 8 == 0

    def bytes(self, precision: str, alignment: int = 1) -> int:
        return self.rows * row_bytes(precision, self.dim, alignment)


def tables_of(specs: Iterable, dim: int) -> list[Table]:
    """Tables of a workload's TableSpecs at the model's embedding dim."""
    return [Table(s.name, int(s.num_embeddings), int(dim)) for s in specs]


def map_bytes(tables: Iterable[Table], per_table: Mapping[str, str], alignment: int = 1) -> int:
    """Bytes of every table at its precision in `per_table` (fp32 where absent)."""
    return sum(t.bytes(per_table.get(t.name, "fp32"), alignment) for t in tables)


def uniform(tables: Iterable[Table], precision: str) -> dict[str, str]:
    return {t.name: precision for t in tables}
