"""The local hot-row cache of one table: which row id sits in which slot of the local slot table.

Slots `[0, capacity)` hold cached rows and persist across batches. A batch whose missing ids do not
all fit (every other cached row is needed by the same batch) puts the rest in staging slots
`capacity, capacity+1, ...`: pulled for that batch only, never cached. So the cache never holds more
than `capacity` rows, and every batch is served whatever its size.

Eviction works at batch granularity and never takes a row the current batch uses:
- lru: the row whose last use is oldest;
- lfu: the row used in the fewest batches since it was cached, the oldest last use breaking ties.

All bookkeeping is vectorised over the batch's unique ids (torch tensors, no Python loop per id):
a dense id -> slot map (4 bytes per table row) and per-slot recency and frequency.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

POLICIES = ("lru", "lfu")
_NEVER = torch.iinfo(torch.int64).max


@dataclass
class Assignment:
    """Where each of a batch's unique ids is served from."""

    slots: torch.Tensor  # int64 [U]: slot of every unique id
    miss: torch.Tensor  # bool [U]: to be pulled (admitted to the cache or staged)
    staged: int  # misses served from staging slots (not cached)


class SlotCache:
    def __init__(self, capacity: int, num_rows: int, policy: str = "lru") -> None:
        if policy not in POLICIES:
            raise ValueError(f"cache policy {policy!r}: choose one of {', '.join(POLICIES)}")
        if not 1 <= capacity <= num_rows:
            raise ValueError(f"cache capacity {capacity} must be between 1 and the table's {num_rows} rows")
        self.capacity, self.num_rows, self.policy = capacity, num_rows, policy
        self.slot_of = torch.empty(num_rows, dtype=torch.int32)
        self.id_of = torch.empty(capacity, dtype=torch.int64)
        self.last_used = torch.empty(capacity, dtype=torch.int64)
        self.uses = torch.empty(capacity, dtype=torch.int64)
        self.reset()

    def reset(self) -> None:
        """Empty the cache (a cold start)."""
        self.slot_of.fill_(-1)
        self.id_of.fill_(-1)
        self.last_used.zero_()
        self.uses.zero_()
        self.filled = 0
        self.clock = 0

    def __len__(self) -> int:
        return self.filled

    def cached_ids(self) -> torch.Tensor:
        return self.id_of[: self.filled].clone()

    def _eviction_key(self, n: int) -> torch.Tensor:
        """Of the first n slots; lower = evicted first. Batch stamps and use counts stay far below 2**31."""
        recency = self.last_used[:n]
        if self.policy == "lru":
            return recency.clone()
        return self.uses[:n] * (1 << 31) + recency

    def assign(self, ids: torch.Tensor) -> Assignment:
        """Slots for a batch's unique ids (int64, no repeats); updates recency, frequency and contents."""
        self.clock += 1
        slots = self.slot_of[ids].to(torch.int64)
        hit = slots >= 0
        hit_slots = slots[hit]
        self.last_used[hit_slots] = self.clock
        self.uses[hit_slots] += 1
        miss = ~hit
        missing = ids[miss]
        n_miss = int(missing.numel())
        # empty slots first, then victims: cached rows this batch does not use
        old = self.filled
        n_empty = min(n_miss, self.capacity - old)
        new_slots = [torch.arange(old, old + n_empty, dtype=torch.int64)]
        n_evict = min(n_miss - n_empty, old - int(hit_slots.numel()))
        if n_evict > 0:
            key = self._eviction_key(old)
            key[hit_slots] = _NEVER
            victims = torch.topk(key, n_evict, largest=False, sorted=False).indices
            self.slot_of[self.id_of[victims]] = -1
            new_slots.append(victims)
        self.filled = old + n_empty
        admitted = torch.cat(new_slots)
        n_admit = int(admitted.numel())
        staged = n_miss - n_admit
        self.slot_of[missing[:n_admit]] = admitted.to(torch.int32)
        self.id_of[admitted] = missing[:n_admit]
        self.last_used[admitted] = self.clock
        self.uses[admitted] = 1
        miss_slots = torch.cat([admitted, torch.arange(self.capacity, self.capacity + staged, dtype=torch.int64)])
        slots[miss] = miss_slots
        return Assignment(slots=slots, miss=miss, staged=staged)
