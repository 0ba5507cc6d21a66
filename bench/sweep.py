"""Sweep-level work that Hydra's launcher does not do: a progress bar over the jobs, the report
when the sweep ends, and the gate for sweeps that ask for it (`run_gate: true`). A job that failed
is a record with status `error`: the sweep goes on, the report lists it and the gate fails on it.
With `resume=true` a re-run of an interrupted sweep still has one record per job (see bench.pipeline.guard).

Installed as a Hydra callback by the sweep configs (`conf/sweep/*.yaml`). The report reads only
the records the jobs wrote; nothing is measured here.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bench.distributed import overlapping
from bench.progress import progress
from bench.record import RunRecord

log = logging.getLogger("bench.sweep")


def count_jobs(config: DictConfig) -> int:
    """Jobs the basic sweeper will launch: the product of the swept values, later keys winning."""
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    overrides = OverridesParser.create().parse_overrides(params + list(config.hydra.overrides.task))
    sizes = {}
    for o in overrides:
        sizes[o.get_key_element()] = len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1
    return math.prod(sizes.values())


# Overrides that change where output goes or what happens after measuring, not which jobs run
# (the runner's NON_SEMANTIC_KEYS, Hydra's own settings, the sweep choice itself).
NOT_THE_JOBS = ("reports_dir", "cache_dir", "sweep_name", "gate", "run_gate", "resume", "memory_fraction", "hydra", "sweep")


def sweep_variant(task_overrides) -> str | None:
    """The command-line overrides that change a sweep's jobs, or None for the sweep as configured."""
    kept = [o for o in task_overrides if re.split(r"[.=/@]", o.lstrip("+~"), maxsplit=1)[0] not in NOT_THE_JOBS]
    return " ".join(kept) or None


def sweep_records(sweep_dir: Path) -> list[RunRecord]:
    return [RunRecord.from_dict(json.loads(p.read_text())) for p in sorted(Path(sweep_dir).glob("*/record.json"))]


class SweepCallback(Callback):
    def __init__(self) -> None:
        self.bar = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.bar = progress(total=count_jobs(config), desc="sweep", unit="job", interval=0)  # without a terminal: a line per job

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(f"{config.backend.name} bs={config.batch_size} {config.device.type}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from bench.report import publish_report
        from bench.report.table import backend_label

        if self.bar is not None:
            self.bar.close()
        records = sweep_records(Path(config.hydra.sweep.dir))
        name = config.get("sweep_name") or "sweep"
        report_dir = publish_report(records, Path(config.reports_dir), name, variant=sweep_variant(config.hydra.overrides.task))
        counts = {s: sum(r.status == s for r in records) for s in ("ok", "error", "skipped")}
        resumed = sum(bool(r.resumed_from) for r in records)
        note = f"; {resumed} resumed from stored records" if resumed else ""
        print(f"sweep {name}: {len(records)} jobs ({counts['ok']} ok, {counts['error']} error, {counts['skipped']} skipped{note})")
        for r in records:
            if r.status == "error":
                reason = next(iter((r.error or "").strip().splitlines()), "no reason recorded")
                print(f"  error: {backend_label(r)} {r.device} bs={r.batch_size}: {reason}")
        if overlapping(records):  # parallel launchers without the host lock (one_job_per_host=false)
            print(f"warning: {len(overlapping(records))} pairs of jobs ran at the same time on one host: their timings disturbed each other")
        print(f"report: {report_dir / 'report.md'}")
        if config.get("run_gate"):
            from bench.gate import gate_sweep

            # Judged from the report folder's stored records; the configs are stored beside them.
            code = gate_sweep(report_dir, config.gate, config.get("compare"), Path(config.reports_dir))
            print(f"gate: {'FAILED' if code else 'passed'} ({report_dir / 'gate.md'})")
            if code:
                raise SystemExit(code)
