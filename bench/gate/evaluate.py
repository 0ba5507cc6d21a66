"""Thresholds over the results table -> verdict rows and an exit code."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

import pandas as pd

from bench.config import GateConfig, RuleSet
from bench.errors import UserError
from bench.gate.config import as_gate_config
from bench.gate.rules import FAIL, INCONCLUSIVE, PASS, RULES, SKIPPED, VERDICTS, judge
from bench.record import USER
from bench.report.table import KEY

REQUIRED = (*KEY, "status")
JOB = "job"  # the pseudo-rule that carries a row's status (error, skipped, no rules)


@dataclass(frozen=True)
class Verdict:
    workload: str
    device: str
    backend: str
    batch_size: int
    rule: str
    threshold: Optional[float]
    value: Optional[float]
    interval: Optional[tuple[float, float]]
    verdict: str  # pass | fail | inconclusive | skipped
    reason: str

    @property
    def where(self) -> str:
        return f"{self.backend} {self.workload}/{self.device} bs={self.batch_size}"


@dataclass
class GateResult:
    verdicts: list[Verdict]
    inconclusive_fails: bool = False

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(1 for x in self.verdicts if x.verdict == v) for v in VERDICTS}

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict == FAIL]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def sorted(self) -> list[Verdict]:
        """Failing rows first, then inconclusive, skipped, passing; each by key and rule."""
        order = {v: i for i, v in enumerate(VERDICTS)}
        return sorted(self.verdicts, key=lambda v: (order[v.verdict], v.workload, v.device, v.backend, v.batch_size, v.rule))

    def to_frame(self) -> pd.DataFrame:
        columns = list(Verdict.__dataclass_fields__)
        return pd.DataFrame([asdict(v) for v in self.sorted()], columns=columns)


def evaluate_gate(results_df: pd.DataFrame, gate_cfg: Any) -> GateResult:
    """One verdict per (row, configured rule) of `results_df` (the `bench.report` results table).

    An errored job is one failing `job` verdict; a skipped job one skipped `job` verdict. A
    backend with no entry in `gate.rules` is judged by `gate.default_rules`, and its reasons say
    so; an ok row whose rules are all off is one passing `job` verdict that says so.
    """
    cfg: GateConfig = as_gate_config(gate_cfg)
    missing = [c for c in REQUIRED if c not in results_df.columns]
    if missing:
        raise UserError(f"results table lacks columns {missing}: expected the bench.report results table")
    if results_df.empty:
        raise UserError("results table is empty: nothing to gate (did the sweep run?)")
    verdicts: list[Verdict] = []
    for row in results_df.to_dict("records"):
        verdicts.extend(_row_verdicts(row, cfg))
    return GateResult(verdicts, cfg.inconclusive_fails)


def _row_verdicts(row: dict[str, Any], cfg: GateConfig) -> list[Verdict]:
    key = {k: row[k] for k in KEY}
    try:
        key["batch_size"] = int(key["batch_size"])
    except (TypeError, ValueError):
        raise UserError(f"row {key}: batch_size {key['batch_size']!r} is not an integer") from None
    for k in ("workload", "device", "backend"):
        key[k] = str(key[k])
    status = str(row["status"]).strip().lower()
    text = row.get("error")
    text = "" if text is None or (isinstance(text, float) and pd.isna(text)) else " ".join(str(text).split())

    def job(verdict: str, reason: str) -> list[Verdict]:
        return [Verdict(**key, rule=JOB, threshold=None, value=None, interval=None, verdict=verdict, reason=reason)]

    if status == "error":
        if row.get("error_kind") == USER:  # not a measurement: the job met bad input while running
            return job(FAIL, f"bad input found while the job ran (not a measurement): {text or 'no error text recorded'}")
        return job(FAIL, f"job errored: {text or 'no error text recorded'}")
    if status == "skipped":
        return job(SKIPPED, f"job skipped: {text or 'no reason recorded'}")
    if status != "ok":
        raise UserError(f"row {key}: unknown status {row['status']!r} (expected ok, error or skipped)")
    rules, source = _rules_for(key["backend"], cfg)
    active = {n: t for n, t in vars(rules).items() if t is not None}
    if not active:
        return job(PASS, f"ran ok; every rule is off for backend {key['backend']!r} ({source})")
    note = "" if source.startswith("gate.rules.") else f" [{source}]"
    out = []
    for name, threshold in active.items():
        r = RULES[name]
        m = r.measure(row)
        verdict, reason = judge(r, threshold, m, cfg.inconclusive_fails)
        out.append(Verdict(**key, rule=name, threshold=float(threshold), value=m.value, interval=m.interval,
                           verdict=verdict, reason=reason + note))
    return out


def _rules_for(backend: str, cfg: GateConfig) -> tuple[RuleSet, str]:
    """The backend's rule set and where it came from (for reasons): its own, else the defaults."""
    own: Optional[RuleSet] = cfg.rules.get(backend)
    if own is not None:
        return own, f"gate.rules.{backend}"
    return cfg.default_rules, f"gate.default_rules: no gate.rules.{backend}"


__all__ = ["GateResult", "Verdict", "evaluate_gate", "JOB", "PASS", "FAIL", "INCONCLUSIVE", "SKIPPED"]
