"""Why stage 3's estimates at 2 threads miss LoadGen's on a 2-core host: stage 3 times served batches with the cores to
themselves, where under LoadGen other threads (LoadGen's, the batcher's) take a core now and then. This times each
backend's served batches (bench.serve.path, the module against itself) alone and beside a background thread that
takes a core in short bursts (numpy work outside the GIL, --burst-ms every --every-ms), rounds alternating the two.

    python benchmarks/scripts/served_beside_bursts.py cache_dir=/work/cache-45 [--backends fp32 onnxruntime_int8_dynamic]
        [--size 4096] [--threads 2] [--batches 12] [--rounds 3] [--burst-ms 0.3] [--every-ms 1]
Overrides (key=value) go before --backends, which takes every word after it. Prints the median ms per served batch
alone and beside the bursts, and their ratio, per backend.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from bench.serve.path import paired_served_times

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts' shared setup beside them (serving_setup.py)
from serving_setup import serving_bench, unknown_backend  # noqa: E402

DEFAULT = ["fp32", "onnxruntime_int8_dynamic", "compiled_fp32", "inc_int8_static"]


class Bursts:
    """A thread that keeps a core busy for `burst_s` (numpy sorts, the GIL released) then sleeps `every_s`, until stopped."""

    def __init__(self, burst_s: float, every_s: float) -> None:
        self.burst_s, self.every_s = burst_s, every_s
        self.stop = threading.Event()
        self.data = np.random.default_rng(0).random(20_000)
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.perf_counter()
            while time.perf_counter() - start < self.burst_s:
                np.sort(self.data)
            time.sleep(self.every_s)

    def __enter__(self) -> "Bursts":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=DEFAULT)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--burst-ms", type=float, default=0.3)
    parser.add_argument("--every-ms", type=float, default=1.0)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if unknown_backend(args.backends):
        parser.error(unknown_backend(args.backends))
    torch.set_num_threads(args.threads)
    bench = serving_bench(args.backends, args.size, args.overrides, args.threads)
    device, modules, queries = torch.device("cpu"), bench.modules, bench.queries

    def timed(seed: int) -> dict[str, float]:
        return {name: paired_served_times(m, m, queries, device, args.size, batches=args.batches, seed=seed).ms
                for name, m in modules.items()}

    alone: dict[str, list[float]] = {name: [] for name in modules}
    beside: dict[str, list[float]] = {name: [] for name in modules}
    for r in range(args.rounds):
        for name, ms in timed(r).items():
            alone[name].append(ms)
        with Bursts(args.burst_ms / 1000, args.every_ms / 1000):
            for name, ms in timed(r).items():
                beside[name].append(ms)
    print(f"batcher {args.size} rows, {args.threads} threads, {args.batches} batches x {args.rounds} rounds; bursts of "
          f"{args.burst_ms} ms every {args.every_ms} ms; median ms per served batch")
    print(f"{'backend':28s} {'alone':>8s} {'bursts':>8s} {'ratio':>7s}")
    for name in modules:
        a, b = float(np.median(alone[name])), float(np.median(beside[name]))
        print(f"{name:28s} {a:8.3f} {b:8.3f} {b / a:6.2f}x")


if __name__ == "__main__":
    main()
