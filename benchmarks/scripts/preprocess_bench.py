"""Preprocessing speed and memory: `python -m bench.preprocess` against torchrec's
`BinaryCriteoUtils.tsv_to_npys` on the same generated file, and peak RSS on a large file.

    PYTHONPATH=. python benchmarks/scripts/preprocess_bench.py --rows 200000 --big-rows 10000000 --workdir /tmp/criteo-bench

Each measurement runs in its own subprocess; peak RSS is that child's `ru_maxrss`, and for ours
the peak of its process tree (its parsing workers included) sampled from /proc every 5 ms, with
an upper bound (own peak + workers x the largest worker's peak). `--repeat N` alternates the two
N times and reports medians (the machine may be shared). Files are
generated (never real rows) by a streaming generator, so generating the big file is bounded in
memory too. torchrec holds a whole file in Python lists, so it only runs on the small file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

OURS = """
import os, sys, threading, time
from bench.workloads.criteo.convert import PreprocessOptions, preprocess

def tree_rss_kb():
    # VmRSS of this process plus its child processes (the parsing workers), from /proc
    total, pids = 0, [os.getpid()]
    for tid in os.listdir("/proc/self/task"):
        try:
            pids += [int(p) for p in open(f"/proc/self/task/{tid}/children").read().split()]
        except OSError:
            pass
    for pid in pids:
        try:
            total += next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total

peak, done = [0], threading.Event()
def sample():
    while not done.wait(0.005):
        peak[0] = max(peak[0], tree_rss_kb())
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
workers = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] != "default" else None
t = time.perf_counter()
meta = preprocess([sys.argv[1]], sys.argv[2], PreprocessOptions(categorical=sys.argv[3], max_ind_range=int(sys.argv[4])), workers=workers)
seconds = time.perf_counter() - t
done.set(); sampler.join()
import resource
own, child = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
from bench.workloads.criteo.text import default_workers
n = default_workers() if workers is None else workers
# peak RSS, KB: the sampled sum over the process tree, and a bound that cannot miss a spike
# (own peak + every worker at the largest worker's peak; pages shared after fork count twice)
print(seconds, max(peak[0], own), own + (n if n > 1 else 0) * child)
"""

TORCHREC = """
import sys, time, warnings
warnings.simplefilter("ignore")
from torchrec.datasets.criteo import BinaryCriteoUtils
out = sys.argv[2]
t = time.perf_counter()
BinaryCriteoUtils.tsv_to_npys(sys.argv[1], out + "/day_0_dense.npy", out + "/day_0_sparse.npy", out + "/day_0_labels.npy")
import resource
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

GENERATE = """
import sys
from tests.support.criteo_rows import write_text
import resource
write_text(sys.argv[1], int(sys.argv[2]), seed=0, chunk_rows=20000)
print(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def child(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter; its seconds and peak RSS (MB): ru_maxrss of the child, or
    for ours the peak of the process tree (the child and its parsing workers) and an upper bound."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(proc.stderr)
    out = proc.stdout.split("\n")[-2].split()  # the child's own timing and peak RSS (KB)
    r = {"seconds": float(out[0]) or wall, "wall": wall, "peak_rss_mb": int(out[1]) / 1024}
    if len(out) > 2:
        r["peak_rss_bound_mb"] = int(out[2]) / 1024
    return r


def rss(r: dict) -> str:
    text = f"peak RSS {r['peak_rss_mb']:.0f} MB"
    if "peak_rss_bound_mb" in r:
        text += f" (all processes; bound {r['peak_rss_bound_mb']:.0f} MB)"
    return text


def ensure_file(path: Path, rows: int) -> Path:
    if not path.exists():
        t = time.perf_counter()
        r = child(GENERATE, str(path), str(rows))
        print(f"generated {path} ({rows:,} rows, {path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t:.0f}s, generator peak RSS {r['peak_rss_mb']:.0f} MB")
    return path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=200_000, help="rows of the side-by-side file")
    p.add_argument("--big-rows", type=int, default=0, help="rows of the peak-RSS file (0: skip)")
    p.add_argument("--workdir", default="/tmp/criteo-bench")
    p.add_argument("--categorical", default="hash")
    p.add_argument("--workers", default="default", help="ours: parsing worker processes (default: one per CPU)")
    p.add_argument("--repeat", type=int, default=1, help="side-by-side runs (alternating); medians are reported")
    args = p.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = {}

    small = ensure_file(work / f"gen_{args.rows}.tsv", args.rows)
    runs: dict[str, list] = {"torchrec_tsv_to_npys": [], "bench_preprocess": []}
    for _ in range(args.repeat):
        for name, code in (("torchrec_tsv_to_npys", TORCHREC), ("bench_preprocess", OURS)):
            out = work / f"out_{name}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            r = child(code, str(small), str(out), args.categorical, "40000000", args.workers)
            r["rows_per_s"] = args.rows / r["seconds"]
            runs[name].append(r)
            print(f"{name:22s} {args.rows:>10,} rows  {r['seconds']:7.2f}s  {r['rows_per_s']:>10,.0f} rows/s  {rss(r)}")
    for name, rs in runs.items():
        results[name] = dict(rs[0], rows_per_s=statistics.median(r["rows_per_s"] for r in rs), all_rows_per_s=[round(r["rows_per_s"]) for r in rs])
    speedups = [o["rows_per_s"] / t["rows_per_s"] for t, o in zip(runs["torchrec_tsv_to_npys"], runs["bench_preprocess"])]
    speedup = statistics.median(speedups)
    results["speedup"] = speedup
    results["speedups"] = [round(x, 1) for x in speedups]
    print(f"torchrec {results['torchrec_tsv_to_npys']['rows_per_s']:,.0f} rows/s, ours {results['bench_preprocess']['rows_per_s']:,.0f} rows/s (medians)")
    print(f"speed-up: {speedup:.1f}x (median of {len(speedups)} side-by-side runs: {', '.join(f'{x:.1f}' for x in speedups)})")

    if args.big_rows:
        big = ensure_file(work / f"gen_{args.big_rows}.tsv", args.big_rows)
        out = work / "out_big"
        shutil.rmtree(out, ignore_errors=True)
        r = child(OURS, str(big), str(out), args.categorical, "40000000", args.workers)
        r["rows_per_s"] = args.big_rows / r["seconds"]
        results["big"] = r
        print(f"bench_preprocess {args.big_rows:,} rows: {r['seconds']:.1f}s, {r['rows_per_s']:,.0f} rows/s, {rss(r)}")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
