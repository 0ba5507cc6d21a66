"""Write a report folder, and publish it under `<reports_dir>/<sweep>/<timestamp>/` with `latest`."""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from bench.config import MAX_AUC_DROP
from bench.io import write_text_atomic
from bench.record import RunRecord
from bench.store import write_records
from bench.report.markdown import render_report
from bench.report.plots import write_plots
from bench.report.serve import write_serve_report
from bench.results.assemble import Results, build_results
from bench.results.key import labelled
from bench.results.table import as_records


def write_report(
    records: Iterable[RunRecord | dict[str, Any]],
    out_dir: Path,
    title: str = "Quantized DLRM benchmark",
    write_records_file: bool = True,
    budget: float = MAX_AUC_DROP,
    alpha: float = 0.05,
    results: Results | None = None,
) -> Path:
    """Write report.md, results.csv, records.jsonl (every input record) and PNG plots into out_dir; with
    serving records, serve.md, serve.csv and their plots too.

    Returns the path of report.md. `write_records_file=False` leaves an existing records.jsonl
    alone (re-rendering in place, where that file is the input). `budget` is the reader's accuracy
    budget (compare.max_auc_drop) the verdicts and the bottom line are read against, `alpha` the
    speedup intervals' level (compare.alpha); `results`, the records' results already built (a
    sweep's, at its compare settings), stands for all three.
    """
    if results is None:
        results = build_results(records, alpha=alpha, budget=budget)
    records, budget = results.records, results.budget
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = results.jobs
    # the plots name a sharded row by its label (`backend@sharding×ranks`) and are split by the further axes
    plots = write_plots(labelled(df, further=False), out_dir)
    write_text_atomic(out_dir / "results.csv", df.to_csv(index=False))
    if write_records_file:
        write_records(records, out_dir / "records.jsonl")
    write_serve_report(records, out_dir, title, results.serving)
    report = out_dir / "report.md"
    write_text_atomic(report, render_report(df, records, title, plots, out_dir, budget))
    return report


def point_latest(sweep_dir: Path, target: str, link: str = "latest") -> None:
    """Replace `<sweep_dir>/<link>` with a symlink to `target` in one rename."""
    tmp = sweep_dir / f".{link}.{os.getpid()}.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, sweep_dir / link)


def latest_name(variant: str | None) -> str:
    """The pointer of one variant of a sweep: `latest` for the sweep as configured, `latest-<overrides>`
    for a run with command-line overrides (which leaves `latest` alone)."""
    if not variant:
        return "latest"
    slug = re.sub(r"[^A-Za-z0-9=.,_-]+", "_", variant.replace(" ", ","))
    if len(slug) > 60:
        slug = slug[:40] + "-" + hashlib.sha1(variant.encode()).hexdigest()[:8]
    return f"latest-{slug}"


def fresh_report_dir(reports_dir: Path, sweep_name: str) -> Path:
    """A new, empty `<reports_dir>/<sweep_name>/<UTC timestamp>/` (suffixed -1, -2, ... when taken)."""
    if not sweep_name or "/" in sweep_name or sweep_name in (".", "..", "latest"):
        raise ValueError(f"bad sweep name {sweep_name!r}")
    sweep_dir = Path(reports_dir) / sweep_name
    sweep_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        name = stamp if n == 0 else f"{stamp}-{n}"
        try:
            (sweep_dir / name).mkdir()
            return sweep_dir / name
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a fresh report folder under {sweep_dir}")


def start_report(records: Iterable[RunRecord | dict[str, Any]], reports_dir: Path, sweep_name: str) -> Path:
    """A fresh `<reports_dir>/<sweep_name>/<UTC timestamp>/` holding the sweep's records.jsonl: what
    the gate judges, written before anything is rendered."""
    out_dir = fresh_report_dir(reports_dir, sweep_name)
    write_records(as_records(records), out_dir / "records.jsonl")
    return out_dir


def finish_report(records: Iterable[RunRecord | dict[str, Any]], out_dir: Path, title: str, variant: str | None = None,
                  budget: float = MAX_AUC_DROP, results: Results | None = None) -> Path:
    """Render a started report folder (results.csv, plots, report.md) and point the sweep's
    pointer at it: `latest` for the sweep as configured, only `latest-<overrides>` for a `variant`
    (so `latest` stays the newest run of the default sweep); returns report.md. `results`: the
    records' results already built (`write_report`)."""
    report = write_report(records, out_dir, title=title, write_records_file=False, budget=budget, results=results)
    point_latest(Path(out_dir).parent, Path(out_dir).name, latest_name(variant))
    return report


def publish_report(
    records: Iterable[RunRecord | dict[str, Any]],
    reports_dir: Path,
    sweep_name: str,
    title: str | None = None,
    variant: str | None = None,
) -> Path:
    """Write the report into `<reports_dir>/<sweep_name>/<UTC timestamp>/`, point `latest` at it.

    `variant` names the command-line overrides that changed the sweep's jobs (`batch_size=2048
    device=cpu`): such a run is titled with them and gets its own pointer, `latest-<overrides>`,
    the newest run of that variant; `latest` is the newest run of the sweep as configured, which a
    variant run does not move. Returns the timestamped folder. The pointer is a relative symlink, swapped atomically, so a reader never
    sees it missing or half-written.
    """
    records = as_records(records)
    out_dir = start_report(records, reports_dir, sweep_name)
    finish_report(records, out_dir, title or f"Sweep {sweep_name}" + (f" with {variant}" if variant else ""), variant)
    return out_dir
