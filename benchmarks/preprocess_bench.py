"""Preprocessing speed and memory: `python -m bench.preprocess` against torchrec's
`BinaryCriteoUtils.tsv_to_npys` on the same generated file, and peak RSS on a large file.

    PYTHONPATH=. python benchmarks/preprocess_bench.py --rows 200000 --big-rows 10000000 --workdir /tmp/criteo-bench

Each measurement runs in its own subprocess; peak RSS is that child's `ru_maxrss`. Files are
generated (never real rows) by a streaming generator, so generating the big file is bounded in
memory too. torchrec holds a whole file in Python lists, so it only runs on the small file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

OURS = """
import sys, time
from bench.workloads.criteo.preprocess import PreprocessOptions, preprocess
t = time.perf_counter()
meta = preprocess([sys.argv[1]], sys.argv[2], PreprocessOptions(categorical=sys.argv[3], max_ind_range=int(sys.argv[4])))
import resource
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
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
from bench.workloads.criteo.generate import write_text
import resource
write_text(sys.argv[1], int(sys.argv[2]), seed=0, chunk_rows=20000)
print(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def child(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter; its seconds and its own peak RSS (MB, ru_maxrss of the child)."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(proc.stderr)
    seconds, peak_kb = proc.stdout.split()[-2:]  # the child's own timing and ru_maxrss (KB on Linux)
    return {"seconds": float(seconds) or wall, "wall": wall, "peak_rss_mb": int(peak_kb) / 1024}


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
    args = p.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = {}

    small = ensure_file(work / f"gen_{args.rows}.tsv", args.rows)
    for name, code in (("torchrec_tsv_to_npys", TORCHREC), ("bench_preprocess", OURS)):
        out = work / f"out_{name}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        r = child(code, str(small), str(out), args.categorical, "40000000")
        r["rows_per_s"] = args.rows / r["seconds"]
        results[name] = r
        print(f"{name:22s} {args.rows:>10,} rows  {r['seconds']:7.2f}s  {r['rows_per_s']:>10,.0f} rows/s  peak RSS {r['peak_rss_mb']:.0f} MB")
    speedup = results["bench_preprocess"]["rows_per_s"] / results["torchrec_tsv_to_npys"]["rows_per_s"]
    results["speedup"] = speedup
    print(f"speed-up: {speedup:.1f}x")

    if args.big_rows:
        big = ensure_file(work / f"gen_{args.big_rows}.tsv", args.big_rows)
        out = work / "out_big"
        shutil.rmtree(out, ignore_errors=True)
        r = child(OURS, str(big), str(out), args.categorical, "40000000")
        r["rows_per_s"] = args.big_rows / r["seconds"]
        results["big"] = r
        print(f"bench_preprocess {args.big_rows:,} rows: {r['seconds']:.1f}s, {r['rows_per_s']:,.0f} rows/s, peak RSS {r['peak_rss_mb']:.0f} MB")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
