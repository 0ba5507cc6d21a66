"""Thresholds over the results table -> verdict rows and an exit code."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

import pandas as pd

from bench.config import GateConfig, RuleSet
from bench.errors import UserError
from bench.gate.thresholds import as_gate_config
from bench.gate.rules import FAIL, INCONCLUSIVE, JOB_ROWS, PASS, RULES, SERVER, SKIPPED, VERDICTS, judge, row_kind
from bench.record import USER
from bench.results.key import CORE, KEY, UNSHARDED, extra_axes, label, row_key

# A results.csv written before sharding had columns of its own, and the serving table, lack `sharding`
# and `world_size`: their rows ran unsharded in one process (an old sharded row's backend cell holds both,
# `bench.results.key.row_key`). An axis with a default is optional too.
REQUIRED = (*("workload", "device", "backend", "batch_size"), "status")
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
    scenario: Optional[str] = None  # serving rows: scenario, bound and batcher (`server ≤60 ms, wait 2 ms ×1`)
    sharding: str = UNSHARDED[0]
    world_size: int = UNSHARDED[1]
    axes: tuple = ()  # (name, value) of each further axis of the row key (bench.results.key), in its order

    @property
    def named(self) -> str:
        """The backend as the gate's tables name it: `int8_tbe`, or `int8_tbe@row_wise×2` for a sharded row."""
        return label(self.backend, self.sharding, self.world_size, **dict(self.axes))

    @property
    def key(self) -> tuple:
        """The row key (bench.results.key) of the row judged."""
        values = {**{k: getattr(self, k) for k in CORE}, **dict(self.axes)}
        return tuple(values.get(k) for k in KEY)

    @property
    def where(self) -> str:
        serving = f" {self.scenario}" if self.scenario else ""
        return f"{self.named}{serving} {self.workload}/{self.device} bs={self.batch_size}"


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
        return sorted(self.verdicts, key=lambda v: (order[v.verdict], v.workload, v.device, v.backend, v.sharding, v.world_size,
                                                    v.axes, v.scenario or "", v.batch_size, v.rule))

    def to_frame(self) -> pd.DataFrame:
        """One row per verdict; each further axis of the row key a column of its own."""
        columns = [c for c in Verdict.__dataclass_fields__ if c != "axes"] + [a.name for a in extra_axes()]
        return pd.DataFrame([{**{k: v for k, v in asdict(x).items() if k != "axes"}, **dict(x.axes)} for x in self.sorted()],
                            columns=columns)


def evaluate_gate(results_df: pd.DataFrame, gate_cfg: Any, serve_df: Optional[pd.DataFrame] = None) -> GateResult:
    """One verdict per (row, configured rule that judges that kind of row) of `results_df` (the
    `bench.results` results table) and `serve_df` (its serving table, joined by backend, scenario and bound).

    An errored job is one failing `job` verdict; a skipped job one skipped `job` verdict. A
    backend with no entry in `gate.rules` is judged by `gate.default_rules`, and its reasons say
    so; an ok row whose rules are all off is one passing `job` verdict that says so.
    """
    cfg: GateConfig = as_gate_config(gate_cfg)
    tables = [results_df] + ([serve_df] if serve_df is not None else [])
    for df in tables:
        missing = [c for c in REQUIRED if c not in df.columns]
        if missing:
            raise UserError(f"results table lacks columns {missing}: expected the results table of bench.results")
    if all(df.empty for df in tables):
        raise UserError("results table is empty: nothing to gate (did the sweep run?)")
    verdicts: list[Verdict] = []
    for df in tables:
        for row in df.to_dict("records"):
            verdicts.extend(_row_verdicts(row, cfg))
    return GateResult(verdicts, cfg.inconclusive_fails)


def serving_label(row: dict[str, Any]) -> Optional[str]:
    """A serving row's scenario, bound and batcher; None for a results-table row."""
    kind = row_kind(row)
    if kind == JOB_ROWS[0]:
        return None
    bound = f" ≤{row['bound_ms']:g} ms" if kind == SERVER else ""
    return f"{kind}{bound}, wait {row['max_wait_ms']:g} ms ×{int(row['workers'])}"


def _row_verdicts(row: dict[str, Any], cfg: GateConfig) -> list[Verdict]:
    try:
        values = dict(zip(KEY, row_key(row)))
    except ValueError as exc:
        raise UserError(f"row {({k: row.get(k) for k in KEY if k in row})}: {exc}") from None
    key = {k: values[k] for k in CORE}
    key["axes"] = tuple((a.name, values[a.name]) for a in extra_axes())
    status = str(row["status"]).strip().lower()
    text = row.get("error")
    text = "" if text is None or (isinstance(text, float) and pd.isna(text)) else " ".join(str(text).split())

    key["scenario"] = serving_label(row)

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
    kind = row_kind(row)
    active = {n: t for n, t in vars(rules).items() if t is not None and kind in RULES[n].rows}
    if not active:
        if kind != JOB_ROWS[0]:
            names = ", ".join(n for n, r in RULES.items() if kind in r.rows)
            return job(PASS, f"ran ok; no {kind} serving rule ({names}) is set for backend {key['backend']!r} ({source})")
        return job(PASS, f"ran ok; every rule is off for backend {key['backend']!r} ({source})")
    note = "" if source.startswith("gate.rules.") else f" [{source}]"
    out = []
    for name, threshold in active.items():
        r = RULES[name]
        m = r.measure(row)
        verdict, reason = judge(r, threshold, m, cfg.inconclusive_fails)
        layers = row.get("auc_delta_layers")
        if verdict == FAIL and name in ("max_auc_drop", "min_auc_ratio") and isinstance(layers, str) and layers:
            reason += f"; by layer: {layers}"  # attribute_layers=true (the nightly): the layers the loss comes from
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
