"""Two identical `resume=true` sweeps started at the same moment, N times: records per job each time.

Each round gets a fresh reports folder (the trained model's cache is shared, so a round measures
but does not train) and starts two `python -m bench +sweep=nightly ... resume=true` processes
together. Resume claims a job under the store's lock until its record is stored, so the second
sweep finds the first one's record instead of measuring the job again: every job must have exactly
one record in the store, every round.

    python benchmarks/scripts/concurrent_resume.py [--rounds 10] [--workdir DIR] [extra overrides...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.store import read_store  # noqa: E402

TINY = [
    "backend=fp32,fake_quant,int8_tbe,uint4", "workload.cardinalities=[100,50,30,20]", "workload.train_samples=4096",
    "workload.eval_samples=2048", "workload.calibration_samples=1024", "model.train.samples=4096", "model.train.batch_size=1024",
    "model.train.progress=false", "eval_batch_size=1024", "calibration_batch_size=1024", "batch_size=256", "timing.warmup_batches=1",
    "timing.trials=2", "timing.max_rounds=2", "timing.batches_per_trial=2", "timing.min_trial_seconds=0",
]  # fmt: skip


def sweep(workdir: Path, reports: Path, extra: list[str]) -> subprocess.Popen:
    args = [sys.executable, "-m", "bench", "+sweep=nightly", *TINY, f"reports_dir={reports}", f"cache_dir={workdir / 'cache'}",
            "resume=true", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(args, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workdir", type=Path, default=None)
    args, extra = parser.parse_known_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-concurrent-"))
    workdir.mkdir(parents=True, exist_ok=True)  # a --workdir that does not exist yet
    warm = sweep(workdir, workdir / "warm-up", extra)  # trains the model once, outside the rounds
    if warm.wait() != 0:
        sys.exit(f"warm-up sweep failed: {warm.stderr.read()[-2000:]}")
    print(f"workdir {workdir}")
    print("round  exit codes  jobs  records  most records of one job  seconds")
    clean = 0
    for n in range(1, args.rounds + 1):
        reports = workdir / f"round-{n}"
        t0 = time.perf_counter()
        procs = [sweep(workdir, reports, extra) for _ in range(2)]
        codes = [p.wait() for p in procs]
        seconds = time.perf_counter() - t0
        records = read_store(reports / "records.jsonl").records
        per_job = Counter(r.config_hash for r in records)
        worst = max(per_job.values(), default=0)
        clean += codes == [0, 0] and worst == 1
        print(f"{n:5d}  {str(codes):10s}  {len(per_job):4d}  {len(records):7d}  {worst:23d}  {seconds:7.1f}")
    print(f"{clean} of {args.rounds} rounds left exactly one record per job")
    sys.exit(0 if clean == args.rounds else 1)


if __name__ == "__main__":
    main()
