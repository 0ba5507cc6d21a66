"""What the tune measured: one `Row` per candidate and split (a row of tune.csv), and the budget."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Optional

import numpy as np

from bench.config import MAX_AUC_DROP
from bench.errors import UserError
from bench.stats import AucDelta, budget_verdict, paired_auc_delta

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
    def of(cls, tune, default: Optional[float] = MAX_AUC_DROP) -> "Budget":
        """The tune's budget: tune.max_auc_drop or tune.max_auc_drop_relative; with neither, `default`
        (the reader's budget, compare.max_auc_drop), so tune and report.md read one budget."""
        given = [(k, v) for k, v in (("tune.max_auc_drop", tune.max_auc_drop), ("tune.max_auc_drop_relative", tune.max_auc_drop_relative)) if v is not None]
        if not given and default is not None:
            given = [("compare.max_auc_drop", default)]
        if len(given) != 1:
            raise UserError("give the AUC budget once: tune.max_auc_drop=0.001 (absolute) or tune.max_auc_drop_relative=0.01 (of the fp32 AUC)")
        key, value = given[0]
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
        """On the check quarter: the whole interval above -drop, by the guard."""
        return row.auc_delta_lo - self.guard(row, ratio) >= -self.drop(row.auc_fp32)

    def verdict(self, row: Row) -> str:
        return budget_verdict(row.auc_delta_lo, row.auc_delta_hi, self.drop(row.auc_fp32))
