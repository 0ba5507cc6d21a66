"""Wall time of the default sweep, cold and warm, and how repeatable a warm sweep is.

Runs `python -m bench +sweep=quant` three times in subprocesses on a fresh cache: once cold (data
generated, model trained, every backend evaluated) and twice warm (checkpoint and eval scores from
the cache). Prints the wall times, then compares the two warm sweeps row by row: AUCs must agree
to the last digit; speedups (paired against fp32 in each job's process) and throughput medians
within 5%.

    python benchmarks/scripts/sweep_bench.py [--workdir DIR] [extra overrides...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd
from sweep_runs import quant_sweep


def sweep(workdir: Path, tag: str, extra: list[str]) -> tuple[float, pd.DataFrame]:
    return quant_sweep(workdir, tag, extra)


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
    joined = a[ok].merge(b[b.status == "ok"], on=key, suffixes=("_1", "_2")).copy()  # a defragmented frame for the columns added below
    joined["auc_equal"] = joined.auc_1 == joined.auc_2
    joined["tp_ratio"] = joined.throughput_2 / joined.throughput_1
    joined["speedup_ratio"] = joined.speedup_2 / joined.speedup_1
    print()
    print(joined[key + ["auc_1", "auc_2", "auc_equal", "throughput_1", "throughput_2", "tp_ratio", "speedup_1", "speedup_2",
                        "speedup_ratio", "stable_1", "stable_2"]].to_string(index=False, float_format=lambda x: f"{x:.6g}"))
    within = (joined.tp_ratio - 1).abs() <= 0.05
    speed_within = (joined.speedup_ratio - 1).abs() <= 0.05
    print()
    print(f"AUC identical in {int(joined.auc_equal.sum())}/{len(joined)} rows")
    print(f"throughput medians within 5% in {int(within.sum())}/{len(joined)} rows; median |change| {((joined.tp_ratio - 1).abs().median() * 100):.1f}%")
    print(f"speedups within 5% in {int(speed_within.sum())}/{len(joined)} rows; median |change| {((joined.speedup_ratio - 1).abs().median() * 100):.1f}%")


if __name__ == "__main__":
    main()
