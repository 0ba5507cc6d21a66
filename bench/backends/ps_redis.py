"""`ps_redis`: embedding tables served from a parameter server (a real Redis) through a local hot-row cache.

The other way, besides quantization, to serve tables that do not fit in memory (TorchRec's
dynamic-embedding extension does it with Redis; it is not installable here, so this is the same idea
built on the harness's own pieces, `bench.backends.paramserver`). Rows live in Redis in the precision chosen
(`backend.precision`: fp32, or FBGEMM's int8/int4 row bytes, so PS and quantization combine); a local
cache of `backend.cache_fraction` of each table's rows (or `backend.cache_rows` rows; LRU or LFU) serves
lookups; a batch's misses are pulled in one pipelined round trip. The pooled lookup then runs the
in-memory backend's own kernel on the cached rows, so the scores equal that backend's exactly:
fp32 rows -> `fp32`, int8 rows -> `int8_tbe`, int4 rows -> `uint4` (the "in-memory twin"; the MLP
follows the twin's setting unless `backend.mlp` says otherwise).

Server: by default a private `redis-server` per job, on a free loopback port, stopped by `close()`
whatever the job's outcome; `backend.url=redis://host:port/db?prefix=NAME` uses a running server
instead (never started, stopped or cleaned: rows written there stay for the next job, and a prefix
holding anything else is refused).

The timed calls start from a cold cache (`before_timing`): the record gives the cache hit rate of the
warm-up calls and of the steady state (the trials), pull rates, the split of batch latency between PS
pulls, cache bookkeeping and compute, and the server's memory (`job_metrics`). The timed stream cycles
over `timing.batches_per_trial` batches: the steady-state hit rate is that of this cycle, so raise it for
a longer stream.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from omegaconf import OmegaConf
from torch import nn

from bench import registry
from bench.backends.backend import Backend
from bench.backends.linear import MLP_CHOICES, MODES, OUTPUT_CHOICES, WIDE_RATIO, check_choice, check_wide, quantize_int8, wide_record
from bench.backends.modules import require_embedding_bag_collections
from bench.batch import Batch
from bench.config import BackendConfig
from bench.errors import UserError
from bench.backends.paramserver.cache import POLICIES
from bench.backends.paramserver.module import (
    CacheSpec,
    PsEmbeddingBagCollection,
    PsModel,
    close_all,
)
from bench.backends.paramserver.rows import PRECISIONS
from bench.backends.paramserver.redis_tables import Location
from bench.registry import register

# Row precision -> the in-memory backend whose kernel and row bytes the PS path reuses.
TWINS = {"fp32": "fp32", "int8": "int8_tbe", "int4": "uint4"}


@dataclass
class PsRedisConfig(BackendConfig):
    name: str = "ps_redis"
    precision: str = "fp32"  # fp32 | int8 | int4: the rows as Redis stores them
    cache_fraction: float = 0.1  # local cache per table, as a fraction of its rows (0 < f <= 1)
    cache_rows: Optional[int] = None  # or a row count per table (wins over cache_fraction)
    cache_policy: str = "lru"  # lru | lfu
    url: Optional[str] = None  # redis://host:port/db?prefix=NAME: a running server; null: a private one per job
    timeout_s: float = 10.0  # client socket timeout: a dead or hung server ends the job within it
    mlp: Optional[str] = None  # fp32 | int8; null: the in-memory twin's (fp32 for fp32 rows, else int8)
    mlp_mode: str = "dynamic"  # dynamic | static, for an int8 MLP
    mlp_output: str = "fp32"  # fp32 | int8: the MLP's output layers, as the in-memory twin's (bench.backends.linear)
    mlp_wide: str = "fp32"  # fp32 | smooth | int8: a Linear with a wide input, as the in-memory twin's
    mlp_wide_ratio: float = WIDE_RATIO


@register("backend", "ps_redis", config=PsRedisConfig, in_sweeps=False)  # its own sweep: +sweep=ps
class PsRedisBackend(Backend):
    devices = ("cpu",)
    not_shardable = "its tables live in Redis behind a local cache in one process"
    waits_off_cpu = "each batch waits on a Redis round trip"

    def check(self) -> None:
        cfg = self.cfg
        if cfg.precision not in PRECISIONS:
            raise UserError(f"backend.precision={cfg.precision!r}: choose one of {', '.join(PRECISIONS)}")
        if cfg.cache_policy not in POLICIES:
            raise UserError(f"backend.cache_policy={cfg.cache_policy!r}: choose one of {', '.join(POLICIES)}")
        if cfg.cache_rows is None and not 0 < cfg.cache_fraction <= 1:
            raise UserError(f"backend.cache_fraction must be in (0, 1], got {cfg.cache_fraction} (or set backend.cache_rows=N)")
        if cfg.cache_rows is not None and cfg.cache_rows < 1:
            raise UserError(f"backend.cache_rows must be a positive number of rows, got {cfg.cache_rows}")
        if not cfg.timeout_s > 0:
            raise UserError(f"backend.timeout_s must be positive, got {cfg.timeout_s}")
        if cfg.url is not None:
            Location.parse(cfg.url)
        check_choice(self.mlp, MLP_CHOICES, "backend.mlp")
        check_choice(cfg.mlp_mode, MODES, "backend.mlp_mode")
        check_choice(cfg.mlp_output, OUTPUT_CHOICES, "backend.mlp_output")
        check_wide(cfg)

    @property
    def mlp(self) -> str:
        return self.cfg.mlp or ("fp32" if self.cfg.precision == "fp32" else "int8")

    def twin(self) -> dict:
        """Config of the in-memory backend with the same row bytes and kernel (the same scores when the MLP matches).
        Redis holds FBGEMM's min-max rows (bench.backends.paramserver.rows), so the twin is the one with min-max rows
        (`row_range=minmax`; uint4's default is the greedy range)."""
        name = TWINS[self.cfg.precision]
        return {"name": name} if name == "fp32" else {"name": name, "mlp": self.mlp, "mlp_mode": self.cfg.mlp_mode,
                                                       "mlp_output": self.cfg.mlp_output, "mlp_wide": self.cfg.mlp_wide,
                                                       "mlp_wide_ratio": self.cfg.mlp_wide_ratio, "row_range": "minmax"}

    def record_name(self) -> str:
        cfg = self.cfg
        size = f"{cfg.cache_rows} rows" if cfg.cache_rows is not None else f"{cfg.cache_fraction * 100:g}%"
        policy = "" if cfg.cache_policy == "lru" else f" {cfg.cache_policy}"
        return f"{cfg.name}[{cfg.precision} {size}{policy}]"

    def scores_depend_on_batch(self) -> bool:
        return self.mlp == "int8" and self.cfg.mlp_mode == "dynamic"

    def emulation(self) -> dict | None:
        """The fake_quant twin of the in-memory twin (int rows), so the record carries the same fidelity gap."""
        twin = self.twin()
        if twin["name"] == "fp32":
            return None
        entry = registry.get("backend", twin["name"])
        return entry.factory(OmegaConf.merge(OmegaConf.structured(entry.config), twin)).emulation()

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        self.check()
        reason = self.unsupported_reason(device)
        if reason is not None:
            raise UserError(reason)
        found = require_embedding_bag_collections(model, self.cfg.name)
        names = [c.name for _, ebc in found for c in ebc.embedding_bag_configs()]
        if len(set(names)) != len(names):
            raise UserError(f"backend {self.cfg.name!r} needs table names unique across the model's EmbeddingBagCollections, got {sorted(names)}")
        cache = CacheSpec(fraction=self.cfg.cache_fraction, rows=self.cfg.cache_rows, policy=self.cfg.cache_policy)
        stand_ins = {id(ebc): PsEmbeddingBagCollection(ebc, self.cfg.precision, cache, device) for _, ebc in found}
        served = copy.deepcopy(model, memo=dict(stand_ins)).to(device).eval()  # the tables are not copied
        weights = {c.name: ebc.embedding_bags[c.name].weight for _, ebc in found for c in ebc.embedding_bag_configs()}
        prepared = PsModel(served, list(stand_ins.values()), weights, self.cfg.url, self.cfg.timeout_s)
        prepared.open()  # the server and the rows, before calibration needs them
        if self.mlp == "int8":
            quantize_int8(served, self.cfg.mlp_mode, calibration_batches, device, self.cfg.mlp_output,
                          wide=self.cfg.mlp_wide, wide_ratio=self.cfg.mlp_wide_ratio)
        return prepared

    def before_timing(self, prepared: nn.Module, warmup_calls: int) -> None:
        prepared.start_timing(warmup_calls)

    def job_metrics(self, prepared: nn.Module) -> dict:
        return {
            **prepared.metrics(),
            **wide_record(prepared.model),
            "ps_precision": self.cfg.precision,
            "ps_cache_policy": self.cfg.cache_policy,
            "ps_twin": self.twin()["name"],
        }

    def close(self) -> None:
        close_all()
