"""Shard a backend's prepared model on torchrec's engine, by the route the backend's tables take.

- `process_group`: eager fp32 tables (`fp32`, `fake_quant`) go through `DistributedModelParallel`,
  one process per rank, tables moved by collectives (gloo on CPU, NCCL on CUDA). Each rank holds
  only its own shards and feeds its own slice of the batch. torchrec picks its fused TBE kernel for
  model-parallel tables; on CPU that kernel is registered behind autograd only, so the sharded
  model runs with autograd off outside inference mode (`AutogradOff`).
- `one_process`: quantized TBE tables (`int8_tbe`, `uint4`, `int2_tbe`, `fp16_tbe`, `fp32_tbe`)
  go through torchrec's quantized inference sharding (`shard_quant_model`): one process holds
  every rank's shards and moves features and pooled embeddings between them without collectives,
  the way torchrec serves a quantized model over the devices of one host. It has no
  multi-process path.

Both plan with torchrec's `EmbeddingShardingPlanner` and shard with torchrec's sharders
(`bench.distributed.plan`). Sharding leaves the tables random (DMP re-initializes them, the
quantized sharder allocates fresh ones), so the unsharded weights are loaded afterwards.

What the engine cannot do is a `skipped` reason (`unsupported_reason`, `sequence_refusal`): a sequence model's
EmbeddingCollection is not sharded (the sharders here are the EmbeddingBagCollections'; torchrec's sharded
EmbeddingCollection on CPU has open upstream issues, torchrec #1255), so a model holding one is refused
rather than measured with that collection whole on every rank; torchrec 1.8 shards
quantized fp16/fp32 rows table-wise only (row- and column-wise need the split scale/bias state
dict, which float rows do not have), and a quantized model cannot be sharded over torchrun's
processes.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator, Mapping

import torch
import torch.distributed as dist
from torch import nn
from torchrec.distributed.global_settings import set_propogate_device
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner import EmbeddingShardingPlanner
from torchrec.distributed.planner.storage_reservations import (
    FixedPercentageStorageReservation,
)
from torchrec.distributed.planner.types import (
    KernelConfig,
    TopologyFactory,
    TrainerConfig,
)
from torchrec.distributed.types import ShardingEnv, ShardingPlan, ShardingType
from torchrec.inference.modules import shard_quant_model
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.quant.embedding_modules import (
    MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS,
)
from torchrec.quant.embedding_modules import (
    EmbeddingCollection as QuantEmbeddingCollection,
)

from bench.backends.backend import Backend
from bench.config import Config
from bench.distributed import plan as planning
from bench.distributed.ranks import RankEnv

PROCESS_GROUP = "process_group"
ONE_PROCESS = "one_process"
FLOAT_ROWS = ("fp32", "fp16", "bf16")
QUANT_TYPES = [ShardingType.TABLE_WISE.value, ShardingType.ROW_WISE.value, ShardingType.COLUMN_WISE.value]


def _quiet_planner() -> None:
    """The planner logs hundreds of INFO lines per plan (partitioner steps, stats tables); the record
    keeps the plan, so only its warnings are shown."""
    logging.getLogger("torchrec.distributed").setLevel(logging.WARNING)


def route(backend: Backend, tables: Mapping[str, int]) -> str:
    """`one_process` for backends that store quantized TBE tables, `process_group` for eager tables.
    `tables`: table name -> rows."""
    return PROCESS_GROUP if backend.stored_table_dtypes(tables) is None else ONE_PROCESS


def float_tables(backend: Backend, tables: Mapping[str, int]) -> list[str]:
    dtypes = backend.stored_table_dtypes(tables) or {}
    return sorted(t for t, d in dtypes.items() if d in FLOAT_ROWS)


def unsupported_reason(cfg: Config, backend: Backend, device: torch.device, tables: Mapping[str, int], env: RankEnv | None) -> str | None:
    """Why the engine cannot shard this backend this way here (a `skipped` reason), or None."""
    name, ws = cfg.sharding.name, cfg.world_size
    way = route(backend, tables)
    if way == ONE_PROCESS:
        floats = float_tables(backend, tables)
        if floats and name in ("row_wise", "column_wise"):
            return (
                f"torchrec 1.8 shards quantized tables with float rows table-wise only ({backend.cfg.name} stores "
                f"{_names(floats)} as {backend.stored_table_dtypes(tables)[floats[0]]}): row- and column-wise need the "
                "split scale/bias state dict, which float rows lack; use sharding=table_wise or auto"
            )
        if env is not None and ws > 1:
            return (
                f"torchrec shards quantized tables for inference inside one process (shard_quant_model), not over "
                f"torchrun's processes: run {backend.cfg.name} sharded without torchrun (python -m bench "
                f"backend={backend.cfg.name} sharding={name} world_size={ws})"
            )
    if device.type == "cuda" and (way == ONE_PROCESS or env is None) and torch.cuda.device_count() < ws:
        return f"world_size={ws} needs {ws} GPUs here, this machine has {torch.cuda.device_count()}"
    return None


def sequence_refusal(model: nn.Module, cfg: Config) -> str | None:
    """Why a model holding EmbeddingCollections (a sequence model's unpooled tables) is not sharded, or None."""
    found = [name or "the model" for name, m in model.named_modules() if isinstance(m, (EmbeddingCollection, QuantEmbeddingCollection))]
    if not found:
        return None
    return (f"sharding={cfg.sharding.name} shards EmbeddingBagCollections only, and {found[0]} is an EmbeddingCollection (sequence "
            "tables) that would stay whole on every rank; torchrec's sharded EmbeddingCollection on CPU has open upstream issues "
            "(torchrec #1255): run this model with sharding=none")


def _names(tables: list[str]) -> str:
    return ", ".join(tables) if len(tables) <= 3 else f"{', '.join(tables[:3])} and {len(tables) - 3} more"


def table_dims(module: nn.Module) -> dict[str, int]:
    """Table -> embedding dim over every EmbeddingBagCollection, eager or quantized."""
    return {c.name: c.embedding_dim for _, m in module.named_modules() if hasattr(m, "embedding_bag_configs") for c in m.embedding_bag_configs()}


@contextmanager
def split_scale_bias(model: nn.Module, enabled: bool) -> Iterator[None]:
    """While a backend quantizes `model`, ask for the split scale/bias state dict (torchrec's flag on the
    float EBCs, read when they are converted); the shared model is left as it was."""
    ebcs = [m for _, m in model.named_modules() if type(m) is EmbeddingBagCollection] if enabled else []
    for m in ebcs:
        setattr(m, MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS, True)
    try:
        yield
    finally:
        for m in ebcs:
            delattr(m, MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS)


class AutogradOff(nn.Module):
    """The DMP-sharded model, run with autograd off but outside inference mode (see the module docstring)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args):
        with torch.inference_mode(False), torch.no_grad():
            return self.module(*args)


def shard_one_process(prepared: nn.Module, cfg: Config, device: torch.device, split: bool) -> tuple[nn.Module, ShardingPlan]:
    """Quantized tables: torchrec's inference sharding over `world_size` ranks inside this process."""
    _quiet_planner()
    dims = table_dims(prepared)
    allowed = QUANT_TYPES if split else [ShardingType.TABLE_WISE.value]
    constraints = planning.constraints(dims, cfg.sharding.name, cfg.world_size, cfg.sharding.column_shard_dim, allowed, [planning.QUANT_KERNEL])
    state = {k: v for k, v in prepared.state_dict().items() if ".tbes." not in k}
    # torchrec's process-wide switch: the sharded lookups and input dists (built lazily, at the first
    # forward) take the device they are given instead of assuming CUDA. Left on: it only changes
    # modules that would otherwise guess their device.
    set_propogate_device(True)
    sharded, plan = shard_quant_model(
        prepared, world_size=cfg.world_size, compute_device=device.type, sharding_device=device.type,
        sharders=[planning.quant_sharder(split)], constraints=constraints,
    )  # fmt: skip
    for path in plan.plan:  # the sharded tables start random: load the unsharded ones
        part = {k[len(path) + 1:]: v for k, v in state.items() if k.startswith(path + ".")}
        _load(sharded.get_submodule(path), part, path)
    return sharded.eval(), plan


def shard_process_group(prepared: nn.Module, cfg: Config, device: torch.device, pg: dist.ProcessGroup) -> tuple[nn.Module, ShardingPlan]:
    """Eager tables: DistributedModelParallel over the process group; this rank keeps its own shards."""
    _quiet_planner()
    ws = dist.get_world_size(pg)
    sharders = [planning.eager_sharder()]
    constraints = planning.constraints(table_dims(prepared), cfg.sharding.name, ws, cfg.sharding.column_shard_dim, None, None)
    topology = TopologyFactory.create_topology(
        TrainerConfig(world_size=ws, local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", ws))),
        kernel_config=KernelConfig(compute_device=device.type),
    )
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints, storage_reservation=FixedPercentageStorageReservation(0.0))
    plan = planner.collective_plan(prepared, sharders, pg)  # planned on rank 0, broadcast
    state = prepared.state_dict()
    dmp = DistributedModelParallel(prepared, env=ShardingEnv.from_process_group(pg), device=device, plan=plan, sharders=sharders, init_data_parallel=False)
    _load(dmp, state, "the model")  # DMP re-initialized the tables
    return AutogradOff(dmp).eval(), plan


def _load(module: nn.Module, state: dict, what: str) -> None:
    result = module.load_state_dict(state, strict=False)
    # the sharded modules' own bookkeeping buffers (`tbes.*`) are not in the unsharded state dict
    missing = [k for k in result.missing_keys if not k.startswith("tbes.") and ".tbes." not in k]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"loading the unsharded weights into {what} after sharding: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}")
