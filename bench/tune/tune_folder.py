"""A tune's folder `reports/tune/<timestamp>/`: its records.jsonl (every candidate and a summary,
bench.tune.candidate_records), and tune.md, per_table.yaml, tune.csv and frontier.png rendered from its result
(bench.report.tune_files, which renders them again from the records: `python -m bench.report DIR`)."""

from __future__ import annotations

from pathlib import Path

from bench.report.publish import fresh_report_dir, point_latest
from bench.report.tune_files import CSV_COLUMNS, SELECTION_BIAS, csv_frame, per_table_yaml, render, write_files
from bench.results.tune import TuneResult
from bench.store import RECORDS, write_records
from bench.tune.candidate_records import tune_records

__all__ = ["CSV_COLUMNS", "SELECTION_BIAS", "csv_frame", "per_table_yaml", "render", "write_tune"]


def write_tune(result: TuneResult, reports_dir: Path) -> Path:
    """Write the folder under `<reports_dir>/tune/<timestamp>/`, point `latest` at it; returns the folder."""
    out = fresh_report_dir(Path(reports_dir), "tune")
    if result.records is not None:  # every candidate as a run record, and the summary: what a re-render reads
        write_records(tune_records(result), out / RECORDS)
    write_files(result, out)
    point_latest(out.parent, out.name)
    return out
