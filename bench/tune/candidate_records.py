"""Every candidate map the tune measures is a run record, stored as it is measured, and found again on resume.

A candidate is one precision map scored on one part of the eval split: a table lowered alone or a dense
variant (plan quarter), a search probe (check quarter), the chosen map, its emulation or a uniform map
(held-out half). Its identity is the part, the full per-table map, the dense layers and what measured it
(`emulation` or a backend), with the tune's base: the trained model, the workload, seed, device,
calibration batch size and the harness's code (`TuneRecords.key`). Not its label or the budget: a probe
measured under one budget is the same measurement under another.

Each measured candidate is appended at once to `<reports_dir>/tune/records.jsonl` (bench.store: whole,
locked, fsynced lines), in the record format of every job (bench.record). With `resume=true` the tune
claims a candidate (`Claims`, as a resumed sweep claims a job) and reads its stored record for this
machine (the environment's fingerprint) instead of measuring it again, so an interrupted tune, run
again, measures only what it had not stored. A re-emitted record names the stored one in `resumed_from`.

Why not through `runner.run_job`: a job builds a backend from the config, times it and scores the whole
eval split, once per job; a tune candidate is a map written into one shared copy of the fp32 model and
scored once on a part of the split, hundreds per tune, and the search decides the next candidate from
the last one's measurement. So the tune keeps its own loop and stores its candidates
through the same record and store API (`RunRecord`, `append_records`, `StoreIndex`, `Claims`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from bench.config import Config, workload_label
from bench.hashing import config_hash
from bench.measure.environment import environment
from bench.record import RunRecord
from bench.results.tune import CANDIDATE, LABELS, MEASURED, ROW, SUMMARY
from bench.store import RECORDS, Claims, StoreIndex, append_records
from bench.tune.holdout import CHECK, HOLDOUT, PLAN
from bench.tune.measured import Row
from bench.tune.sizes import Table

log = logging.getLogger(__name__)

TUNE = "tune"  # the tune's store: <reports_dir>/tune/records.jsonl


def part_of(kind: str) -> str:
    """The part of the eval split a row of this kind is scored on."""
    if kind in ("sensitivity", "dense"):
        return PLAN
    return CHECK if kind == "probe" else HOLDOUT


def measure_now(row: Row, compute: Callable[[], Row]) -> Row:
    """Measure `row` (no store): what the steps do unless given a `TuneRecords.measure`."""
    return compute()


Measure = Callable[[Row, Callable[[], Row]], Row]


class TuneRecords:
    """This tune's candidate records: measured ones appended to the tune store, stored ones found on resume."""

    def __init__(self, cfg: Config, device: torch.device, base: dict[str, Any], tables: Sequence[Table]) -> None:
        self.cfg, self.device, self.base = cfg, device, base
        self.tables = [t.name for t in tables]
        self.store = Path(cfg.reports_dir) / TUNE
        self.env = environment(device)
        self.index = StoreIndex(self.store / RECORDS)
        self.resume = bool(cfg.resume)
        self.claims = Claims()
        self.by_key: dict[str, RunRecord] = {}  # this tune's records by candidate key
        self.measured = 0  # candidates measured (not resumed) by this tune

    def identity(self, row: Row) -> dict[str, Any]:
        full = {name: row.per_table.get(name, "fp32") for name in self.tables}
        return {"part": part_of(row.kind), "per_table": full, "dense": row.dense, "measured_by": row.measured_by}

    def key(self, row: Row) -> str:
        return config_hash({**self.base, **self.identity(row)})

    def _record(self, row: Row, extra: Optional[dict[str, Any]] = None) -> RunRecord:
        identity = self.identity(row)
        metrics = {k: getattr(row, k) for k in MEASURED}
        return RunRecord(status="ok", workload=workload_label(self.cfg.workload), backend=row.measured_by,
                         device=self.device.type, batch_size=self.cfg.batch_size,
                         config={CANDIDATE: {**self.base, **identity}, ROW: {k: getattr(row, k) for k in LABELS}},
                         config_hash=config_hash({**self.base, **identity}), env=self.env,
                         metrics={**metrics, **(extra or {})})

    def _stored(self, row: Row) -> Optional[RunRecord]:
        return self.index.latest(self.key(row), self.env["fingerprint"]) if self.resume else None

    def _resumed(self, row: Row, prior: RunRecord) -> Row:
        for k in MEASURED:
            value = prior.metrics.get(k)
            setattr(row, k, math.nan if value is None else value)  # a non-finite metric is stored as null
        record = self._record(row, {k: v for k, v in prior.metrics.items() if k not in MEASURED})
        record.resumed_from, record.env = prior.record_id, prior.env
        self.by_key[self.key(row)] = record
        log.info("tune: resumed %s (%s, record %s)", row.candidate, row.kind, prior.record_id)
        return row

    def measure(self, row: Row, compute: Callable[[], Row]) -> Row:
        """`row` (its label, kind, map, dense layers and measurer) measured by `compute`, or, on resume, with
        the measurement stored for it; a new measurement is stored before this returns."""
        return self.measure_together([row], lambda: ([compute()], {}))[0]

    def measure_together(self, rows: list[Row], compute: Callable[[], tuple[list[Row], dict[str, Any]]]) -> list[Row]:
        """Rows measured as one (the chosen map and its emulation, whose logits are compared): all found stored
        or all measured; `compute` returns the rows and metrics the first one's record keeps beside them."""
        keys = [self.key(r) for r in rows]
        with self.claims:
            if self.resume:
                for key in keys:
                    self.claims.take(self.store, f"{key}-{self.env['fingerprint']}")  # waits while another tune measures it
            priors = [self._stored(r) for r in rows]
            if all(p is not None for p in priors):
                return [self._resumed(r, p) for r, p in zip(rows, priors)]
            measured, extra = compute()
            self.measured += len(measured)
            records = [self._record(r, extra if i == 0 else None) for i, r in enumerate(measured)]
            append_records(self.store / RECORDS, records)
            self.by_key.update(zip(keys, records))
            return measured

    def all_stored(self, rows: Sequence[Row]) -> bool:
        """Whether resume finds every one of `rows` stored (nothing of theirs needs measuring)."""
        return all(self._stored(r) is not None for r in rows)

    def stored_extra(self, row: Row, name: str) -> Any:
        """A metric kept beside `row`'s measurement (`measure_together`'s extra)."""
        return self.by_key[self.key(row)].metrics.get(name)

    def adopt(self, row: Row) -> None:
        """A row measured before and read from the tune's own cache (the sensitivities): its record joins
        this tune's, and the store where the store does not hold it yet."""
        key = self.key(row)
        prior = self.index.latest(key, self.env["fingerprint"])
        if prior is not None:
            self._resumed(dataclasses.replace(row), prior)
            return
        record = self._record(row)
        append_records(self.store / RECORDS, [record])
        self.by_key[key] = record

    def records_of(self, rows: Sequence[Row]) -> list[RunRecord]:
        """This tune's records of `rows`, in order, each labelled as the row is in this tune."""
        out = []
        for row in rows:
            record = self.by_key.get(self.key(row)) or self._record(row)  # sizes only: a row with no measurement
            record.config[ROW] = {k: getattr(row, k) for k in LABELS}
            out.append(record)
        return out


def summary_record(result, records: TuneRecords) -> RunRecord:
    """What the tune decided from its candidates, and its config: with the candidate records, all a re-render reads."""
    s = result.search
    search = None if s is None else {
        "candidates": [[c.per_table, c.bytes, c.predicted_loss] for c in s.candidates], "allowance": s.allowance,
        "predicted": s.predicted, "passed": s.passed, "chosen": s.chosen, "ratio": s.ratio, "probed": s.probed}
    summary = {"tables": [[t.name, t.rows, t.dim] for t in result.tables], "sizes_only": result.sizes_only,
               "n_plan": result.n_plan, "n_check": result.n_check, "n_holdout": result.n_holdout,
               "sensitivity_cached": result.sensitivity_cached, "emulation_gap": result.emulation_gap,
               "seconds": list(result.seconds.items()),  # pairs: the stored form sorts keys, tune.md keeps this order
               "search": search, "measured": records.measured}
    cfg = result.cfg
    return RunRecord(status="ok", workload=workload_label(cfg.workload), backend=TUNE, device=records.device.type,
                     batch_size=cfg.batch_size, config=dataclasses.asdict(cfg), config_hash=config_hash(records.base),
                     env=records.env, metrics={SUMMARY: summary})


def tune_records(result) -> list[RunRecord]:
    """The records of a tune's folder: every candidate row in tune.csv's order, then the summary."""
    return [*result.records.records_of(result.rows), summary_record(result, result.records)]
