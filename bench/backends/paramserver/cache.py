"""The local hot-row cache of a collection's tables: which row sits in which slot of its table's
local slot table.

Table t has `capacity[t]` cache slots, persisting across batches. A batch whose missing rows of a
table do not all fit (every other cached row of that table is needed by the same batch) puts the rest
in staging slots `capacity[t], capacity[t]+1, ...` of that table: pulled for that batch only, never
cached. So the cache never holds more than `capacity[t]` rows of table t, and every batch is served
whatever its size.

Eviction works at batch granularity, per table, and never takes a row the current batch uses:
- lru: the row whose last use is oldest;
- lfu: the row used in the fewest batches since it was cached, the oldest last use breaking ties.

The bookkeeping is vectorised over all tables at once: rows are numbered in one id space (table t's
row i is `row_base[t] + i`), a dense row -> slot map (4 bytes per row) and per-slot recency and use
counts cover every table, so a batch costs one unique, one lookup and one remap whatever the number
of tables; only tables with misses take a few more steps each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

POLICIES = ("lru", "lfu")
_NEVER = torch.iinfo(torch.int64).max


@dataclass
class Assignment:
    """Where each of a batch's unique rows is served from."""

    slots: torch.Tensor  # int64 [U]: slot of every unique row, in its own table's slot table
    miss: torch.Tensor  # bool [U]: rows to pull (admitted to the cache or staged)
    misses: dict[int, tuple[torch.Tensor, torch.Tensor]]  # table -> (row ids within the table, their slots)
    staged: dict[int, int]  # table -> rows served from staging slots (not cached)


class RowCache:
    def __init__(self, rows: Sequence[int], capacities: Sequence[int], policy: str = "lru") -> None:
        if policy not in POLICIES:
            raise ValueError(f"cache policy {policy!r}: choose one of {', '.join(POLICIES)}")
        if len(rows) != len(capacities) or any(not 1 <= c <= r for r, c in zip(rows, capacities)):
            raise ValueError(f"every table's cache capacity must be between 1 and its rows: {list(capacities)} for {list(rows)}")
        self.policy = policy
        self.rows, self.capacity = [int(r) for r in rows], [int(c) for c in capacities]
        self.row_base = torch.tensor([0, *self.rows], dtype=torch.int64).cumsum(0)  # [T + 1]
        self.slot_base = [0, *torch.tensor(self.capacity).cumsum(0).tolist()]
        self._slot_base = torch.tensor(self.slot_base[:-1], dtype=torch.int64)
        n_slots = self.slot_base[-1]
        self.table_of_slot = torch.repeat_interleave(torch.arange(len(self.rows)), torch.tensor(self.capacity))
        self.slot_of = torch.empty(int(self.row_base[-1]), dtype=torch.int32)  # row -> cache slot (global), -1: not cached
        self.row_of = torch.empty(n_slots, dtype=torch.int64)
        self.last_used = torch.empty(n_slots, dtype=torch.int64)
        self.uses = torch.empty(n_slots, dtype=torch.int64)
        self.reset()

    def reset(self) -> None:
        """Empty the cache (a cold start)."""
        self.slot_of.fill_(-1)
        self.row_of.fill_(-1)
        self.last_used.zero_()
        self.uses.zero_()
        self.filled = [0] * len(self.rows)
        self.clock = 0

    def cached(self, table: int) -> torch.Tensor:
        """Row ids (within the table) the cache holds for `table`."""
        base = self.slot_base[table]
        return self.row_of[base : base + self.filled[table]] - self.row_base[table]

    def _eviction_key(self, lo: int, hi: int) -> torch.Tensor:
        """Of slots [lo, hi); lower = evicted first. Batch stamps and use counts stay far below 2**31."""
        recency = self.last_used[lo:hi]
        key = recency.clone() if self.policy == "lru" else self.uses[lo:hi] * (1 << 31) + recency
        key[recency == self.clock] = _NEVER  # used by this batch
        return key

    def assign(self, rows: torch.Tensor) -> Assignment:
        """Slots for a batch's unique rows (global ids, int64, sorted, no repeats); updates the cache."""
        self.clock += 1
        found = self.slot_of[rows].to(torch.int64)
        miss = found < 0
        hit_slots = found[~miss]
        self.last_used[hit_slots] = self.clock
        self.uses[hit_slots] += 1
        slots = found - self._slot_base[self.table_of_slot[found.clamp(min=0)]]  # global -> within the table
        missing = rows[miss]
        tables = torch.searchsorted(self.row_base, missing, right=True) - 1
        counts = torch.bincount(tables, minlength=len(self.rows)).tolist()
        misses, staged, parts, start = {}, {}, [], 0
        for t, n in enumerate(counts):
            if n == 0:
                continue
            ids = missing[start : start + n]  # sorted rows: each table's misses are contiguous
            start += n
            local = self._admit(t, ids)
            misses[t] = (ids - self.row_base[t], local)
            staged[t] = n - int((local < self.capacity[t]).sum())
            parts.append(local)
        if parts:
            slots[miss] = torch.cat(parts)
        return Assignment(slots=slots, miss=miss, misses=misses, staged=staged)

    def _admit(self, t: int, ids: torch.Tensor) -> torch.Tensor:
        """Slots (within table t) for its missing rows: empty slots, then victims, then staging."""
        n, base, capacity, old = int(ids.numel()), self.slot_base[t], self.capacity[t], self.filled[t]
        n_empty = min(n, capacity - old)
        local = [torch.arange(old, old + n_empty, dtype=torch.int64)]
        if n > n_empty and old:
            key = self._eviction_key(base, base + old)
            n_evict = min(n - n_empty, int((key != _NEVER).sum()))
            if n_evict:
                victims = torch.topk(key, n_evict, largest=False, sorted=False).indices
                self.slot_of[self.row_of[base + victims]] = -1
                local.append(victims)
        self.filled[t] = old + n_empty
        admitted = torch.cat(local)
        k = int(admitted.numel())
        cache_slots = base + admitted
        self.slot_of[ids[:k]] = cache_slots.to(torch.int32)
        self.row_of[cache_slots] = ids[:k]
        self.last_used[cache_slots] = self.clock
        self.uses[cache_slots] = 1
        return torch.cat([admitted, torch.arange(capacity, capacity + n - k, dtype=torch.int64)])
