"""Wall time of the default sweep, cold and warm, and how repeatable a warm sweep is.

Runs `python -m bench +sweep=quant` three times in subprocesses on a fresh cache: once cold (data
generated, model trained, every backend evaluated, this machine's timing calibrated) and twice warm
(checkpoint, eval scores and calibration from the cache). Prints the wall times, then compares the
two warm sweeps row by row: AUCs must agree to the last digit; speedups (paired against fp32 in each
job's process) within 5% in every non-fp32 row; and how many rows of each sweep read inconclusive,
with their interval widths (one that truly sits on the margin may; noise may not).

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
    print(joined[key + ["auc_equal", "throughput_1", "throughput_2", "tp_ratio", "speedup_1", "speedup_2",
                        "speedup_ratio", "speed_verdict_1", "speed_verdict_2", "speedup_rounds_1", "speedup_rounds_2"]]
          .to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    within = (joined.tp_ratio - 1).abs() <= 0.05
    paired = joined[joined.backend != "fp32"]
    speed_within = (paired.speedup_ratio - 1).abs() <= 0.05
    print()
    print(f"AUC identical in {int(joined.auc_equal.sum())}/{len(joined)} rows")
    print(f"throughput medians within 5% in {int(within.sum())}/{len(joined)} rows; median |change| {((joined.tp_ratio - 1).abs().median() * 100):.1f}%")
    print(f"speedups within 5% in {int(speed_within.sum())}/{len(paired)} non-fp32 rows; median |change| "
          f"{((paired.speedup_ratio - 1).abs().median() * 100):.1f}%, largest {((paired.speedup_ratio - 1).abs().max() * 100):.1f}%")
    for tag, df in (("warm 1", a), ("warm 2", b)):
        rows = df[(df.status == "ok") & (df.backend != "fp32")]
        undecided = rows[rows.speed_verdict == "inconclusive"]
        widths = ", ".join(f"{r.backend}@{r.batch_size} {r.speedup:.2f}x [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}] "
                           f"(width {(r.speedup_hi - r.speedup_lo) / r.speedup:.1%})" for r in undecided.itertuples())
        print(f"{tag}: {len(undecided)}/{len(rows)} non-fp32 rows inconclusive" + (f": {widths}" if widths else ""))
    setting = a.timing_setting.dropna().unique() if "timing_setting" in a else []
    print(f"timing setting: {', '.join(setting) or 'not recorded'}")


if __name__ == "__main__":
    main()
