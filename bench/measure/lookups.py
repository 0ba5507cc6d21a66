"""The embedding lookups alone: how long a prepared model's table collections take per row, on the job's own
timed batches, beside the whole forward.

A sequential model's batch looks many rows up more than once: each of a request's K candidate rows carries the
request's history (docs/sequential.md), so one history row is read K times in a call, and all but the first of
those reads hit the caches. So two figures: nanoseconds per id looked up, and per distinct row a call fetches.
The second is what compares with the gather roofline (a device's `gather_bandwidth`, bench.devices: rows at
uniformly random positions, each fetched once), and what `benchmarks/scripts/dlrmv3_paper.py` reads.

A call on the model's own batches also pays torchrec's per-call work (splitting the features, building the
jagged outputs), which is fixed per call. So a third figure times each collection on one call of `RANDOM_IDS`
ids per feature drawn uniformly over its tables (`ns_per_random_row`): the kernel's rate on rows fetched from
all over the tables, with the per-call work spread over many rows, which is what a row costs at the scale
where the tables are far beyond the caches. Each id of that call comes back as one output row (an unpooled
collection's, or a bag of one's), dequantized to the collection's output dtype: `output_bytes_per_random_row`,
what the call writes per row beside what it reads, read off the outputs themselves. A 512-wide row in fp32 is
2,048 bytes, whatever the table stores, so the roofline a random row is held to is its stored row's gather plus
that write (`bench.devices.roofline.Limits.lookup_ns_per_row`). The random call is also timed per collection
(`random_by_collection`: its tables, the rows of its largest, its rows, ns and output bytes per row), so the rows
of a table far beyond the caches are not averaged with those of a small one that stays in them.

The clock is injectable (nanoseconds, as `bench.measure.timing`'s), and the time of a call is the fastest of
`repeats` passes over the batches, as the roofline takes the fastest of its gathers.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.backends.modules import EMBEDDING_TYPES, configs_of

Clock = Callable[[], int]
RANDOM_IDS = 8192  # ids per feature in the random-rows call
# timed batches read: every CPU job pays this after its timed rounds (a default DLRM job at batch 4096 spent 0.3 s,
# 10-19% of the job, over 32); a per-id figure averages over every id, so 8 batches of a job's size are plenty
MAX_CALLS = 8


def collections(model: nn.Module) -> list[nn.Module]:
    """The outermost table collections of `model` (eager or quantized EmbeddingBagCollection / EmbeddingCollection)."""
    found: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside:
            continue
        if isinstance(module, EMBEDDING_TYPES):
            found.append(module)
            inside.update(id(m) for m in module.modules())
    return found


def rows_of(collection: nn.Module, kjt: KeyedJaggedTensor) -> tuple[int, int]:
    """(ids the collection looks up in `kjt`, distinct (table, row) pairs among them)."""
    looked, distinct = 0, 0
    for cfg in configs_of(collection):
        ids = [kjt[f].values() for f in cfg.feature_names if f in kjt.keys()]
        if ids:
            values = torch.cat(ids)
            looked += values.numel()
            distinct += int(torch.unique(values).numel())
    return looked, distinct


def random_ids(collection: nn.Module, keys: list[str], n: int, generator: torch.Generator) -> KeyedJaggedTensor:
    """A batch with the model's own `keys`, in its order (a quantized collection caches the feature order of its first
    call): `n` ids for each feature of `collection`, uniform over its table (one sample of n ids, or n samples of one
    for a pooled collection), none for the other keys."""
    pooled = hasattr(collection, "embedding_bag_configs")
    tables = {f: cfg.num_embeddings for cfg in configs_of(collection) for f in cfg.feature_names}
    values, lengths = [], []
    for key in keys:
        ids = torch.randint(tables[key], (n,), generator=generator) if key in tables else torch.zeros(0, dtype=torch.long)
        values.append(ids)
        if pooled:
            lengths.append(torch.full((n,), int(key in tables), dtype=torch.int32))
        else:
            lengths.append(torch.tensor([len(ids)], dtype=torch.int32))
    return KeyedJaggedTensor.from_lengths_sync(list(keys), torch.cat(values), torch.cat(lengths))


def output_bytes(out: object) -> int:
    """Bytes of a collection's output: a tensor, a KeyedTensor or JaggedTensor (their values), or a dict or list of them."""
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, dict):
        return sum(output_bytes(v) for v in out.values())
    if isinstance(out, (list, tuple)):
        return sum(output_bytes(v) for v in out)
    return output_bytes(out.values())  # torchrec's KeyedTensor, JaggedTensor


def _best(fn: Callable[[], object], clock: Clock, repeats: int) -> int:
    fn()  # untimed: the first call of a kernel allocates
    best = None
    for _ in range(repeats):
        start = clock()
        fn()
        elapsed = clock() - start
        best = elapsed if best is None else min(best, elapsed)
    return int(best)


def _alone(collection: nn.Module, kjt: KeyedJaggedTensor, clock: Clock, repeats: int) -> tuple[dict, int, int]:
    """One collection's random-rows call, timed alone: its record entry, its best ns and the bytes it writes."""
    configs = configs_of(collection)
    rows = kjt.values().numel()
    ns = _best(lambda: collection(kjt), clock, repeats)
    written = output_bytes(collection(kjt))
    entry = {"tables": [cfg.name for cfg in configs], "largest_table_rows": max(cfg.num_embeddings for cfg in configs), "rows": rows,
             "ns_per_row": ns / rows if rows else None, "output_bytes_per_row": written / rows if rows else None}
    return entry, ns, written


def lookup_timing(model: nn.Module, inputs: list[tuple], clock: Clock = time.perf_counter_ns, repeats: int = 3,
                  max_calls: int = MAX_CALLS, random_n: int = RANDOM_IDS) -> dict | None:
    """ns per id and per distinct row of the model's table collections, over up to `max_calls` of the timed
    `inputs` ((dense, kjt) pairs), and per row of `random_n` uniformly drawn ids a feature; None when the model
    holds no torchrec collection (a toolkit's own graph)."""
    found = collections(model)
    batches = [b[1] for b in inputs[:max_calls] if len(b) > 1 and isinstance(b[1], KeyedJaggedTensor)]
    if not found or not batches:
        return None
    counts = [rows_of(c, kjt) for kjt in batches for c in found]
    looked, distinct = sum(c[0] for c in counts), sum(c[1] for c in counts)
    if not looked:
        return None
    generator = torch.Generator().manual_seed(0)
    spread = [(c, random_ids(c, batches[0].keys(), random_n, generator)) for c in found]
    with torch.inference_mode():
        best = _best(lambda: [c(kjt) for kjt in batches for c in found], clock, repeats)
        timed = [_alone(c, kjt, clock, repeats) for c, kjt in spread] if random_n else []
        # one collection: its call alone is the whole random call, timed once
        whole = len(timed) != 1 and random_n
        random_best = _best(lambda: [c(kjt) for c, kjt in spread], clock, repeats) if whole else sum(ns for _, ns, _ in timed)
    alone = [entry for entry, _, _ in timed]
    written = sum(w for _, _, w in timed)
    random_rows = sum(kjt.values().numel() for _, kjt in spread) if random_n else 0
    return {"calls": len(batches), "ids_per_call": looked / len(batches), "distinct_rows_per_call": distinct / len(batches),
            "ns_per_id": best / looked, "ns_per_distinct_row": best / distinct, "seconds_per_call": best / len(batches) / 1e9,
            "random_rows": random_rows, "ns_per_random_row": random_best / random_rows if random_rows else None,
            "output_bytes_per_random_row": written / random_rows if random_rows else None, "random_by_collection": alone}
