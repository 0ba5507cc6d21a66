"""Pandas views over stored run records: results table, report folder, baseline comparison.

Reports only read records; nothing here measures. `python -m bench.report DIR` re-renders.
`write_report` and `publish_report` import matplotlib on first use, so a consumer of
`results_table` alone (the gate) does not pay for it.
"""

from bench.report.baseline import compare_table, write_compare
from bench.results.load import load_records
from bench.results.table import COLUMNS, latest_records, results_table

__all__ = [
    "COLUMNS",
    "compare_table",
    "latest_records",
    "load_records",
    "publish_report",
    "results_table",
    "write_compare",
    "write_report",
]


def __getattr__(name: str):
    if name in ("write_report", "publish_report"):
        from bench.report import publish

        return getattr(publish, name)
    raise AttributeError(f"module 'bench.report' has no attribute {name!r}")
