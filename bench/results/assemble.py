"""One results object per set of records: the results table and the serving table, built once at one
alpha and one budget, that the gate judges, the report renders and the history appends.

A sweep builds it once (`bench.sweep.finish`) with its `compare.alpha` and `compare.max_auc_drop` and
hands it to the gate, then the report, then the history, so the three read the same rows at the same
interval level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import pandas as pd

from bench.config import MAX_AUC_DROP
from bench.record import RunRecord
from bench.results import serving_table, table


@dataclass(frozen=True)
class Results:
    """`records` as read; `jobs` the results table (`bench.results.table.results_table`) with speedup
    intervals at `alpha` and verdicts read against `budget`; `serving` the serving table; `latest` the
    newest record per row key."""

    records: list[RunRecord]
    jobs: pd.DataFrame
    serving: pd.DataFrame
    latest: dict[tuple, RunRecord]
    alpha: float
    budget: float


def build_results(records: Iterable[RunRecord | dict[str, Any]], alpha: float = 0.05, budget: float = MAX_AUC_DROP) -> Results:
    """The results of `records`: every table built once, at `alpha` (compare.alpha) and `budget` (compare.max_auc_drop)."""
    records = table.as_records(records)
    return Results(records=records, jobs=table.results_table(records, alpha=alpha, budget=budget),
                   serving=serving_table.serve_table(records), latest=table.latest_records(records), alpha=float(alpha),
                   budget=float(budget))
