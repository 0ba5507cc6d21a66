"""torchrec's planner and sharders for the harness's two routes, and the plan they produce as a record.

- Constraints: `sharding=table_wise|row_wise|column_wise` holds every table to that type
  (`ParameterConstraints.sharding_types`); `auto` leaves the choice to the planner among what the
  engine offers for the backend. Column-wise shards have `sharding.column_shard_dim` columns
  (torchrec's `min_partition`; by default the dim split evenly over the ranks).
- Sharders: torchrec's `EmbeddingBagCollectionSharder` for eager tables, with row-wise offered on
  CPU too (torchrec offers it for CUDA only; it runs correctly on gloo), and the quantized
  `QuantEmbeddingBagCollectionSharder` with the split scale/bias state dict for integer tables.
- The record: module -> table -> sharding type, compute kernel, ranks, and each shard's rank,
  offsets, sizes and bytes; bytes per rank sum the shards. A shard's bytes are its rows times
  FBGEMM's row bytes for its columns in the table's stored type (a whole-table shard: the table's
  stored bytes), so a column-wise shard of an INT8 table pays its own scale and bias per row.
"""

from __future__ import annotations

from typing import Any, Sequence

from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.fused_params import (
    FUSED_PARAM_QUANT_STATE_DICT_SPLIT_SCALE_BIAS,
)
from torchrec.distributed.planner.types import ParameterConstraints
from torchrec.distributed.quant_embeddingbag import QuantEmbeddingBagCollectionSharder
from torchrec.distributed.types import ShardingPlan, ShardingType

from bench.measure.memory import row_bytes

# sharding config name -> torchrec's ShardingType value
SHARDING_TYPES = {
    "table_wise": ShardingType.TABLE_WISE.value,
    "row_wise": ShardingType.ROW_WISE.value,
    "column_wise": ShardingType.COLUMN_WISE.value,
}
QUANT_KERNEL = "quant"
# Sharding types whose shards are whole tables.
WHOLE_TABLE_TYPES = (ShardingType.TABLE_WISE.value, ShardingType.DATA_PARALLEL.value)


class EmbeddingBagCollectionSharderCpuRowWise(EmbeddingBagCollectionSharder):
    """torchrec's EBC sharder, offering row-wise on every device (the stock one: CUDA only)."""

    def sharding_types(self, compute_device_type: str) -> list[str]:
        types = super().sharding_types(compute_device_type)
        return types if ShardingType.ROW_WISE.value in types else [*types, ShardingType.ROW_WISE.value]


def eager_sharder() -> EmbeddingBagCollectionSharder:
    return EmbeddingBagCollectionSharderCpuRowWise()


def quant_sharder(split_scale_bias: bool) -> QuantEmbeddingBagCollectionSharder:
    # Split scale/bias: the planner then sees a table's real dim, not dim + 4 bytes of scale and bias.
    return QuantEmbeddingBagCollectionSharder(fused_params={FUSED_PARAM_QUANT_STATE_DICT_SPLIT_SCALE_BIAS: split_scale_bias})


def constraints(
    dims: dict[str, int], name: str, world_size: int, column_shard_dim: int | None, allowed: Sequence[str] | None, kernels: Sequence[str] | None
) -> dict[str, ParameterConstraints]:
    """Per-table constraints: the asked sharding type, or (`auto`) any of `allowed` (None: the sharder's own list)."""
    types = [SHARDING_TYPES[name]] if name in SHARDING_TYPES else (list(allowed) if allowed else None)
    return {
        table: ParameterConstraints(
            sharding_types=types,
            compute_kernels=list(kernels) if kernels else None,
            min_partition=column_shard_dim or max(1, dim // world_size),
        )
        for table, dim in dims.items()
    }


def plan_record(plan: ShardingPlan, storage: dict[str, dict], alignment: int) -> dict[str, dict[str, Any]]:
    """The plan as plain data: module path -> table -> {sharding_type, compute_kernel, ranks, dtype, shards}.

    `storage`: table -> {"dtype", "rows", "row_bytes"} of the unsharded prepared module.
    """
    out: dict[str, dict[str, Any]] = {}
    for module_path, module_plan in plan.plan.items():
        tables = {}
        for table, ps in module_plan.items():
            info = storage[table]
            if ps.sharding_spec is None:  # data parallel: every listed rank holds the whole table
                placed = [(r, [0, 0], [info["rows"], None]) for r in ps.ranks or []]
            else:
                placed = [(m.placement.rank(), m.shard_offsets, m.shard_sizes) for m in ps.sharding_spec.shards]
            whole = ps.sharding_type in WHOLE_TABLE_TYPES
            shards = [_shard(rank, offsets, sizes, info, alignment, whole) for rank, offsets, sizes in placed]
            tables[table] = {
                "sharding_type": ps.sharding_type,
                "compute_kernel": ps.compute_kernel,
                "ranks": sorted({s["rank"] for s in shards}),
                "dtype": info["dtype"],
                "shards": shards,
            }
        out[module_path] = tables
    return out


def _shard(rank: int, offsets: list[int], sizes: list[int | None], info: dict, alignment: int, whole: bool) -> dict[str, Any]:
    rows, cols = int(sizes[0]), sizes[1]
    # A whole table counts as stored. (The planner reads a quantized fp16/fp32 table, which has no split
    # scale/bias, by its byte width: its sizes are bytes, not columns; such tables shard table-wise only.)
    nbytes = rows * info["row_bytes"] if whole else rows * row_bytes(info["dtype"], int(cols), alignment)
    return {"rank": int(rank), "offsets": [int(o) for o in offsets], "sizes": [rows, None if cols is None else int(cols)], "bytes": int(nbytes)}


def bytes_per_rank(plan: dict[str, dict[str, Any]], world_size: int) -> list[int]:
    out = [0] * world_size
    for tables in plan.values():
        for table in tables.values():
            for shard in table["shards"]:
                out[shard["rank"]] += shard["bytes"]
    return out


def tables_per_rank(plan: dict[str, dict[str, Any]], world_size: int) -> list[int]:
    """How many tables (whole or in part) each rank holds."""
    out = [0] * world_size
    for tables in plan.values():
        for table in tables.values():
            for r in table["ranks"]:
                out[r] += 1
    return out
