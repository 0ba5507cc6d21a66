"""Where one sweep job's wall time goes, phase by phase: from Hydra composing the job's config to its record written.

Two ways, both on a warm cache (run a sweep once first, or pass `--cold-first`):

    python benchmarks/scripts/job_breakdown.py --phases [overrides...]   # in-process, each phase timed
    python benchmarks/scripts/job_breakdown.py --plain [overrides...]    # `python -m bench` as users run it

`--phases` runs `bench.cli.run` in this process with wall-clock timers wrapped around the steps of a job
(this script's own wrappers: nothing in the product is changed). A phase's seconds are its own, less the
phases nested inside it, so they add up to the job's wall time, and `other` is what no phase covers. It
prints, per phase, the seconds of each backend's jobs together and of all CPU jobs, then the median job.

`--plain` runs the command in a subprocess and reads each job's seconds from the gaps between Hydra's
launch lines (`#N : ...`, stamped to the millisecond), so nothing is instrumented. It prints every CPU
job's seconds, their median and sum, the skipped (CUDA) jobs' sum, the wall time, the load average before
and after, and writes the sweep's results.csv path (compare two runs' verdicts with `--compare A B`).

    python benchmarks/scripts/job_breakdown.py --compare RESULTS_A.csv RESULTS_B.csv   # same verdicts?

The defaults: `+sweep=quant`, a private cache (`--cache DIR`, default /tmp/bench-job-breakdown/cache) and
report folder. Exit 1 when the sweep fails or two compared runs' verdicts differ.
"""

from __future__ import annotations

import argparse
import csv
import functools
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAUNCH = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[HYDRA\] \t#(\d+) : (.*)$")
# The columns of results.csv a cut of the jobs' fixed costs must leave exactly as they were: the verdicts read
# from nothing timed, and the untimed figures behind them (accuracy, bytes, what the timing pool touched)
PROGRESS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[bench.progress\]\[INFO\] - sweep: \d+/\d+ job")
RUN_JOB = "hydra: job folder, config files, logging"
UNTIMED = ("status", "auc_verdict", "budget_verdict", "auc", "auc_delta", "auc_delta_lo", "auc_delta_hi", "auc_delta_p",
           "ne_delta", "ne_delta_lo", "ne_delta_hi", "acc_delta", "acc_delta_lo", "acc_delta_hi", "auc_fp32", "fidelity_gap",
           "fidelity_gap_lo", "fidelity_gap_hi", "auc_delta_embeddings", "auc_delta_embeddings_lo", "auc_delta_embeddings_hi",
           "auc_delta_mlp", "auc_delta_mlp_lo", "auc_delta_mlp_hi", "n_eval", "logloss", "ne", "acc", "distinct_scores",
           "embedding_bytes", "model_bytes", "compression", "pool_batches", "pool_samples", "unique_ids_per_batch",
           "rows_touched", "working_set_bytes", "timing_setting")
# The timed verdicts: two runs apart only by noise may differ here (a speedup near a verdict's edge), so they are
# counted apart, and a gain/loss flip (faster in one run, slower in the other) is named
TIMED = ("speed_verdict",)


def base_args(args) -> list[str]:
    work = Path(args.workdir)
    return ["+sweep=quant", f"cache_dir={args.cache or work / 'cache'}", f"reports_dir={work / 'reports'}",
            f"hydra.sweep.dir={work / 'multirun'}/{int(time.time() * 1000)}"]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------------------------------- --plain

def plain(args, extra: list[str]) -> dict:
    """The sweep as users run it; each job's seconds from Hydra's launch lines."""
    cmd = [sys.executable, "-m", "bench", *base_args(args), *extra]
    before = load()
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    lines = (out.stdout + out.stderr).splitlines()
    if out.returncode not in (0, 1):
        sys.exit(f"the sweep failed ({out.returncode}):\n" + "\n".join(lines[-30:]))
    report = next((line.split("report: ", 1)[1].strip() for line in lines if line.startswith("report: ")), None)
    if report is None:
        sys.exit("no `report:` line: the sweep did not finish\n" + "\n".join(lines[-30:]))
    jobs = job_seconds(lines)
    cpu = [s for words, s in jobs if "device=cpu" in words]
    other = [s for words, s in jobs if "device=cpu" not in words]
    return {"wall": wall, "jobs": jobs, "cpu": cpu, "other": other, "load": (before, load()),
            "results": str(Path(report).parent / "results.csv")}


def job_seconds(lines: list[str]) -> list[tuple[str, float]]:
    """(the job's overrides, its seconds) for each job of a sweep's output: from Hydra's launch line of the job to
    the next one's, the last to the sweep's last progress line (`sweep: 42/42 job ...`, printed as a job ends)."""
    stamp = lambda m: datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # noqa: E731
    launches = [(stamp(m), m.group(3)) for line in lines if (m := LAUNCH.match(line))]
    if not launches:
        return []
    end = max((stamp(m) for line in lines if (m := PROGRESS.match(line))), default=launches[-1][0])
    bounds = [at for at, _ in launches[1:]] + [end]
    return [(words.split(" +sweep")[0], nxt - at) for (at, words), nxt in zip(launches, bounds)]


def print_plain(run: dict) -> None:
    print(f"wall {run['wall']:.1f} s; load average before {run['load'][0]}, after {run['load'][1]}")
    for words, s in run["jobs"]:
        if "device=cpu" in words:
            print(f"  {s:6.2f} s  {words}")
    cpu = run["cpu"]
    print(f"CPU jobs: {len(cpu)}, median {statistics.median(cpu):.2f} s, sum {sum(cpu):.1f} s; "
          f"other (skipped) jobs: {len(run['other'])}, sum {sum(run['other']):.1f} s")
    print(f"results: {run['results']}")


# ------------------------------------------------------------------------------------------ --compare

def rows(path: str, columns: tuple[str, ...]) -> dict[tuple, dict]:
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    return {(r["workload"], r["backend"], r["device"], r["batch_size"]): {k: r.get(k) for k in columns} for r in table}


def compare(a: str, b: str) -> int:
    """Exit 1 when an untimed figure or verdict differs; timed verdicts that differ are listed, a gain/loss flip named."""
    ua, ub = rows(a, UNTIMED), rows(b, UNTIMED)
    differ = [(job, ua.get(job), ub.get(job)) for job in sorted(set(ua) | set(ub)) if ua.get(job) != ub.get(job)]
    print(f"{len(ua)} and {len(ub)} rows; untimed columns compared: {len(UNTIMED)} ({', '.join(UNTIMED[:3])}, ...)")
    for job, x, y in differ:
        changed = {k: (x or {}).get(k) for k in UNTIMED if (x or {}).get(k) != (y or {}).get(k)}
        print(f"  untimed differs: {' '.join(job)}: " + ", ".join(f"{k} {v} -> {(y or {}).get(k)}" for k, v in changed.items()))
    ta, tb = rows(a, TIMED + ("speedup", "speedup_lo", "speedup_hi")), rows(b, TIMED + ("speedup", "speedup_lo", "speedup_hi"))
    flips = 0
    for job in sorted(set(ta) & set(tb)):
        x, y = ta[job], tb[job]
        if x["speed_verdict"] != y["speed_verdict"]:
            flip = {x["speed_verdict"], y["speed_verdict"]} >= {"gain", "loss"} or _side(x) * _side(y) < 0
            flips += flip
            print(f"  speed verdict differs{' (a gain/loss flip)' if flip else ''}: {' '.join(job)}: "
                  f"{x['speed_verdict']} {x['speedup']} [{x['speedup_lo']}, {x['speedup_hi']}] -> "
                  f"{y['speed_verdict']} {y['speedup']} [{y['speedup_lo']}, {y['speedup_hi']}]")
    print(("untimed figures and verdicts identical" if not differ else f"{len(differ)} rows differ in untimed figures")
          + f"; gain/loss flips: {flips}")
    return 1 if differ or flips else 0


def _side(row: dict) -> int:
    """+1: the speedup's interval lies above 1 (a gain), -1: below (a loss), 0: it spans 1 or there is none."""
    try:
        lo, hi = float(row["speedup_lo"]), float(row["speedup_hi"])
    except (TypeError, ValueError):
        return 0
    return 1 if lo > 1 else -1 if hi < 1 else 0


# ------------------------------------------------------------------------------------------- --phases

class Phases:
    """Exclusive wall seconds per phase and job: a phase's time less the phases nested inside it."""

    def __init__(self) -> None:
        self.stack: list[list] = []  # [name, start, nested seconds]
        self.jobs: list[dict] = []  # {"job": words, "start": t, "end": t, "phases": {name: s}}

    def wrap(self, owner, attr: str, name: str) -> None:
        original = getattr(owner, attr)
        phases = self

        @functools.wraps(original)
        def timed(*a, **kw):
            phases.stack.append([name, time.perf_counter(), 0.0])
            try:
                return original(*a, **kw)
            finally:
                entry = phases.stack.pop()
                now = time.perf_counter()
                spent = now - entry[1]
                if name == RUN_JOB:
                    phases.job_returned = now
                if phases.stack:
                    phases.stack[-1][2] += spent
                if phases.jobs:
                    own = phases.jobs[-1]["phases"]
                    own[name] = own.get(name, 0.0) + spent - entry[2]

        setattr(owner, attr, staticmethod(timed) if isinstance(owner.__dict__.get(attr), staticmethod) else timed)

    def new_job(self, words: str) -> None:
        now = time.perf_counter()
        if self.jobs:  # the launcher's own steps between two jobs count to the one before
            self.jobs[-1]["end"] = now
        self.jobs.append({"job": words, "start": now, "end": None, "phases": {}})


def install(phases: Phases) -> None:
    """Timers around each step of a job, where the product calls it."""
    from hydra._internal import config_loader_impl
    from hydra.core import utils as hydra_utils

    from bench import cli, runner, sweep
    from bench.backends import backend, toolkit
    from bench.pipeline import job, profile, shared

    loader = config_loader_impl.ConfigLoaderImpl
    original_load = loader.load_sweep_config

    def load_sweep_config(self, master_config, sweep_overrides):  # a new job starts where Hydra composes its config
        phases.new_job(" ".join(sweep_overrides))
        return original_load(self, master_config, sweep_overrides)

    loader.load_sweep_config = load_sweep_config
    # (owner, attribute, phase): every step of a job the timers wrap, where the product calls it
    steps = [
        (loader, "load_sweep_config", "hydra: compose the job's config"),
        # Hydra's plug-in scan imports the launcher's module anew, which then takes this wrapped run_job
        (hydra_utils, "run_job", RUN_JOB),
        (cli, "to_config", "config: typed and validated"),
        (runner, "run_job", "job: the rest (backend factory, skip checks)"),
        (runner, "_close", "backend close()"),
        (runner, "check_values", "config: typed and validated"),
        (runner, "device_of", "device and threads"),
        (runner, "_timing_setting", "timing setting (calibration, re-run log)"),
        (runner, "memory_skip", "memory guard"),
        (runner, "environment", "environment and kernel health"),
        (runner.Session, "kernel_health", "environment and kernel health"),
        (runner, "_log_rerun", "re-run log"),
        (shared.SharedWork, "workload", "workload"),
        (shared.SharedWork, "model", "model: load from cache"),
        (shared.SharedWork, "release_leftovers", "release leftovers (gc)"),
        (shared.SharedWork, "prepared", "backend prepare (quantize)"),
        (shared.SharedWork, "reference", "fp32 reference module"),
        (shared.SharedWork, "split_batches", "eval/calibration batches"),
        (shared.SharedWork, "timing_inputs", "timing inputs (pool)"),
        (shared.SharedWork, "timing_access", "access profile of the pool"),
        # a toolkit converts the pool to its runtime's inputs
        (backend.Backend, "timed_inputs", "the candidate's own input format"),
        (toolkit.ToolkitBackend, "timed_inputs", "the candidate's own input format"),
        (job, "_scores", "eval scores (cache or scored now)"),
        (job, "reference_speed", "machine speed probe (start, end)"),
        (job, "time_paired", "timed rounds"),
        (job, "time_module", "timed rounds"),
        (job, "_accuracy", "accuracy: ΔAUC, ΔNE, fidelity"),
        (job, "attribute_delta", "ΔAUC attribution"),
        (job, "_layers", "layer attribution"),
        (job, "job_profile", "profile: roofline figures"),
        (profile, "operators", "profile: operators of one call"),
        (profile, "lookup_timing", "profile: lookups timed alone"),
        (cli, "save_record", "record write"),
        (sweep.SweepCallback, "on_job_end", "sweep: progress line"),
    ]
    for owner, attr, label in steps:
        phases.wrap(owner, attr, label)


def run_phases(args, extra: list[str]) -> Phases:
    phases = Phases()
    install(phases)
    from bench import cli

    before = load()
    start = time.perf_counter()
    code = 0
    sys.argv = [sys.argv[0], *base_args(args), *extra]  # what hydra.main parses
    try:
        code = cli.run(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    if phases.jobs:  # the last job ends where Hydra's run_job returned, before the sweep's report
        phases.jobs[-1]["end"] = phases.job_returned or time.perf_counter()
    print(f"wall {time.perf_counter() - start:.1f} s (exit {code}); load average before {before}, after {load()}")
    return phases


def print_phases(phases: Phases) -> None:
    cpu = [j for j in phases.jobs if "device=cpu" in j["job"]]
    if not cpu:
        print("no CPU job ran")
        return
    for j in cpu:
        j["wall"] = j["end"] - j["start"]
        j["phases"]["other"] = j["wall"] - sum(j["phases"].values())
    by_backend: dict[str, list[dict]] = defaultdict(list)
    for j in cpu:
        by_backend[re.search(r"backend=(\S+)", j["job"]).group(1)].append(j)
    names = list(dict.fromkeys(n for j in cpu for n in j["phases"]))
    width = max(len(n) for n in names) + 2
    print(f"seconds per phase: each backend's jobs together (its batch sizes), and all {len(cpu)} CPU jobs")
    print(f"{'phase':<{width}}" + "".join(f"{b[:12]:>13}" for b in by_backend) + f"{'all jobs':>11}")
    for name in names + ["wall"]:
        cells = "".join(f"{sum(_get(j, name) for j in jobs):13.2f}" for jobs in by_backend.values())
        print(f"{name:<{width}}{cells}{sum(_get(j, name) for j in cpu):11.2f}")
    walls = [j["wall"] for j in cpu]
    print(f"CPU jobs: median {statistics.median(walls):.2f} s, sum {sum(walls):.1f} s; outside the timed rounds: median "
          f"{statistics.median(j['wall'] - _get(j, 'timed rounds') for j in cpu):.2f} s, "
          f"sum {sum(j['wall'] - _get(j, 'timed rounds') for j in cpu):.1f} s")
    rest = [j for j in phases.jobs if "device=cpu" not in j["job"] and j["end"] is not None]
    if rest:
        print(f"other (skipped) jobs: {len(rest)}, sum {sum(j['end'] - j['start'] for j in rest):.2f} s")


def _get(job: dict, name: str) -> float:
    return job["wall"] if name == "wall" else job["phases"].get(name, 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--phases", action="store_true", help="in-process, each phase of each job timed")
    mode.add_argument("--plain", action="store_true", help="the command as users run it; jobs from Hydra's launch lines")
    mode.add_argument("--compare", nargs=2, metavar="RESULTS_CSV", help="do two runs' results.csv hold the same verdicts?")
    parser.add_argument("--workdir", default="/tmp/bench-job-breakdown")
    parser.add_argument("--cache", default=None, help="cache_dir (default: WORKDIR/cache)")
    parser.add_argument("--cold-first", action="store_true", help="run the sweep once first, to warm the cache")
    args, extra = parser.parse_known_args()
    if args.compare:
        return compare(*args.compare)
    if args.cold_first:
        print("warming the cache: one sweep first")
        plain(args, extra)
    if args.plain:
        print_plain(plain(args, extra))
    else:
        print_phases(run_phases(args, extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
