"""Views over stored run records, rendered from their results (`bench.results`): the report folder and
the baseline comparison.

Reports only read records; nothing here measures. `python -m bench.report DIR` re-renders.
`write_report` and `publish_report` import matplotlib on first use, so a consumer of the comparison
alone does not pay for it.
"""

from bench.report.baseline import compare_table, write_compare

__all__ = [
    "compare_table",
    "publish_report",
    "write_compare",
    "write_report",
]


def __getattr__(name: str):
    if name in ("write_report", "publish_report"):
        from bench.report import publish

        return getattr(publish, name)
    raise AttributeError(f"module 'bench.report' has no attribute {name!r}")
