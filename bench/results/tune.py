"""A tune's results: what it measured (`Row`), its budget, table sizes, its search and its whole result, and
that result read back from the stored records of a tune's folder (`from_records`).

Below the report, which renders tune.md from a `TuneResult` (bench.report.tune_files), and the tune, which
measures one (bench.tune): a tune folder re-renders from its records.jsonl alone (`python -m bench.report DIR`).

A tune folder's records: one per candidate row of tune.csv, in its order (config `tune_candidate`: what
identifies the measurement; config `row`: its label, kind, split, dense layers, measurer, map and whether
chosen; metrics: the measurement), then one summary record (metrics `tune_summary`: the tables, the split
sizes, the search's candidates and decisions, the timings; config: the tune's config).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from types import SimpleNamespace
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from bench.backends.tbe import BITS
from bench.config import auc_budget
from bench.metrics import AUC_DELTA, AUC_DELTA_P, AUC_FP32, EMBEDDING_BYTES, with_interval
from bench.errors import UserError
from bench.measure.memory import row_bytes
from bench.record import RunRecord
from bench import stats
from bench.stats import AucDelta, paired_auc_delta

CANDIDATE = "tune_candidate"  # a candidate record's config key: what identifies the measurement
SUMMARY = "tune_summary"  # the summary record's metrics key: what the tune decided from its candidates
ROW = "row"  # a candidate record's config key: the row's labels in its tune
# the Row fields a candidate record keeps as its metrics (the rest name the candidate in this tune)
MEASURED = (EMBEDDING_BYTES, *with_interval(AUC_DELTA), AUC_DELTA_P, AUC_FP32)
# Row fields that say what the row is in this tune (its label, kind, split, chosen); stored beside the measurement
LABELS = ("candidate", "kind", "split", "dense", "measured_by", "per_table", "chosen")


# ------------------------------------------------------------------------------ what was measured

# What a row's candidate is: one table lowered alone, a dense-layer variant, a search probe, the chosen
# map (real backend), the chosen map's emulation on the held-out half, or a uniform precision.
KINDS = ("sensitivity", "dense", "probe", "chosen", "emulation", "uniform")


@dataclass
class Row:
    candidate: str
    kind: str
    split: str  # search | holdout | none (sizes only)
    embedding_bytes: int
    dense: str  # the dense layers: fp32 | int8 dynamic | int8 static
    measured_by: str  # "emulation" (quantize-dequantize rows, torch.ao int8 Linear) or a backend name
    per_table: dict[str, str] = field(default_factory=dict)  # the full map (sensitivity: just the table)
    auc_delta: float = math.nan
    auc_delta_lo: float = math.nan
    auc_delta_hi: float = math.nan
    auc_delta_p: float = math.nan
    auc_fp32: float = math.nan
    chosen: bool = False

    @property
    def table_precision(self) -> tuple[str, str]:
        """(table, precision) of a sensitivity row, which lowers one table."""
        [(table, precision)] = self.per_table.items()
        return table, precision

    def with_delta(self, delta: AucDelta) -> "Row":
        self.auc_delta, self.auc_delta_lo, self.auc_delta_hi = delta.delta, delta.lo, delta.hi
        self.auc_delta_p, self.auc_fp32 = delta.p_value, delta.auc_base
        return self


def delta(labels: np.ndarray, base_logits: np.ndarray, logits: np.ndarray) -> AucDelta:
    return paired_auc_delta(labels, base_logits, logits)


@dataclass(frozen=True)
class Budget:
    """The allowed AUC drop: absolute, or a fraction of the fp32 AUC on the split judged.

    `holdout_confidence`: the search keeps a candidate only when, judged from its measurement on the
    check quarter, the held-out check would pass with at least this probability. The held-out delta
    differs from the check's by the noise of both (independent samples; the held-out one's variance is
    the check's times `ratio` = check samples / held-out samples), and the held-out check then asks
    for its own lower bound: so the check's point delta must clear -drop by z(0.975) x the held-out
    standard deviation plus z(confidence) x the standard deviation of the difference. With equal
    sample counts that is the check's lower bound clearing -drop by z(confidence) x sqrt(2) x its
    standard deviation. 0.5 asks only that the held-out lower bound be expected to clear it, which
    leaves the held-out check a coin toss for a candidate at the edge. It holds only for a candidate
    whose check figure is a fresh draw: the check samples must not be the ones it was planned on.
    """

    absolute: Optional[float] = None
    relative: Optional[float] = None
    holdout_confidence: float = 0.9

    @classmethod
    def of(cls, cfg) -> "Budget":
        """The tune's budget, resolved where every reader resolves it (`bench.config.auc_budget`): tune.max_auc_drop or
        tune.max_auc_drop_relative, else compare.max_auc_drop, so tune and report.md read one budget."""
        tune = cfg.tune
        key, value = auc_budget(cfg)
        for k, v in ((key, value), ("tune.holdout_confidence", tune.holdout_confidence)):
            if not (isinstance(v, (int, float)) and 0 < v < 1):
                raise UserError(f"{k} must be a number between 0 and 1, got {v!r}")
        if tune.holdout_confidence < 0.5:
            raise UserError(f"tune.holdout_confidence must be at least 0.5, got {tune.holdout_confidence!r}")
        drop = {"relative": float(value)} if key == "tune.max_auc_drop_relative" else {"absolute": float(value)}
        return cls(**drop, holdout_confidence=float(tune.holdout_confidence))

    def drop(self, auc_fp32: float) -> float:
        return self.absolute if self.absolute is not None else self.relative * auc_fp32

    def describe(self) -> str:
        if self.absolute is not None:
            return f"AUC drop at most {self.absolute:g} (absolute)"
        return f"AUC drop at most {100 * self.relative:g}% of the fp32 AUC"

    def guard(self, row: Row, ratio: float = 1.0) -> float:
        """How far the lower bound of `row` (the check quarter's) must clear -drop, the held-out delta's
        variance being `ratio` x the check's (see the class docstring)."""
        z95 = NormalDist().inv_cdf(0.975)
        sd = (row.auc_delta_hi - row.auc_delta_lo) / (2 * z95)
        sd_holdout = math.sqrt(ratio) * sd
        return z95 * (sd_holdout - sd) + NormalDist().inv_cdf(self.holdout_confidence) * math.hypot(sd, sd_holdout)

    def passes(self, row: Row, ratio: float = 1.0) -> bool:
        """On the check quarter: within the budget by the one rule (`budget_verdict`), its low end lowered by the guard."""
        lo = row.auc_delta_lo - self.guard(row, ratio)
        return stats.budget_verdict(lo, max(lo, row.auc_delta_hi), self.drop(row.auc_fp32)) == stats.WITHIN_BUDGET

    def verdict(self, row: Row) -> str:
        return stats.budget_verdict(row.auc_delta_lo, row.auc_delta_hi, self.drop(row.auc_fp32))


# ------------------------------------------------------------------------------ table sizes

# Widest first.
PRECISIONS = ("fp32", "fp16", "int8", "int4", "int2")


@dataclass(frozen=True)
class Table:
    name: str
    rows: int
    dim: int

    def packs(self, precision: str) -> bool:
        """Whether rows of this dim pack into whole bytes at `precision` (int2 needs dim % 4 == 0)."""
        return (self.dim * BITS[precision]) % 8 == 0

    def bytes(self, precision: str, alignment: int = 1) -> int:
        return self.rows * row_bytes(precision, self.dim, alignment)


def tables_of(specs: Iterable, dim: int) -> list[Table]:
    """Tables of a workload's TableSpecs at the model's embedding dim."""
    return [Table(s.name, int(s.num_embeddings), int(dim)) for s in specs]


def map_bytes(tables: Iterable[Table], per_table: Mapping[str, str], alignment: int = 1) -> int:
    """Bytes of every table at its precision in `per_table` (fp32 where absent)."""
    return sum(t.bytes(per_table.get(t.name, "fp32"), alignment) for t in tables)


def uniform(tables: Iterable[Table], precision: str) -> dict[str, str]:
    return {t.name: precision for t in tables}


# ------------------------------------------------------------------------------ the search and the whole result

@dataclass(frozen=True)
class Candidate:
    per_table: dict[str, str]
    bytes: int
    predicted_loss: float


@dataclass
class SearchResult:
    candidates: list[Candidate]
    allowance: float  # predicted loss the tables may spend
    predicted: int  # the first probe: the last candidate predicted to fit
    passed: int  # the last candidate measured to pass; -1 when not even candidate 0 (every table fp32) did
    chosen: dict[str, str]
    ratio: float  # check samples / held-out samples: the guard's variance ratio
    probes: list[Row] = field(default_factory=list)  # measured candidates, in candidate order
    probed: list[int] = field(default_factory=list)  # their indices into `candidates`


@dataclass
class TuneResult:
    cfg: Any  # the Config (a re-render: its stored form, read by attribute)
    tables: list[Table]
    budget: Optional[Budget] = None
    sizes_only: Optional[str] = None  # why accuracy was not measured
    n_plan: int = 0  # the search half's plan quarter (sensitivity)
    n_check: int = 0  # the search half's check quarter (search probes)
    n_holdout: int = 0
    sensitivity: list[Row] = field(default_factory=list)
    sensitivity_cached: bool = False
    search: Optional[SearchResult] = None
    # the chosen map first, then its emulation, then the uniform maps (sizes only: sizes)
    holdout: list[Row] = field(default_factory=list)
    emulation_gap: float = float("nan")  # largest |logit| difference of the chosen map's emulation and real backend
    seconds: dict[str, float] = field(default_factory=dict)
    records: Any = None  # bench.tune.candidate_records.TuneRecords: every measured candidate as a stored run record

    @property
    def chosen(self) -> Optional[Row]:
        return self.holdout[0] if self.holdout and self.holdout[0].chosen else None

    @property
    def n_search(self) -> int:
        return self.n_plan + self.n_check

    @property
    def verdict(self) -> Optional[str]:
        return self.budget.verdict(self.chosen) if self.chosen else None

    @property
    def rows(self) -> list[Row]:
        """Every measured candidate and split, in the order measured (tune.csv)."""
        probes = self.search.probes if self.search else []
        return [*self.sensitivity, *probes, *self.holdout]


NOTHING_COMPRESSED = ("The search could not show any cheaper precision within the budget on its check quarter "
                      "({n_check} samples): too few samples to tell a small drop from none (a +preset=tiny eval split is). "
                      "A larger eval split (workload.eval_samples=N) or a wider budget lets it compress.")


def nothing_compressed(result: TuneResult) -> bool:
    """The chosen map keeps every table in fp32: trivially within any budget, and nothing quantized."""
    chosen = result.chosen
    return chosen is not None and bool(chosen.per_table) and all(p == "fp32" for p in chosen.per_table.values())




# ------------------------------------------------------------------------------ read back from records


def is_tune(records: Iterable[RunRecord]) -> bool:
    """Whether these are a tune folder's records (a summary record among them)."""
    return any(SUMMARY in (r.metrics or {}) for r in records)


def is_tune_store(records: Iterable[RunRecord]) -> bool:
    """Whether these are the tune's store of candidates (`<reports_dir>/tune/records.jsonl`): no tune of their own."""
    return any(CANDIDATE in (r.config or {}) for r in records) and not is_tune(records)


def _namespace(data: Any) -> Any:
    """A stored config read by attribute, as the renderer reads a Config."""
    return json.loads(json.dumps(data), object_hook=lambda d: SimpleNamespace(**d))


def _in_order(per_table: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """A map in the tables' order (the stored form sorts keys; tune.csv, per_table.yaml and tune.md keep this order)."""
    return {name: per_table[name] for name in names if name in per_table}


def row_of(record: RunRecord, names: Sequence[str]) -> Row:
    """The tune.csv row a candidate record stores (a non-finite metric is stored as null: nan again)."""
    labels = {**record.config[ROW]}
    labels["per_table"] = _in_order(labels["per_table"], names)
    measured = {k: math.nan if record.metrics.get(k) is None else record.metrics[k] for k in MEASURED}
    measured[EMBEDDING_BYTES] = int(measured[EMBEDDING_BYTES])
    return Row(**{k: labels[k] for k in LABELS}, **measured)


def from_records(records: Sequence[RunRecord]) -> TuneResult:
    """The tune a folder's records hold, as `run_tune` returned it (less its live records)."""
    summaries = [r for r in records if SUMMARY in (r.metrics or {})]
    if len(summaries) != 1:
        raise UserError(f"{len(summaries)} tune summary records where one tune folder holds one: re-render one tune folder at a time")
    [summary_record] = summaries
    s = summary_record.metrics[SUMMARY]
    cfg = _namespace(summary_record.config)
    result = TuneResult(cfg, [Table(name, int(n), int(dim)) for name, n, dim in s["tables"]])
    names = [t.name for t in result.tables]
    rows = [row_of(r, names) for r in records if CANDIDATE in (r.config or {})]
    result.sizes_only = s["sizes_only"]
    result.n_plan, result.n_check, result.n_holdout = s["n_plan"], s["n_check"], s["n_holdout"]
    result.sensitivity_cached = bool(s["sensitivity_cached"])
    result.emulation_gap = math.nan if s["emulation_gap"] is None else float(s["emulation_gap"])
    result.seconds = {name: float(v) for name, v in s["seconds"]}
    result.sensitivity = [r for r in rows if r.kind in ("sensitivity", "dense")]
    result.holdout = [r for r in rows if r.kind in ("chosen", "emulation", "uniform")]
    if not result.sizes_only:
        result.budget = Budget.of(cfg)
    search = s["search"]
    if search is not None:
        result.search = SearchResult([Candidate(_in_order(per_table, names), int(n), float(loss))
                                      for per_table, n, loss in search["candidates"]],
                                     search["allowance"], search["predicted"], search["passed"], _in_order(search["chosen"], names),
                                     search["ratio"],
                                     [r for r in rows if r.kind == "probe"], list(search["probed"]))
    return result
