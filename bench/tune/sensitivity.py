"""Sensitivity on the search half: every table alone at each lower precision, and the dense layers.

Table rows: the paired ΔAUC against fp32 when that one table is quantize-dequantized at a precision,
everything else fp32 (fp32 dense layers too). Dense rows: the int8 MLP variants with every table fp32.
Both come from one `SwappableModel`; a table is swapped, scored, and swapped back.

The rows are cached on disk (`<cache_dir>/tune/<key>.json`), keyed by the trained model, the workload,
the precisions and the harness's code, so tuning again with another budget starts at the search.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Callable, Sequence

from bench.io import write_text_atomic
from bench.tune.candidate import DENSE, SwappableModel
from bench.tune.measured import Row, delta
from bench.tune.sizes import Table, map_bytes, uniform
from bench.tune.candidate_records import Measure, measure_now

log = logging.getLogger(__name__)


def sensitivity(model: SwappableModel, tables: Sequence[Table], precisions: Sequence[str], search, base,
                measure: Measure = measure_now) -> list[Row]:
    """Rows for every (table, packable precision), then the int8 dense variants; `base` = (labels, fp32 logits);
    each row measured through `measure` (bench.tune.candidate_records: stored, or found stored on resume)."""
    labels, base_logits = base
    n = len(labels)
    fp32_map = uniform(tables, "fp32")
    rows = []
    for i, table in enumerate(tables, 1):
        mine = []
        for precision in (p for p in precisions if table.packs(p)):
            row = Row(f"{table.name}={precision}", "sensitivity", "search", map_bytes(tables, {table.name: precision}),
                      "fp32", "emulation", {table.name: precision})

            def compute(row=row, precision=precision) -> Row:
                model.set_tables({table.name: precision})
                _, logits = model.logits("fp32", search, n)
                return row.with_delta(delta(labels, base_logits, logits))

            mine.append(measure(row, compute))
        rows += mine
        log.info("tune: sensitivity %d/%d: %s: %s", i, len(tables), table.name,
                 ", ".join(f"{r.per_table[table.name]} ΔAUC {r.auc_delta:+.5f}" for r in mine) or "no lower precision packs")
    model.set_tables({})
    for name in (d for d in DENSE if d != "fp32" and d in model.dense):
        row = Row(f"dense {name}", "dense", "search", map_bytes(tables, fp32_map), name, "emulation")

        def compute(row=row, name=name) -> Row:
            model.set_tables({})
            _, logits = model.logits(name, search, n)
            return row.with_delta(delta(labels, base_logits, logits))

        rows.append(measure(row, compute))
        log.info("tune: sensitivity: dense layers %s, tables fp32: ΔAUC %+.5f", name, rows[-1].auc_delta)
    return rows


def cached(path: Path, compute: Callable[[], list[Row]]) -> tuple[list[Row], bool]:
    """(rows, from_cache): the rows stored at `path`, or computed now and stored."""
    if path.exists():
        try:
            return [Row(**r) for r in json.loads(path.read_text())], True
        except (OSError, ValueError, TypeError) as exc:
            log.warning("tune cache %s is unreadable (%s): measuring again", path, exc)
    rows = compute()
    write_text_atomic(path, json.dumps([dataclasses.asdict(r) for r in rows], indent=1))  # NaN allowed: p of identical scores
    return rows, False
