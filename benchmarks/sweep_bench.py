"""Wall time of the default sweep, cold and warm, and how repeatable a warm sweep is.

Runs `python -m bench +sweep=quant` three times in subprocesses on a fresh cache: once cold (data
generated, model trained, every backend evaluated) and twice warm (checkpoint and eval scores from
the cache). Prints the wall times, then compares the two warm sweeps row by row: AUCs must agree
to the last digit, throughput medians within 5%.

    python benchmarks/sweep_bench.py [--workdir DIR] [extra overrides...]
"""

from __future__ import annotations

import argparse
import subprocess
import re
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def sweep(workdir: Path, tag: str, extra: list[str]) -> tuple[float, pd.DataFrame]:
    reports = workdir / f"reports_{tag}"
    cmd = [sys.executable, "-m", "bench", "+sweep=quant", f"cache_dir={workdir / 'cache'}", f"reports_dir={reports}", f"hydra.sweep.dir={workdir / ('multirun_' + tag)}", *extra]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sweep {tag} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    report = re.search(r"^report: (.+)/report.md$", done.stdout, re.M).group(1)  # `latest`, or latest-<overrides> with extra args
    return wall, pd.read_csv(Path(report) / "results.csv")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args, extra = parser.parse_known_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-sweep-"))

    cold, _ = sweep(workdir, "cold", extra)
    warm1, a = sweep(workdir, "warm1", extra)
    warm2, b = sweep(workdir, "warm2", extra)
    print(f"workdir {workdir}")
    print(f"cold sweep  {cold:6.1f} s   (goal <= 180 s)")
    print(f"warm sweep  {warm1:6.1f} s   (goal <= 90 s)")
    print(f"warm sweep  {warm2:6.1f} s")

    key = ["workload", "device", "backend", "batch_size"]
    ok = (a.status == "ok")
    joined = a[ok].merge(b[b.status == "ok"], on=key, suffixes=("_1", "_2"))
    joined["auc_equal"] = joined.auc_1 == joined.auc_2
    joined["tp_ratio"] = joined.throughput_2 / joined.throughput_1
    print()
    print(joined[key + ["auc_1", "auc_2", "auc_equal", "throughput_1", "throughput_2", "tp_ratio"]].to_string(index=False, float_format=lambda x: f"{x:.6g}"))
    within = (joined.tp_ratio - 1).abs() <= 0.05
    print()
    print(f"AUC identical in {int(joined.auc_equal.sum())}/{len(joined)} rows")
    print(f"throughput medians within 5% in {int(within.sum())}/{len(joined)} rows; median |change| {((joined.tp_ratio - 1).abs().median() * 100):.1f}%")


if __name__ == "__main__":
    main()
