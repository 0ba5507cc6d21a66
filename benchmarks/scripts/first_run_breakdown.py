"""Where a new user's first default sweep spends its time: a cold sweep on a fresh cache, then a warm one on it.

For each sweep it prints the wall time, then: start-up to job 0 (the command to Hydra's launch of job 0), each
once-per-machine step (calibration, training, roofline, kernel probe: the seconds `bench.progress` counted, from the
sweep's closing line), the jobs (job 0's launch to the sweep's end, less those steps), the report after them, and the
first-run estimate printed before the wait beside what the steps it names then took (their ratio should be within
1.5x). Each sweep's output, every line stamped with its second, is kept in `<workdir>/cold.log` and `warm.log`.
The lead runs it on an idle machine for the README's figures; the machine's CPU model and ISA head the output.

    python benchmarks/scripts/first_run_breakdown.py [--workdir DIR] [overrides...]
    python benchmarks/scripts/first_run_breakdown.py --short      # a two-backend tiny sweep: seconds, for the tests

Exit 1 when a sweep fails.
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHORT = ["+preset=tiny", "backend=fp32,int8_tbe", "batch_size=256", "device=cpu", "timing.calibrate=false", "kernel_health=false"]
STEPS = ("calibration", "training", "roofline", "kernel probe")
ESTIMATE = re.compile(r"first run on this machine: about (\d+) s more for ([a-z ]+?) \(cached after\)")
ONCE = re.compile(r"of it once per machine: ([^)]*)\)")


def seconds(words: str) -> float:
    """`2 min 5 s` (bench.progress.duration) in seconds."""
    units = {"h": 3600, "min": 60, "s": 1}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+) (h|min|s)\b", words)))


def machine() -> str:
    """The CPU model and its widest vector ISA, as the README states them beside its figures."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    isa = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "no AVX2"
    cores = len([line for line in flags.splitlines() if line.startswith("processor")])
    return f"{model}, {isa}, {cores} cores"


def sweep(workdir: Path, tag: str, overrides: list[str]) -> dict:
    """Run `+sweep=quant` on `workdir`'s cache; each output line stamped with the seconds since the command."""
    cmd = [sys.executable, "-m", "bench", "+sweep=quant", f"cache_dir={workdir / 'cache'}", f"reports_dir={workdir / ('reports_' + tag)}",
           f"hydra.sweep.dir={workdir / ('multirun_' + tag)}", *overrides]
    start = time.perf_counter()
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append((time.perf_counter() - start, line.rstrip("\n")))
    wall = time.perf_counter() - start
    (workdir / f"{tag}.log").write_text("".join(f"{at:8.1f} {text}\n" for at, text in lines))  # each line at its second
    if proc.returncode not in (0, 1):  # 1: a job errored, the sweep still ended
        sys.exit(f"sweep {tag} failed ({proc.returncode}):\n" + "\n".join(text for _, text in lines[-30:]))
    job0 = next((at for at, text in lines if "#0 :" in text), None)
    once: dict[str, float] = {}
    for _, text in lines:  # the last line that names them holds every step of the sweep
        m = ONCE.search(text)
        if m:
            once = dict(step_seconds(part) for part in _parts(m.group(1)))
    last_job = max((at for at, text in lines if "sweep:" in text), default=wall)
    estimate = next(((float(m.group(1)), m.group(2).split(" and ")) for _, text in lines if (m := ESTIMATE.search(text))), None)
    return {"wall": wall, "job0": job0, "once": once, "last_job": last_job, "estimate": estimate}


def _parts(words: str) -> list[str]:
    """`calibration 2 min, training 1 min 50 s` -> ['calibration 2 min', 'training 1 min 50 s']."""
    return [p.strip() for p in words.split(",") if p.strip()]


def step_seconds(part: str) -> tuple[str, float]:
    """`training 1 min 50 s` -> ('training', 110.0)."""
    name = next((s for s in STEPS if part.startswith(s)), part.split(" ")[0])
    return name, seconds(part[len(name):])


def report(tag: str, run: dict) -> list[str]:
    once = run["once"]
    lines = [f"{tag}: {run['wall']:.1f} s in all"]
    lines.append(f"  start-up to job 0: {run['job0']:.1f} s" if run["job0"] is not None else "  start-up to job 0: no job launched")
    for name in STEPS:
        lines.append(f"  {name}: {once[name]:.0f} s" if name in once else f"  {name}: none (cached, or not run)")
    if run["job0"] is not None:
        jobs = run["last_job"] - run["job0"] - sum(once.values())
        lines.append(f"  jobs: {max(jobs, 0.0):.0f} s (job 0's launch to the sweep's last progress line, less the steps above)")
        lines.append(f"  report and exit: {run['wall'] - run['last_job']:.1f} s")
    if run["estimate"] is not None:
        said, names = run["estimate"]
        took = sum(once.get(n, 0.0) for n in names)
        ratio = f"{said / took:.2f}x" if took else "n/a"
        lines.append(f"  estimate before the wait: {said:.0f} s for {' and '.join(names)}; they took {took:.0f} s (estimate/actual {ratio})")
    else:
        lines.append("  estimate before the wait: none printed")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--short", action="store_true", help="a two-backend tiny sweep without calibration (seconds)")
    args, extra = parser.parse_known_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-first-run-"))
    shutil.rmtree(workdir / "cache", ignore_errors=True)  # cold: nothing cached
    overrides = [*SHORT, *extra] if args.short else extra
    print(f"machine: {machine()}; workdir {workdir}; overrides: {' '.join(overrides) or 'none'}")
    for tag in ("cold", "warm"):
        run = sweep(workdir, tag, overrides)
        print("\n".join(report(tag, run)), flush=True)


if __name__ == "__main__":
    main()
