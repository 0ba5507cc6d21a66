"""Was the host at its usual pace during a Server run? Each run's service time against the same model's usual here.

A paired job's ratio is read where both sides ran in the same rounds, so a slow phase of the host that slows
both alike cancels. Not every slow phase does: on the 2-vCPU EPYC guest of issue 57, with the hypervisor
stealing nothing, one sweep served the DLRMv3 preset's int8_tbe at 3.2-3.5 ms a request and fp32 at 7.9-9.1 ms,
where the next sweep, half an hour later, served them at 2.0-2.4 and 6.7-7.7 ms: the short request lost more
of its speed than the long one, and int8_tbe's ratio to fp32 read 3.21x in one sweep and 4.19x in the other.
The ratio itself moves with such a phase, so pairing cannot cancel it; a run made in it has to be told apart.

The instrument is the served model itself: each Server run's median batch time on the SUT's own clock
(`late.service_ms.p50`, the time of the model call, without the queueing) against the **usual** for that
side's serving setup on this machine and stack:

- every side of every Server job appends its runs to `<cache_dir>/timing/<machine>-pace.jsonl` at the
  job's end (through the store's locked appender): the setup's key, each run's median batch time and its
  rows per batch (`Pace.lines`);
- a run's usual is the median batch time of the setup's `RECENT` latest stored runs whose rows per batch
  were within `FILL` of its own (a busier server fills larger batches, which take longer), once there are
  `MIN_RUNS` of them: other jobs' runs only, so a job that runs slow from its first run to its last is told
  apart too;
- a run over `1 + serve.max_slowdown` times its usual is **slow**: the host, not the load, set its
  verdict. The search and the staircase set it aside as they set aside a run the hypervisor stole from
  (bench.serve.qps_search.disturbed), and the paired estimate leaves its round out.

The key holds what sets a batch's time: the side's backend and its keys, the model, the workload, the batch
size, the batcher, the threads and the device (`setup_key`); the file is per machine and stack. A setup
served here for the first time has no usual: its runs are kept, none is set aside, and the job says so
(`usual_runs` 0). Past `COMPACT_BYTES`, a job's append keeps only the lines that still count (each setup's `RECENT`
latest). `python -m bench timing reset --all` empties the log with the rest of the timing cache.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from bench.hashing import config_hash, plain
from bench.io import append_jsonl, compact_jsonl, read_jsonl
from bench.measure.environment import stack_key

VERSION = 1
RECENT = 64  # the latest stored runs of a setup that count: older ones may predate a change of the machine
MIN_RUNS = 8  # stored runs at about a run's batch fill before it has a usual
FILL = 0.1  # rows per batch within this share of a run's own count as the same fill
COMPACT_BYTES = 4 << 20  # past this size, a job's append keeps each setup's RECENT latest runs and drops the rest


def log_path(cache_dir: str | Path) -> Path:
    """`<cache_dir>/timing/<machine>-pace.jsonl`, beside the timing calibration and the re-run log."""
    return Path(cache_dir) / "timing" / f"{stack_key(VERSION)}-pace.jsonl"


def setup_key(cfg: Any, backend: Any) -> str:
    """What sets a served batch's time: `backend` (the side's backend section: the job's, or fp32's default one for a
    paired job's reference side), the model, workload, query set, batch size, batcher, threads, device and seed of `cfg`."""
    serve = cfg.serve
    return config_hash({"backend": plain(backend), "model": plain(cfg.model), "workload": plain(cfg.workload),
                        "batch_size": cfg.batch_size, "max_wait_ms": serve.max_wait_ms, "workers": serve.workers,
                        "fixed_pairs": serve.fixed_pairs, "pairs_quantiles": plain(serve.pairs_quantiles),
                        "max_samples": serve.max_samples, "threads": cfg.threads, "device": plain(cfg.device), "seed": cfg.seed})


def service_ms(step: dict[str, Any]) -> Optional[float]:
    """A Server run's median batch time on the SUT's clock (ms), None for a run without one."""
    return ((step.get("late") or {}).get("service_ms") or {}).get("p50")


def fill(step: dict[str, Any]) -> Optional[float]:
    return (step.get("batching") or {}).get("rows_per_batch")


@dataclass
class Pace:
    """One side's usual batch times (its setup's stored runs, read at the job's start) and the runs it judged."""

    setup: str
    stored: list[tuple[float, float]]  # (rows per batch, median batch ms) of the setup's latest stored runs
    max_slowdown: Optional[float]  # None: no run is set aside
    runs: list[dict[str, Any]] = field(default_factory=list)  # each judged run: its ms, fill, usual and pace

    @classmethod
    def read(cls, path: Path, setup: str, max_slowdown: Optional[float]) -> "Pace":
        rows = [obj for _, obj in read_jsonl(path).lines if obj.get("v") == VERSION and obj.get("setup") == setup] if path.is_file() else []
        stored = [(float(r["rows_per_batch"]), float(r["service_ms"])) for r in rows if r.get("rows_per_batch") and r.get("service_ms")]
        return cls(setup, stored[-RECENT:], max_slowdown)

    def usual(self, rows_per_batch: float) -> tuple[Optional[float], int]:
        """The median batch time of the stored runs at about this fill, and how many there were (None under MIN_RUNS)."""
        near = [ms for rows, ms in self.stored if abs(rows - rows_per_batch) <= FILL * rows_per_batch]
        return (statistics.median(near) if len(near) >= MIN_RUNS else None), len(near)

    def judge(self, step: dict[str, Any]) -> dict[str, Any]:
        """Stamp `step["machine"]` with its pace (its batch time over the usual) and `host_slow` when past the limit."""
        ms, rows = service_ms(step), fill(step)
        if not ms or not rows:
            return step
        usual, seen = self.usual(rows)
        pace = ms / usual if usual else None
        slow = pace is not None and self.max_slowdown is not None and pace > 1 + self.max_slowdown
        step.setdefault("machine", {}).update({"pace": pace, "usual_service_ms": usual, "usual_runs": seen, "host_slow": slow})
        self.runs.append({"service_ms": ms, "rows_per_batch": rows, "pace": pace, "host_slow": slow})
        return step

    def summary(self) -> dict[str, Any]:
        """What the job's record keeps: the setup, the limit, each run's pace, and how many were slow."""
        paces = [r["pace"] for r in self.runs if r["pace"] is not None]
        return {"setup": self.setup, "max_slowdown": self.max_slowdown, "stored_runs": len(self.stored),
                "runs": len(self.runs), "judged": len(paces), "slow": sum(1 for r in self.runs if r["host_slow"]),
                "median_pace": statistics.median(paces) if paces else None}

    def lines(self) -> list[dict[str, Any]]:
        """This job's runs as log lines: the next jobs' usual."""
        at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return [{"v": VERSION, "setup": self.setup, "at": at, "service_ms": r["service_ms"], "rows_per_batch": r["rows_per_batch"]}
                for r in self.runs]

    def store(self, path: Path) -> int:
        written = append_jsonl(path, self.lines()) if self.runs else 0
        if written and path.stat().st_size > COMPACT_BYTES:
            compact_jsonl(path, latest_runs)
        return written


def latest_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The log's lines that still count: each setup's `RECENT` latest of this version (the only ones `Pace.read`
    reads), in their order; lines of another version are dropped."""
    seen: Counter = Counter()
    kept = []
    for row in reversed(rows):
        if row.get("v") == VERSION and seen[row.get("setup")] < RECENT:
            seen[row.get("setup")] += 1
            kept.append(row)
    return kept[::-1]
