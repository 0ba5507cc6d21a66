"""Why did a 2 GB sweep not show quantized tables winning? Each candidate cause, measured, with
paired ratios: every backend is timed round by round on the same batches, and a ratio is taken per
round before the median, so machine noise hits the backends alike.

The model and data are the scale sweep's (`workload=synthetic_scale model=scale`: 26 tables x
`--rows` rows, dim 64), with untrained weights (the kernels' speed does not depend on training).
For every access pattern, batch size and backend it times:

  replay  the harness's old timing loop: the first `--replay` eval batches, cycled
  pool    the harness's timing loop now: distinct eval batches holding `--pool-samples` samples,
          cycled with one cursor

for the whole model and for its embedding module alone, and prints per cell the samples/s, the
ratio to fp32, and the minor page faults per call. It also prints what the replayed and the pooled
batches touch (unique ids per batch, rows touched per table, working set against the last-level
cache) and the kernels each backend runs. `--clock thread_cpu` times the thread's CPU time instead
of wall time (with `--threads 1`), for a machine shared with other work. `--malloc mmap` runs with glibc's mmap left on above
32 MiB (the harness's allocator settings before this change) to show the page-fault factor;
`--threads` sets torch's thread count.

    python benchmarks/scripts/scale_diagnose.py [--rows 300000] [--access zipf uniform] [--batch-sizes 1024 4096]
        [--backends fp32 fp32_tbe int8_tbe uint4] [--rounds 5] [--threads 1] [--clock wall|thread_cpu]
        [--pooling 1] [--malloc pinned|mmap]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import itertools
import statistics
import time
import warnings

import torch

from bench import hardware, registry
from bench.config.compose import compose
from bench.measure.working_set import access_profile, working_set_bytes
from bench.measure.operators import operators
from bench.models.dlrm import build_dlrm
from bench.pipeline.job import backend_config
from bench.pipeline.shared import SharedWork

warnings.filterwarnings("ignore")
ROW_BYTES = {"fp32": 256, "int8": 68, "int4": 36}


CLOCK = {"wall": time.perf_counter, "thread_cpu": time.thread_time}


def throughput(module, batches, calls: int, cursor: list[int], clock) -> tuple[float, float]:
    """(samples/s, minor faults per call) over `calls` calls, cycling `batches` from a cursor that runs on."""
    bs = batches[0][0].shape[0]
    faults = hardware.minor_faults()
    with torch.inference_mode():
        start = clock()
        for _ in range(calls):
            module(*batches[cursor[0] % len(batches)])
            cursor[0] += 1
        seconds = clock() - start
    return bs * calls / seconds, (hardware.minor_faults() - faults) / calls


class EmbeddingOnly(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.ebc = next(m for n, m in model.named_modules() if n.endswith("embedding_bag_collection"))

    def forward(self, dense, sparse):
        return self.ebc(sparse)


def describe(name: str, batches, tables, llc: int) -> str:
    p = access_profile(batches, tables)
    sets = ", ".join(f"{t} {working_set_bytes(p, {n: w for n in p['tables']}) / 2**20:,.0f} MiB" for t, w in ROW_BYTES.items())
    return (f"{name} {p['pool_batches']:4d} batches: unique ids/batch/table {p['unique_ids_per_batch_mean']:,.0f}, "
            f"rows touched {100 * p['rows_touched_fraction_mean']:.1f}% per table, working set {sets} (LLC {llc / 2**20:.0f} MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--access", nargs="+", default=["zipf", "uniform"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--backends", nargs="+", default=["fp32", "fp32_tbe", "int8_tbe", "uint4"])
    parser.add_argument("--replay", type=int, default=10)
    parser.add_argument("--pool-samples", type=int, default=262_144)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="calls per measurement on the pool")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--malloc", choices=["pinned", "mmap"], default="pinned")
    parser.add_argument("--clock", choices=list(CLOCK), default="wall", help="thread_cpu needs --threads 1")
    parser.add_argument("--pooling", type=int, default=1, help="ids per sample per table")
    args = parser.parse_args()
    clock = CLOCK[args.clock]
    hardware.pin_malloc()
    if args.malloc == "mmap":  # back to mmap for blocks of 32 MiB and more (glibc's default count)
        ctypes.CDLL("libc.so.6").mallopt(-4, 65536)
    hardware.set_threads(args.threads)
    llc = hardware.llc_bytes()

    work = SharedWork()
    base = ["workload=synthetic_scale", "model=scale", f"workload.table_rows={args.rows}", f"workload.eval_samples={args.pool_samples}",
            f"workload.pooling=[{','.join([str(args.pooling)] * 26)}]"]
    cfg = compose(base)
    workload = work.workload(cfg)
    tables = workload.tables
    gb = sum(t.num_embeddings for t in tables) * cfg.model.embedding_dim * 4 / 1e9
    print(f"{len(tables)} tables x {args.rows:,} rows x dim {cfg.model.embedding_dim}: {gb:.2f} GB fp32, {gb * 1e9 / llc:.0f}x the "
          f"{llc / 2**20:.0f} MiB LLC; pooling {args.pooling}; {torch.get_num_threads()} threads; clock {args.clock}; malloc {args.malloc}; load {open('/proc/loadavg').read().split()[:3]}")
    torch.manual_seed(0)
    model = build_dlrm(cfg.model, tables, workload.num_dense).eval()

    inputs = {}
    for access in args.access:
        wl = work.workload(compose([*base, f"workload.access={access}"]))
        for bs in args.batch_sizes:
            pool = [b.model_inputs() for b in wl.batches("eval", bs) if len(b) == bs]
            inputs[(access, bs)] = {"replay": pool[: args.replay], "pool": pool}
            print(f"{access:7s} bs {bs:5d} " + describe("replay", pool[: args.replay], tables, llc))
            print(f"{access:7s} bs {bs:5d} " + describe("pool  ", pool, tables, llc))

    prepared = {}
    calibration = list(itertools.islice(wl.batches("calibration", 1024), 2))  # backend.mlp_wide reads the Linears' input ranges
    for name in args.backends:
        backend = registry.get("backend", name).factory(backend_config({"name": name}))
        start = time.perf_counter()
        prepared[name] = backend.prepare(model, calibration, torch.device("cpu"))
        ops = operators(prepared[name], next(iter(inputs.values()))["pool"][0])
        print(f"{name}: prepared in {time.perf_counter() - start:.1f} s; kernels {sorted(ops.embedding)} + {sorted(ops.gemm)}")
    del model
    gc.collect()

    results: dict[tuple, list[tuple[float, float]]] = {}
    cursors: dict[tuple, list[int]] = {}
    for round_index in range(args.rounds):
        for key, sets in inputs.items():
            for mode, batches in sets.items():
                for name in args.backends:  # interleaved: machine noise hits every backend alike
                    for part, module in (("model", prepared[name]), ("emb", EmbeddingOnly(prepared[name]))):
                        cursor = cursors.setdefault((name, *key, mode, part), [0])
                        if round_index == 0:
                            throughput(module, batches, 2, cursor, clock)  # warm-up
                        calls = len(batches) if mode == "replay" else args.calls
                        results.setdefault((name, *key, mode, part), []).append(throughput(module, batches, calls, cursor, clock))
        print(f"round {round_index + 1}/{args.rounds}; load {open('/proc/loadavg').read().split()[:3]}", flush=True)

    def ratio(a, b):  # paired: per round, then the median over rounds
        return statistics.median(x[0] / y[0] for x, y in zip(a, b))

    print("\nsamples/s (median of rounds); ratios to fp32 are medians of per-round ratios; faults = minor page faults per call (pool)")
    print(f"{'backend':9s} {'access':7s} {'bs':>5s} {'part':5s} {'replay':>9s} {'pool':>9s} {'pool/replay':>11s} "
          f"{'vs fp32 replay':>14s} {'vs fp32 pool':>12s} {'faults':>7s}")
    for name in args.backends:
        for access in args.access:
            for bs in args.batch_sizes:
                for part in ("model", "emb"):
                    r, p = (results[(name, access, bs, m, part)] for m in ("replay", "pool"))
                    r0, p0 = (results[("fp32", access, bs, m, part)] for m in ("replay", "pool"))
                    print(f"{name:9s} {access:7s} {bs:5d} {part:5s} {statistics.median(x[0] for x in r):9,.0f} "
                          f"{statistics.median(x[0] for x in p):9,.0f} {ratio(p, r):11.2f} {ratio(r, r0):14.2f} {ratio(p, p0):12.2f} "
                          f"{statistics.median(x[1] for x in p):7,.0f}")


if __name__ == "__main__":
    main()
