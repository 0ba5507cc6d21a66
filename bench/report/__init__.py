"""Pandas views over stored run records: results table, report folder, baseline comparison.

Reports only read records; nothing here measures. `python -m bench.report DIR` re-renders.
"""

from bench.report.compare import compare_table, write_compare
from bench.report.load import load_records
from bench.report.publish import publish_report, write_report
from bench.report.table import COLUMNS, latest_records, results_table

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
