"""The search on the search half: candidates from the sensitivities (the plan quarter), then combined
candidates measured on the check quarter, samples the plan never saw (`holdout`'s docstring says why).

Predicted loss of a table at a precision: its sensitivity's point ΔAUC as a loss (a gain counts as
none). The allowance for the tables is the budget less the deployed dense layers' own loss. The
candidates are the knapsack's solutions (`policy.frontier`, grid unit budget/1000, up to 4x the
budget in predicted loss); the first probe is the last one predicted to fit. Each probe is the
combined candidate, measured (every table at its precision at once, with the deployed dense layers),
never a sum; it passes when its interval's lower bound clears -budget by a guard that makes the
held-out check likely to pass too (`Budget.guard`, with the check's and the held-out sample counts). Bisection then finds the last passing candidate.
"""

from __future__ import annotations

import logging
from typing import Sequence

from bench.results.tune import SearchResult
from bench.tune.candidate import SwappableModel
from bench.tune.measured import Budget, Row, delta
from bench.tune.policy import (
    Candidate,
    Option,
    frontier,
    largest_passing,
    predicted_index,
)
from bench.tune.sizes import Table, map_bytes
from bench.tune.candidate_records import Measure, measure_now

log = logging.getLogger(__name__)


def table_options(tables: Sequence[Table], precisions: Sequence[str], rows: Sequence[Row]) -> dict[str, list[Option]]:
    loss = {r.table_precision: max(0.0, -r.auc_delta) for r in rows if r.kind == "sensitivity"}
    return {
        t.name: [Option("fp32", t.bytes("fp32"), 0.0)]
        + [Option(p, t.bytes(p), loss[(t.name, p)]) for p in precisions if (t.name, p) in loss]
        for t in tables
    }


def search(model: SwappableModel, tables: Sequence[Table], precisions: Sequence[str], sensitivity: Sequence[Row],
           dense: str, budget: Budget, batches, base, ratio: float = 1.0, measure: Measure = measure_now) -> SearchResult:
    """Probe candidates on `batches` (the check quarter; `base` = its (labels, fp32 logits)); `ratio` = its
    sample count / the held-out half's; each probe measured through `measure` (bench.tune.candidate_records)."""
    labels, base_logits = base
    dense_rows = [r for r in sensitivity if r.kind == "dense" and r.dense == dense]
    dense_loss = max(0.0, -dense_rows[0].auc_delta) if dense_rows else 0.0
    drop = budget.drop(sensitivity[0].auc_fp32)
    allowance = drop - dense_loss
    candidates = frontier(table_options(tables, precisions, sensitivity), unit=drop / 1000, max_loss=4 * drop)
    probes: dict[int, Row] = {}

    def passes(k: int) -> bool:
        per_table = candidates[k].per_table
        row = Row(f"candidate {k}/{len(candidates) - 1}", "probe", "search", map_bytes(tables, per_table), dense, "emulation", per_table)

        def compute() -> Row:
            model.set_tables(per_table)
            _, logits = model.logits(dense, batches, len(labels))
            return row.with_delta(delta(labels, base_logits, logits))

        probes[k] = measure(row, compute)
        ok = budget.passes(probes[k], ratio)
        r = probes[k]
        log.info("tune: search probe %d (%s): %.3f MB, ΔAUC %+.5f [%+.5f, %+.5f]: %s", len(probes), row.candidate,
                 r.embedding_bytes / 1e6, r.auc_delta, r.auc_delta_lo, r.auc_delta_hi, "passes" if ok else "does not pass")
        return ok

    first = predicted_index(candidates, allowance)
    passed, _ = largest_passing(len(candidates), passes, first)
    model.set_tables({})
    chosen_k = max(passed, 0)
    if chosen_k not in probes:
        passes(chosen_k)
    probes[chosen_k].chosen = True
    return SearchResult(candidates, allowance, first, passed, candidates[chosen_k].per_table, ratio,
                        [probes[k] for k in sorted(probes)], sorted(probes))
