"""One `python -m bench` sweep in a subprocess, for the benchmark scripts beside this file."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]


def quant_sweep(workdir: Path, tag: str, overrides: list[str]) -> tuple[float, pd.DataFrame]:
    """`+sweep=quant` with `overrides` on `workdir`'s shared cache; (wall seconds, its results table)."""
    reports = workdir / f"reports_{tag}"
    cmd = [sys.executable, "-m", "bench", "+sweep=quant", f"cache_dir={workdir / 'cache'}", f"reports_dir={reports}",
           f"hydra.sweep.dir={workdir / ('multirun_' + tag)}", *overrides]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sweep {tag} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    report = re.search(r"^report: (.+)/report.md$", done.stdout, re.M).group(1)  # latest, or latest-<overrides>
    return wall, pd.read_csv(Path(report) / "results.csv")


def stored_sweep(workdir: Path, tag: str) -> pd.DataFrame:
    """The results table of a sweep an earlier script left in `workdir` under `tag`."""
    found = sorted((workdir / f"reports_{tag}").glob("quant/*/results.csv"))
    if not found:
        sys.exit(f"no sweep {tag!r} in {workdir}: run it first (e.g. sweep_bench.py --workdir {workdir})")
    return pd.read_csv(found[-1])
