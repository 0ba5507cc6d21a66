"""What re-runs of identical jobs on this machine measured: the spread between runs that a paired
speedup's interval has to cover, learned as the machine is used.

The timing calibration (`bench.pipeline.calibrate`) estimates the spread between processes from a
handful of probe processes: an estimate with few degrees of freedom, of a probe pair that is not the
user's. Every paired job measured again later (a nightly, a second sweep: the same job, the same
timing setting, the same code, on the same machine and stack) is a direct sample of exactly the
variation an interval claims to cover. So each such job appends one line to
`<cache_dir>/timing/<machine>-reruns.jsonl` (beside the calibration, through the store's locked
appender), and the between-run standard deviation of log(speedup) is estimated from the jobs found
there at least twice, and only from like runs: a line is keyed by the job, the code, the timing
setting and the kernel path it ran on (`kernels`: FBGEMM's instruction set, what the cpuinfo fix
did, and the environment variables that FBGEMM, OpenMP and the BLAS read), so a re-run on FBGEMM's
reference kernels never widens the interval of one on its JIT kernels. The spread is estimated
robustly: from the successive differences of each job's recent speedups (log scale), whose median
absolute value estimates sqrt(2) sd for normal data (median |d| = 0.6745 sqrt(2) sd), less what the
rounds explain; one outlying re-run moves at most two differences, so it cannot widen every job's
interval. It is pooled per batch size where enough re-runs are there, over every batch size
otherwise, and combined with the calibration's estimate in proportion to the degrees of freedom
behind each. `python -m bench timing show` lists the log, `python -m bench timing reset` empties it.

A paired Server job (`bench.serve.paired`) joins the same log with its own setting (`SERVED`): the log of
its QPS ratio to fp32 in `log_speedup`, and the standard error its rounds give that log ratio in `round_se`.
Its interval carries `serve.rerun_spread`, a run-to-run spread measured between four sweeps on one quiet
machine (`SERVE_PRIOR_DF` degrees of freedom), weighed with what re-runs of paired jobs on this machine
measured (`serve_spread`): on a host whose speed moves over tens of minutes, two runs of one job an hour
apart differ by far more than 0.03, and after a few re-runs the interval says so.

A job's record says which estimate its interval carried and how many re-runs stand behind it; a
stored interval is never recomputed (`docs/measuring.md`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from bench.io import append_jsonl, read_jsonl

VERSION = 2  # 2: keyed by the kernel path (`kernels`); version 1 lines do not say theirs and are not read
MAD_NORMAL = 0.6745  # median |z| of a standard normal
RECENT = 8  # the latest re-runs of a job that count: older ones may predate a change of the machine
MIN_DF = 10  # re-runs (beyond each job's first) a batch size needs for an estimate of its own
SERVED = "paired Server ratio (LoadGen)"  # the setting of a paired Server job's lines: its ratio is timed by LoadGen
SERVE_PRIOR_DF = 3  # serve.rerun_spread's default came from four sweeps of one machine (docs/serving.md)


@dataclass(frozen=True)
class Spread:
    """A between-run standard deviation of log(speedup) and the evidence behind it."""

    sd: float
    df: int  # degrees of freedom: re-runs beyond each job's first, summed over jobs
    jobs: int  # distinct jobs measured more than once


def path_for(calibration_path: str | Path) -> Path:
    """The re-run log beside a calibration file: `<machine>-reruns.jsonl`."""
    p = Path(calibration_path)
    return p.with_name(f"{p.stem}-reruns.jsonl")


def entry(job: str, source: str, setting: str, kernels: str, batch_size: int, backend: str, log_speedup: float, round_se: float,
          rounds: int) -> dict[str, Any]:
    return {"version": VERSION, "job": job, "source": source, "setting": setting, "kernels": kernels, "batch_size": int(batch_size),
            "backend": backend, "log_speedup": float(log_speedup), "round_se": float(round_se), "rounds": int(rounds),
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def append(path: Path, line: dict[str, Any]) -> None:
    append_jsonl(path, [line])


class Reruns:
    """The re-run log of one machine, read once; `spread(setting, batch_size)` is what it says."""

    def __init__(self, path: Path, kernels: Optional[str] = None) -> None:
        """`kernels`: only lines measured on this kernel path count (None: every line, as `timing show` lists them)."""
        self.path = Path(path)
        self.skipped = 0  # lines of another version or kernel path
        self._groups: dict[tuple[str, str, str, str], list[dict]] = defaultdict(list)  # (setting, job, source, kernels) -> lines
        try:
            found = read_jsonl(self.path)
        except FileNotFoundError:
            return
        for _, line in found.lines:
            if (line.get("version") == VERSION and _finite(line.get("log_speedup"), line.get("round_se"))
                    and kernels in (None, line.get("kernels"))):
                self._groups[(line["setting"], line["job"], line["source"], line["kernels"])].append(line)
            else:
                self.skipped += 1

    def groups(self) -> dict[tuple[str, str, str, str], list[dict]]:
        """(setting, job, code, kernels) -> its lines, oldest first."""
        return dict(self._groups)

    def spread(self, setting: str, batch_size: int) -> Optional[Spread]:
        """The between-run spread for jobs timed with `setting`: of this batch size's jobs when they hold
        `MIN_DF` re-runs, of every batch size's otherwise; None when no job was measured twice."""
        groups = [lines[-RECENT:] for (s, _, _, _), lines in self._groups.items() if s == setting and len(lines) > 1]
        own = [g for g in groups if g[-1]["batch_size"] == batch_size]
        chosen = own if sum(len(g) - 1 for g in own) >= MIN_DF else groups
        return pooled_spread(chosen) if chosen else None


def pooled_spread(groups: Iterable[list[dict]]) -> Spread:
    """Robust pooled between-run sd of log(speedup) over groups of re-runs of one job each: from the
    median absolute successive difference of every group's speedups (median |d| = MAD_NORMAL * sqrt(2) *
    sd for normal data), less the mean of the rounds' own squared standard errors (truncated at 0)."""
    diffs, own, jobs = [], [], 0
    for lines in groups:
        logs = np.array([line["log_speedup"] for line in lines])
        diffs.extend(np.abs(np.diff(logs)))
        own.extend(line["round_se"] ** 2 for line in lines)
        jobs += 1
    if not diffs:
        return Spread(0.0, 0, jobs)
    total = (float(np.median(diffs)) / (MAD_NORMAL * math.sqrt(2))) ** 2
    return Spread(math.sqrt(max(0.0, total - float(np.mean(own)))), len(diffs), jobs)


def combined(calibrated_sd: float, calibrated_df: int, reruns: Optional[Spread],
             prior: str = "the timing calibration") -> tuple[float, str]:
    """The calibration's between-process sd (or another `prior` estimate) and the re-runs', weighted by their
    degrees of freedom (as variances), and the words a record keeps of where it came from."""
    if reruns is None or reruns.df == 0:
        return calibrated_sd, f"{prior} ({calibrated_df} degrees of freedom)"
    weight = calibrated_df + reruns.df
    sd = math.sqrt((calibrated_df * calibrated_sd**2 + reruns.df * reruns.sd**2) / weight)
    return sd, f"{prior} ({calibrated_df} degrees of freedom) and {reruns.df} re-runs of {reruns.jobs} jobs on this machine"


def serve_spread(log: Path, kernels: str, configured: float, batch_size: int) -> tuple[float, str]:
    """The run-to-run spread a paired Server job's interval carries: `configured` (serve.rerun_spread, taken as
    `SERVE_PRIOR_DF` degrees of freedom) weighed with the spread between re-runs of paired Server jobs in this
    machine's re-run log `log` on the kernel path `kernels`, and the words its record keeps."""
    return combined(configured, SERVE_PRIOR_DF, Reruns(log, kernels).spread(SERVED, batch_size), "serve.rerun_spread")


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)
