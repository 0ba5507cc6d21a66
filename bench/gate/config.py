"""The gate's typed config: thresholds per backend, declared in `conf/gate/<name>.yaml`.

`GateConfig` (in `bench.config`) is the Hydra structured-config schema of the `gate` group
(stored as `gate/base_gate`); a run overrides a threshold with `gate.rules.<backend>.<rule>=VALUE`.
Outside Hydra (the `python -m bench.gate` CLI), `load_gate_config` reads the same YAML and applies
`rules.<backend>.<rule>=VALUE` overrides (`bench.config_files`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from bench.config import GateConfig, RuleSet
from bench.config_files import CONF_DIR as _CONF_ROOT
from bench.config_files import load_group, to_schema
from bench.errors import UserError

CONF_DIR = _CONF_ROOT / "gate"


def validate(cfg: GateConfig) -> None:
    if cfg.history_runs < 1:
        raise UserError(f"gate.history_runs must be at least 1, got {cfg.history_runs}")
    for where, rules in [*((f"rules.{b}", r) for b, r in cfg.rules.items()), ("default_rules", cfg.default_rules)]:
        if rules.min_auc_ratio is not None and rules.min_auc_ratio <= 0:
            raise UserError(f"gate.{where}.min_auc_ratio must be positive (a fraction such as 0.999), got {rules.min_auc_ratio}")
        if rules.max_embedding_bytes is not None and rules.max_embedding_bytes < 0:
            raise UserError(f"gate.{where}.max_embedding_bytes must not be negative")
        for name in ("min_qps_ratio", "max_p99_ms"):
            if getattr(rules, name) is not None and getattr(rules, name) <= 0:
                raise UserError(f"gate.{where}.{name} must be positive, got {getattr(rules, name)}")
        if rules.min_qps_at_sla is not None and rules.min_qps_at_sla < 0:
            raise UserError(f"gate.{where}.min_qps_at_sla must not be negative, got {rules.min_qps_at_sla}")


def as_gate_config(cfg: Any) -> GateConfig:
    """A GateConfig from a GateConfig, a (Hydra) DictConfig or a plain dict; validated."""
    return to_schema(GateConfig, cfg, "gate", validate)


def load_gate_config(source: str | Path = "default", overrides: Iterable[str] = ()) -> GateConfig:
    """Read `conf/gate/<source>.yaml` (or a YAML path) and apply dotlist overrides.

    Overrides read `rules.int8_tbe.min_speedup=100`; a leading `gate.` is accepted too.
    """
    return load_group("gate", GateConfig, source, overrides, validate)


__all__ = ["CONF_DIR", "GateConfig", "RuleSet", "as_gate_config", "load_gate_config", "validate"]
