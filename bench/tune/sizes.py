"""Embedding bytes of a per-table precision map, at FBGEMM's stored row bytes (no model is built).

They live in bench.results.tune, below the report that renders a tune and the tune that measures one."""

from bench.results.tune import PRECISIONS, Table, map_bytes, tables_of, uniform

__all__ = ["PRECISIONS", "Table", "map_bytes", "tables_of", "uniform"]
