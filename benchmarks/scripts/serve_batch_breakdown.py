"""Where a served batch's time goes: the SUT's batch path (bench.serve.sut.predict) stage by stage, beside the
bare model call the paired offline job times.

For each backend and batcher size, batches are packed the way the batcher packs them under load (random
samples of the query set, in order, up to the size's rows), and each batch is timed through:
  rows     QuerySet.rows_of: the samples' row indices
  gather   take_rows: the rows' dense features, ids (a new KJT) and labels
  model    the prepared module's call on that batch
  scores   sigmoid, the copy out and the [prediction, label] array
  predict  the whole of bench.serve.sut.predict on the same samples (the function the SUT's workers call)
  again    the module on the same gathered batch again with a fresh KJT (bench.batch.fresh_inputs): its rows
           now in cache
  offline  the module on the same batch in the backend's timed form (Backend.timed_inputs: a toolkit's feeds,
           a compiled twin's id matrices, built before the clock): what the paired offline job times per call
Backends and sizes are interleaved batch by batch, so the host's speed phases hit them alike. Prints the
median ms of each stage per batch and per 1000 pairs.

    python benchmarks/scripts/serve_batch_breakdown.py cache_dir=/work/cache-45 [--backends fp32 onnxruntime_int8_dynamic]
        [--sizes 1024 4096] [--batches 40]
Overrides (key=value) go before --backends, which takes every word after it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from bench.batch import fresh_inputs, take_rows
from bench.serve.path import packed

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts' shared setup beside them (serving_setup.py)
from serving_setup import serving_bench, unknown_backend  # noqa: E402
from bench.serve.queries import QuerySet
from bench.serve.sut import predict


def stages(backend, module, queries: QuerySet, indices: list[int], device, max_rows: int) -> dict[str, float]:
    t = {}
    with torch.inference_mode():
        c = time.perf_counter()
        rows = queries.rows_of(indices)
        t["rows"] = time.perf_counter() - c
        c = time.perf_counter()
        batch = take_rows(queries.batch, rows)
        t["gather"] = time.perf_counter() - c
        c = time.perf_counter()
        logits = module(*batch.to(device).model_inputs()).reshape(-1).float()
        t["model"] = time.perf_counter() - c
        c = time.perf_counter()
        probs = torch.sigmoid(logits).cpu()
        np.ascontiguousarray(np.stack([probs.numpy(), batch.labels.numpy().astype(np.float32)], axis=1))
        t["scores"] = time.perf_counter() - c
        args = fresh_inputs(batch.to(device).model_inputs())
        c = time.perf_counter()
        module(*args)
        t["again"] = time.perf_counter() - c
        timed = backend.timed_inputs(module, [batch.to(device).model_inputs()])[0]
        c = time.perf_counter()
        module(*timed)
        t["offline"] = time.perf_counter() - c
    c = time.perf_counter()
    predict(module, queries, indices, device, max_rows)
    t["predict"] = time.perf_counter() - c
    t["pairs"] = float(len(rows))
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["fp32", "onnxruntime_int8_dynamic"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1024, 4096])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if unknown_backend(args.backends):
        parser.error(unknown_backend(args.backends))
    torch.set_num_threads(1)
    bench = serving_bench(args.backends, max(args.sizes), args.overrides)
    device, modules, backends, queries = torch.device("cpu"), bench.modules, bench.backends, bench.queries
    rng = np.random.default_rng(0)
    found: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for k in range(args.batches + 2):  # the first two rounds warm up
        for size in args.sizes:
            indices = packed(queries, size, rng)
            for name, module in modules.items():
                t = stages(backends[name], module, queries, indices, device, size)
                if k >= 2:
                    for key, v in t.items():
                        found[(name, size)][key].append(v)
    keys = ["rows", "gather", "model", "scores", "predict", "again", "offline"]
    print(f"{args.batches} batches per cell, torch threads {torch.get_num_threads()}, query set {len(queries)} samples; "
          "median ms per batch (ms per 1000 pairs)")
    print(f"{'backend':28s} {'size':>5s} {'pairs':>6s} " + " ".join(f"{k:>15s}" for k in keys) + "  predict/offline")
    for (name, size), t in found.items():
        pairs = float(np.median(t["pairs"]))
        med = {k: 1000 * float(np.median(t[k])) for k in keys}
        cells = " ".join(f"{med[k]:7.2f} ({med[k] / pairs * 1000:5.2f})" for k in keys)
        print(f"{name:28s} {size:5d} {pairs:6.0f} {cells}  {med['predict'] / med['offline']:.2f}x")


if __name__ == "__main__":
    main()
