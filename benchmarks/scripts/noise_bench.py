"""Do speed figures hold on a busy machine? A reduced sweep quiet, then with one core kept busy.

Runs `python -m bench +sweep=quant` over fp32, int8_tbe, uint4 and fp16_tbe at batch 1024 and
4096 on CPU three times in subprocesses on one cache: a warm-up (trains the model, fills the
caches), a quiet run, and a loaded run during which this script keeps one core busy with a
bounded background process (a spin loop it starts before and stops after the sweep). Prints both
tables, then checks every row: the loaded speedup is within 10% of the quiet one, or the loaded
row does not claim it (its speed verdict is inconclusive: the interval cannot decide). The
absolute throughput's own flag (`stable`) is shown beside it.

    python benchmarks/scripts/noise_bench.py [--workdir DIR] [--load-procs 1] [extra overrides...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from sweep_runs import quant_sweep

SWEEP = ["backend=fp32,int8_tbe,uint4,fp16_tbe", "batch_size=1024,4096", "device=cpu"]  # on +sweep=quant
KEY = ["backend", "batch_size"]
SHOW = KEY + ["throughput", "speedup", "speedup_lo", "speedup_hi", "speed_verdict", "speedup_rounds", "stable", "trial_cv",
              "ratio_spread", "load_avg"]
SPIN = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def sweep(workdir: Path, tag: str, extra: list[str]) -> tuple[float, pd.DataFrame]:
    return quant_sweep(workdir, tag, [*SWEEP, *extra])


def loaded_sweep(workdir: Path, extra: list[str], procs: int, limit_s: float) -> tuple[float, pd.DataFrame]:
    """The sweep while `procs` spin loops run; each stops by itself after `limit_s` and is killed after the sweep."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN, str(limit_s)]) for _ in range(procs)]
    try:
        return sweep(workdir, "loaded", extra)
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--load-procs", type=int, default=1, help="busy processes during the loaded run (default 1: one core)")
    parser.add_argument("--load-limit", type=float, default=900.0, help="seconds after which a busy process stops by itself")
    args, extra = parser.parse_known_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-noise-"))

    warm, _ = sweep(workdir, "warmup", extra)
    quiet_s, quiet = sweep(workdir, "quiet", extra)
    loaded_s, loaded = loaded_sweep(workdir, extra, args.load_procs, args.load_limit)
    pd.set_option("display.width", 200)
    fmt = lambda x: f"{x:.4g}"  # noqa: E731
    print(f"workdir {workdir}; warm-up {warm:.0f} s, quiet {quiet_s:.0f} s, loaded {loaded_s:.0f} s ({args.load_procs} busy process(es))")
    print("\nquiet:\n" + quiet[quiet.status == "ok"][SHOW].to_string(index=False, float_format=fmt))
    print("\nloaded:\n" + loaded[loaded.status == "ok"][SHOW].to_string(index=False, float_format=fmt))

    joined = quiet.merge(loaded, on=KEY, suffixes=("_quiet", "_loaded")).copy()  # a defragmented frame for the columns added below
    joined = joined[(joined.backend != "fp32") & (joined.status_quiet == "ok") & (joined.status_loaded == "ok")]
    joined["speedup_change"] = joined.speedup_loaded / joined.speedup_quiet - 1
    joined["within_10pct"] = joined.speedup_change.abs() <= 0.10
    joined["flagged"] = joined.speed_verdict_loaded == "inconclusive"  # the loaded interval does not claim a verdict
    joined["holds"] = joined.within_10pct | joined.flagged
    print("\nloaded vs quiet:\n" + joined[KEY + ["speedup_quiet", "speedup_loaded", "speedup_change", "within_10pct",
                                                "speed_verdict_loaded", "flagged", "holds"]].to_string(index=False, float_format=fmt))
    print(f"\n{int(joined.holds.sum())}/{len(joined)} rows hold (loaded speedup within 10% of quiet, or its verdict inconclusive); "
          f"{int(joined.within_10pct.sum())} within 10%, {int(joined.flagged.sum())} flagged (inconclusive), "
          f"{int((~joined.flagged).sum())} not flagged; absolute throughput flagged unsteady in "
          f"{int((joined.stable_loaded == False).sum())} loaded rows")  # noqa: E712


if __name__ == "__main__":
    main()
