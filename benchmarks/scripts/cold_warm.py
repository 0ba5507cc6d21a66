"""A cold default sweep and a warm one right after it: their wall times, and whether their verdicts agree.

The cold sweep starts on an empty cache (`--workdir`'s, made fresh), so it calibrates the timing,
trains the default model and probes the kernels before its jobs; the warm sweep reuses all three.
Every row both ran ok is compared: its speed verdict (`speed_verdict`) and its ΔAUC verdict
(`auc_verdict`) must be the same in both, and the fp32 AUC is printed for each.

    python benchmarks/scripts/cold_warm.py --workdir DIR [overrides...]
    python benchmarks/scripts/cold_warm.py --compare COLD_RESULTS_CSV WARM_RESULTS_CSV

Exit 1 when a verdict flipped. `python -m bench.report <cold report> --baseline <warm report>` writes
the row-by-row comparison of the same two sweeps beside them.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd
from sweep_runs import quant_sweep

KEY = ["backend", "device", "batch_size"]
VERDICTS = ["speed_verdict", "auc_verdict"]


def flips(cold: pd.DataFrame, warm: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(the rows whose speed or ΔAUC verdict differs between the sweeps, the rows compared)."""
    ok = [df[df.status == "ok"].set_index(KEY)[VERDICTS + ["auc"]] for df in (cold, warm)]
    both = ok[0].merge(ok[1], left_index=True, right_index=True, suffixes=("_cold", "_warm"))
    differ = pd.Series(False, index=both.index)
    for v in VERDICTS:
        differ |= both[f"{v}_cold"].fillna("") != both[f"{v}_warm"].fillna("")
    return both[differ], len(both)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("COLD_CSV", "WARM_CSV"))
    args, extra = parser.parse_known_args()
    if args.compare:
        cold, warm = (pd.read_csv(p) for p in args.compare)
    else:
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-cold-warm-"))
        shutil.rmtree(workdir / "cache", ignore_errors=True)  # cold: nothing cached
        cold_s, cold = quant_sweep(workdir, "cold", extra)
        warm_s, warm = quant_sweep(workdir, "warm", extra)
        print(f"cold sweep {cold_s:.0f} s, warm sweep {warm_s:.0f} s ({workdir})")
    fp32 = [df[(df.backend == "fp32") & (df.status == "ok")].auc.dropna() for df in (cold, warm)]
    print("fp32 AUC: cold " + ", ".join(f"{a:.4f}" for a in fp32[0].unique()) + "; warm " + ", ".join(f"{a:.4f}" for a in fp32[1].unique()))
    flipped, compared = flips(cold, warm)
    print(f"{compared} rows ok in both; {len(flipped)} with a speed or ΔAUC verdict that differs")
    if len(flipped):
        print(flipped.to_string())
        sys.exit(1)


if __name__ == "__main__":
    main()
