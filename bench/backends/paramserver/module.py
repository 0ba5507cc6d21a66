"""The parameter-server stand-in for an EmbeddingBagCollection, and the model that owns the session.

`PsEmbeddingBagCollection.forward`, per batch:
  unique ids per table -> cache lookup (`RowCache`, all tables at once) -> ALL misses of all tables pulled in ONE
  pipelined round trip -> rows written into the local slot tables -> ids remapped to slots ->
  the pooled lookup by the in-memory backend's own module over the slot tables.

The slot tables are the same modules the in-memory backends run, only with fewer rows: an eager
`EmbeddingBagCollection` for fp32 rows (torch's embedding_bag, exactly as `fp32`), torchrec's quantized
EmbeddingBagCollection on FBGEMM's IntNBit TBE for int8/int4 rows (built by the same call as
`int8_tbe`/`uint4`). A pooled sum reads the same row bytes in the same order whichever slot they sit
in, so the scores equal the in-memory backend's bit for bit.

Rows are read-only at inference, so an evicted row is dropped, never written back.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.backends.tbe import quantize_tables
from bench.backends.paramserver.cache import RowCache
from bench.backends.paramserver.server import RedisServer
from bench.backends.paramserver.redis_tables import Location, RowStore, TableRows, weights_digest


@dataclass(frozen=True)
class CacheSpec:
    fraction: float = 0.1
    rows: int | None = None  # a row count per table, instead of the fraction
    policy: str = "lru"

    def capacity(self, table_rows: int) -> int:
        if self.rows is not None:
            return max(1, min(int(self.rows), table_rows))
        return max(1, min(table_rows, math.ceil(self.fraction * table_rows - 1e-9)))


class SlotTables(nn.Module):
    """The local tables: `sizes[t]` rows per table, in the in-memory backend's own module."""

    def __init__(self, configs: list[EmbeddingBagConfig], precision: str, sizes: dict[str, int], device: torch.device) -> None:
        super().__init__()
        self.configs, self.precision, self.device = configs, precision, device
        self.sizes = dict(sizes)
        self.inner, self.views = self._build(self.sizes)

    def _build(self, sizes: dict[str, int]) -> tuple[nn.Module, dict[str, torch.Tensor]]:
        configs = [replace(c, num_embeddings=sizes[c.name]) for c in self.configs]
        ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta")).to_empty(device=self.device)
        for bag in ebc.embedding_bags.values():
            nn.init.zeros_(bag.weight)  # slot rows are written before they are read
        if self.precision == "fp32":
            ebc.eval()
            return ebc, {c.name: ebc.embedding_bags[c.name].weight.data.view(torch.uint8) for c in configs}
        holder = nn.Module()
        holder.ebc = ebc
        quantize_tables(holder, {c.name: self.precision for c in configs}, self.device)
        qebc = holder.ebc
        views = {}
        for kernel in qebc._emb_modules:  # uint8 [rows, row bytes] views into the TBE's weight buffer
            for spec, (weight, _) in zip(kernel.embedding_specs, kernel.split_embedding_weights(split_scale_shifts=False)):
                views[spec[0]] = weight
        return qebc.eval(), views

    def grow(self, sizes: dict[str, int]) -> None:
        """Rebuild with more rows per table, keeping the rows already there."""
        with torch.inference_mode(False):  # called from a forward under inference mode; the build must not be
            inner, views = self._build(sizes)
        for name, old in self.views.items():
            views[name][: old.shape[0]] = old
        self.inner, self.views, self.sizes = inner, views, dict(sizes)

    def write(self, table: str, slots: torch.Tensor, rows: torch.Tensor) -> None:
        self.views[table][slots] = rows

    def forward(self, features: KeyedJaggedTensor):
        return self.inner(features)


@dataclass
class CallStats:
    unique: int = 0
    hits: int = 0
    pulled: int = 0
    pulled_bytes: int = 0
    staged: int = 0
    cache_s: float = 0.0
    pull_s: float = 0.0
    total_s: float = 0.0


class PsEmbeddingBagCollection(nn.Module):
    """Serves an EmbeddingBagCollection's tables from the parameter server through a local cache."""

    def __init__(self, ebc: EmbeddingBagCollection, precision: str, cache: CacheSpec, device: torch.device) -> None:
        super().__init__()
        self._configs = ebc.embedding_bag_configs()
        self.tables = {c.name: TableRows(c.name, c.num_embeddings, c.embedding_dim, precision) for c in self._configs}
        self.names = [c.name for c in self._configs]
        self.feature_table = {f: i for i, c in enumerate(self._configs) for f in c.feature_names}
        capacities = [cache.capacity(c.num_embeddings) for c in self._configs]
        self.cache = RowCache([c.num_embeddings for c in self._configs], capacities, cache.policy)
        self.slots = SlotTables(self._configs, precision, dict(zip(self.names, capacities)), device)
        self._plans: dict[tuple, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.store: RowStore | None = None
        self.sink: list[CallStats] | None = None  # where the owning PsModel collects per-call stats

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        return self._configs

    def reset_cache(self) -> None:
        self.cache.reset()

    def _plan(self, keys: list[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per key of the KJT: the first global row id of its table, and which keys this module serves (None: all)."""
        if tuple(keys) not in self._plans:
            tables = [self.feature_table.get(k, -1) for k in keys]
            base = torch.tensor([int(self.cache.row_base[t]) if t >= 0 else 0 for t in tables], dtype=torch.int64)
            served = None if all(t >= 0 for t in tables) else torch.tensor([t >= 0 for t in tables])
            self._plans[tuple(keys)] = (base, served)
        return self._plans[tuple(keys)]

    def _ensure_room(self, staged: dict[int, int]) -> None:
        """Grow the staging slots of a table whose batch needs more than it has (doubling, at most its rows)."""
        sizes = dict(self.slots.sizes)
        for t, n in staged.items():
            name, capacity = self.names[t], self.cache.capacity[t]
            staging = sizes[name] - capacity
            if n > staging:
                sizes[name] = capacity + min(max(n, 2 * staging), self.tables[name].rows)
        if sizes != self.slots.sizes:
            self.slots.grow(sizes)

    def forward(self, features: KeyedJaggedTensor):
        if self.store is None:
            raise RuntimeError("the parameter-server session is closed")
        stats = CallStats()
        t0 = time.perf_counter()
        values, lengths = features.values(), torch.tensor(features.length_per_key())
        base, served = self._plan(features.keys())
        rows = values.to(torch.int64) + torch.repeat_interleave(base, lengths)  # one id space over all tables
        mask = None if served is None else torch.repeat_interleave(served, lengths)
        unique, inverse = torch.unique(rows if mask is None else rows[mask], return_inverse=True)
        a = self.cache.assign(unique)
        self._ensure_room(a.staged)
        requests = [(self.tables[self.names[t]], ids) for t, (ids, _) in a.misses.items()]
        t1 = time.perf_counter()
        pulled = self.store.pull((table, ids.tolist()) for table, ids in requests) if requests else []
        t2 = time.perf_counter()
        for (t, (_, slots)), got in zip(a.misses.items(), pulled):
            self.slots.write(self.names[t], slots, got)
            stats.pulled_bytes += int(got.numel())
        remapped = a.slots[inverse].to(values.dtype)
        if mask is not None:
            remapped = values.clone().masked_scatter_(mask, remapped)
        remapped_features = KeyedJaggedTensor(
            keys=features.keys(),
            values=remapped,
            weights=features.weights_or_none(),
            lengths=features.lengths(),
            offsets=features.offsets(),
            stride=features.stride(),
            length_per_key=features.length_per_key(),
            offset_per_key=features.offset_per_key(),
        )
        t3 = time.perf_counter()
        stats.unique, stats.pulled = int(unique.numel()), int(a.miss.sum())
        stats.hits, stats.staged = stats.unique - stats.pulled, sum(a.staged.values())
        stats.cache_s, stats.pull_s = (t1 - t0) + (t3 - t2), t2 - t1
        if self.sink is not None:
            self.sink.append(stats)
        return self.slots(remapped_features)


_open_models: "weakref.WeakSet[PsModel]" = weakref.WeakSet()


def close_all() -> None:
    """Close every open parameter-server session of this process (stops the private servers)."""
    for model in list(_open_models):
        model.close()


class PsModel(nn.Module):
    """The prepared model: the copy whose EmbeddingBagCollections are served from Redis, and its session.

    `open()` starts a private redis-server (or connects to `url`) and loads the rows; `close()` stops
    it. A closed model opens again on its next call (a later job reusing the prepared module), and
    `close_all()` at the end of every job closes it again.
    """

    def __init__(self, model: nn.Module, ps_modules: list[PsEmbeddingBagCollection], weights: dict[str, torch.Tensor],
                 url: str | None, timeout_s: float) -> None:  # fmt: skip
        super().__init__()
        self.model = model
        self._ps = ps_modules
        self._weights = weights  # the source fp32 rows (the input model's own tensors, not copies)
        self._digest = weights_digest(weights)
        self.url, self.timeout_s = url, timeout_s
        self.server: RedisServer | None = None
        self.store: RowStore | None = None
        self.load = None
        self.calls: list[CallStats] = []
        self.warmup_calls = 0
        for ps in ps_modules:
            ps.sink = self.calls

    @property
    def tables(self) -> list[TableRows]:
        return [t for ps in self._ps for t in ps.tables.values()]

    def open(self) -> None:
        if self.store is not None:
            return
        _open_models.add(self)
        try:
            if self.url is None:
                self.server = RedisServer.start()
                location = Location(self.server.url)
            else:
                location = Location.parse(self.url)
            store = RowStore(location, self.timeout_s)
            store.ping()
            self.load = store.load(self.tables, self._weights, self._digest)
        except BaseException:
            self.close()
            raise
        self.store = store
        for ps in self._ps:
            ps.store = store
            ps.reset_cache()

    def close(self) -> None:
        for ps in self._ps:
            ps.store = None
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        _open_models.discard(self)

    def start_timing(self, warmup_calls: int) -> None:
        """Open if needed, empty the caches and the call log: every job times from a cold cache."""
        self.open()
        for ps in self._ps:
            ps.reset_cache()
        self.calls.clear()
        self.warmup_calls = warmup_calls

    def forward(self, *args, **kwargs):
        self.open()
        start = time.perf_counter()
        first = len(self.calls)
        out = self.model(*args, **kwargs)
        total = time.perf_counter() - start
        for stats in self.calls[first:]:
            stats.total_s = total / (len(self.calls) - first)  # one PS module per call in the usual model
        return out

    def metrics(self) -> dict:
        return session_metrics(self)


def _rate(numerator: float, seconds: float) -> float | None:
    return numerator / seconds if seconds > 0 else None


def session_metrics(model: PsModel) -> dict:
    """The record's parameter-server metrics: cache hit rates (warm-up vs steady state), pull rates, the
    split of batch latency between PS pulls, cache bookkeeping and compute, and the server's memory."""
    tables = model.tables
    capacity = sum(sum(ps.cache.capacity) for ps in model._ps)
    rows = sum(t.rows for t in tables)
    cache_bytes = sum(c * ps.tables[n].width for ps in model._ps for n, c in zip(ps.names, ps.cache.capacity))
    out: dict = {
        "ps_server": model.store.location.shown() if model.store else None,
        "ps_private_server": model.url is None,
        "ps_redis_version": model.store.server_version() if model.store else None,
        "ps_redis_used_memory_bytes": model.store.used_memory() if model.store else None,
        "ps_rows_stored": rows,
        "ps_bytes_stored": sum(t.rows * t.width for t in tables),
        "ps_loaded": bool(model.load and model.load.loaded),
        "ps_load_seconds": model.load.seconds if model.load else None,
        "ps_cache_rows": capacity,
        "ps_cache_fraction": capacity / rows if rows else None,
        "ps_cache_bytes": cache_bytes,
        "ps_slot_rows": sum(sum(ps.slots.sizes.values()) for ps in model._ps),
    }
    calls = model.calls
    phases = {"warmup": calls[: model.warmup_calls], "steady": calls[model.warmup_calls :]}
    for phase, group in phases.items():
        unique = sum(c.unique for c in group)
        out[f"ps_calls_{phase}"] = len(group)
        out[f"ps_hit_rate_{phase}"] = sum(c.hits for c in group) / unique if unique else None
    steady = phases["steady"]
    if steady:
        pull_s = sum(c.pull_s for c in steady)
        total_s = sum(c.total_s for c in steady)
        pulled = sum(c.pulled for c in steady)
        pulled_bytes = sum(c.pulled_bytes for c in steady)
        out.update(
            ps_rows_pulled_per_batch=pulled / len(steady),
            ps_staged_rows_per_batch=sum(c.staged for c in steady) / len(steady),
            ps_pull_rows_per_s=_rate(pulled, pull_s),  # while pulling: what Redis and the client deliver
            ps_pull_bytes_per_s=_rate(pulled_bytes, pull_s),
            ps_rows_pulled_per_s=_rate(pulled, total_s),  # over the timed calls
            ps_bytes_pulled_per_s=_rate(pulled_bytes, total_s),
            ps_pull_share=pull_s / total_s if total_s > 0 else None,
            ps_batch_ms=float(np.median([c.total_s for c in steady]) * 1e3),
            ps_pull_ms=float(np.median([c.pull_s for c in steady]) * 1e3),
            ps_cache_ms=float(np.median([c.cache_s for c in steady]) * 1e3),
            ps_compute_ms=float(np.median([c.total_s - c.pull_s - c.cache_s for c in steady]) * 1e3),
        )
    out["ps_samples"] = {  # raw per-call samples of the timed calls, warm-up first
        "hit_rate": [c.hits / c.unique if c.unique else None for c in calls],
        "pulled": [c.pulled for c in calls],
        "pull_ms": [c.pull_s * 1e3 for c in calls],
        "batch_ms": [c.total_s * 1e3 for c in calls],
    }
    return out


def summary_line(m: dict) -> str:
    """One line of a run's PS metrics for the console."""

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    rate = m.get("ps_pull_rows_per_s")
    return (
        f"  PS ({m.get('ps_precision')} rows, cache {pct(m.get('ps_cache_fraction'))} {m.get('ps_cache_policy')}): "
        f"hit rate warm-up {pct(m.get('ps_hit_rate_warmup'))}, steady {pct(m.get('ps_hit_rate_steady'))}; "
        f"{m.get('ps_rows_pulled_per_batch', 0):,.0f} rows pulled/batch at {rate or 0:,.0f} rows/s; "
        f"batch {m.get('ps_batch_ms', 0):.1f} ms = pull {m.get('ps_pull_ms', 0):.1f} + cache {m.get('ps_cache_ms', 0):.1f} "
        f"+ compute {m.get('ps_compute_ms', 0):.1f} (medians); Redis {m.get('ps_redis_used_memory_bytes', 0) / 1e6:.1f} MB "
        f"for {m.get('ps_rows_stored', 0):,} rows"
    )
