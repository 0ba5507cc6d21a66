"""Write a report folder, and publish it under `<reports_dir>/<sweep>/<timestamp>/` with `latest`."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from bench.io import write_text_atomic
from bench.record import RunRecord
from bench.report.markdown import render_report
from bench.report.plots import write_plots
from bench.report.table import as_records, results_table


def write_records(records: Iterable[RunRecord], path: Path) -> None:
    text = "".join(json.dumps(r.to_dict(), sort_keys=True, allow_nan=False, default=str) + "\n" for r in records)
    write_text_atomic(Path(path), text)


def write_report(
    records: Iterable[RunRecord | dict[str, Any]],
    out_dir: Path,
    title: str = "Quantized DLRM benchmark",
    write_records_file: bool = True,
) -> Path:
    """Write report.md, results.csv, records.jsonl (every input record) and PNG plots into out_dir.

    Returns the path of report.md. `write_records_file=False` leaves an existing records.jsonl
    alone (re-rendering in place, where that file is the input).
    """
    records = as_records(records)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = results_table(records)
    plots = write_plots(df, out_dir)
    write_text_atomic(out_dir / "results.csv", df.to_csv(index=False))
    if write_records_file:
        write_records(records, out_dir / "records.jsonl")
    report = out_dir / "report.md"
    write_text_atomic(report, render_report(df, records, title, plots, out_dir))
    return report


def point_latest(sweep_dir: Path, target: str) -> None:
    """Replace `<sweep_dir>/latest` with a symlink to `target` in one rename."""
    tmp = sweep_dir / f".latest.{os.getpid()}.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, sweep_dir / "latest")


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


def publish_report(
    records: Iterable[RunRecord | dict[str, Any]],
    reports_dir: Path,
    sweep_name: str,
    title: str | None = None,
) -> Path:
    """Write the report into `<reports_dir>/<sweep_name>/<UTC timestamp>/`, point `latest` at it.

    Returns the timestamped folder. `latest` is a relative symlink, swapped atomically, so a
    reader never sees it missing or half-written.
    """
    out_dir = fresh_report_dir(reports_dir, sweep_name)
    write_report(records, out_dir, title=title or f"Sweep {sweep_name}")
    point_latest(out_dir.parent, out_dir.name)
    return out_dir
