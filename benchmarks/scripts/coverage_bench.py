"""Do the speedup intervals hold across processes? Three independent warm default sweeps, cross-checked.

Runs `python -m bench +sweep=quant` once to fill the cache (skipped with --warm when the cache is
already filled), then three times warm, each in its own process. For every non-fp32 row and every
ordered pair of sweeps (a, b), it checks whether sweep a's point speedup lies inside sweep b's 95%
interval: 18 rows x 6 pairs = 108 cases. If each interval were a correct 95% interval for what a
re-run measures, two independent estimates of equal spread would agree this way in about 83% of
cases (P(|Z| < 1.96 / sqrt(2))); far below means the intervals leave out variation that re-runs
see, far above means they are wider than they need be. The median interval width says which.

    python benchmarks/scripts/coverage_bench.py [--workdir DIR] [--warm] [--reuse TAG ...] [extra overrides...]

`--reuse warm1 warm2` counts the two warm sweeps `sweep_bench.py --workdir DIR` left there as the
first two of the three (they are independent warm sweeps of the same code too).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import pandas as pd
from sweep_runs import quant_sweep, stored_sweep

KEY = ["backend", "batch_size"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--warm", action="store_true", help="the cache in --workdir is already filled: no cold sweep")
    parser.add_argument("--sweeps", type=int, default=3)
    parser.add_argument("--reuse", nargs="*", default=[], help="tags of warm sweeps already in --workdir, counted first")
    args, extra = parser.parse_known_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-coverage-"))
    if not args.warm and not args.reuse:
        cold, _ = quant_sweep(workdir, "cold", extra)
        print(f"cold sweep {cold:.0f} s (fills the cache)")
    runs = []

    def add(df: pd.DataFrame, what: str) -> None:
        rows = df[(df.status == "ok") & (df.backend != "fp32") & df.speedup_lo.notna()].set_index(KEY)
        runs.append(rows)
        print(f"warm sweep {len(runs)}: {what}, {len(rows)} non-fp32 rows")

    for tag in args.reuse:
        add(stored_sweep(workdir, tag), f"{tag!r}, run earlier")
    for i in range(len(args.reuse), args.sweeps):
        wall, df = quant_sweep(workdir, f"coverage{i + 1}", extra)
        add(df, f"{wall:.0f} s")

    keys = sorted(set.intersection(*(set(r.index) for r in runs)))
    table, inside = [], 0
    for key in keys:
        cells = {f"speedup_{i + 1}": f"{r.at[key, 'speedup']:.3f} [{r.at[key, 'speedup_lo']:.3f}, {r.at[key, 'speedup_hi']:.3f}]"
                 for i, r in enumerate(runs)}
        hits = 0
        for a, b in itertools.permutations(range(len(runs)), 2):
            point, lo, hi = (runs[a].at[key, "speedup"], runs[b].at[key, "speedup_lo"], runs[b].at[key, "speedup_hi"])
            hits += bool(lo <= point <= hi)
        inside += hits
        table.append({"backend": key[0], "batch_size": key[1], **cells, "inside": f"{hits}/{len(runs) * (len(runs) - 1)}"})
    widths = pd.concat([(r.speedup_hi - r.speedup_lo) / r.speedup for r in runs])
    cases = len(keys) * len(runs) * (len(runs) - 1)
    pd.set_option("display.width", 250)
    print(f"\nworkdir {workdir}\n")
    print(pd.DataFrame(table).to_string(index=False))
    print(f"\npoint inside the other sweep's 95% interval: {inside}/{cases} (row, pair) cases, {inside / max(cases, 1):.0%} "
          f"(about 83% for correct intervals)")
    print(f"interval width / speedup: median {widths.median():.1%}, largest {widths.max():.1%} over {len(widths)} intervals")


if __name__ == "__main__":
    main()
