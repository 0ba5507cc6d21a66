"""The gate's typed config: thresholds per backend, declared in `conf/gate/<name>.yaml`.

`GateConfig` (in `bench.config`) is the Hydra structured-config schema of the `gate` group
(stored as `gate/base_gate`); a run overrides a threshold with `gate.rules.<backend>.<rule>=VALUE`.
Outside Hydra (the `python -m bench.gate` CLI), `load_gate_config` reads the same YAML and applies
`rules.<backend>.<rule>=VALUE` overrides (`bench.config.files`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from bench.config import GateConfig, RuleSet
from bench.config.files import load_group, to_schema



def validate(cfg: GateConfig) -> None:
    cfg.validate()


def as_gate_config(cfg: Any) -> GateConfig:
    """A GateConfig from a GateConfig, a (Hydra) DictConfig or a plain dict; validated."""
    return to_schema(GateConfig, cfg, "gate", validate)


def load_gate_config(source: str | Path = "default", overrides: Iterable[str] = ()) -> GateConfig:
    """Read `conf/gate/<source>.yaml` (or a YAML path) and apply dotlist overrides.

    Overrides read `rules.int8_tbe.min_speedup=100`; a leading `gate.` is accepted too.
    """
    return load_group("gate", GateConfig, source, overrides, validate)


__all__ = ["GateConfig", "RuleSet", "as_gate_config", "load_gate_config", "validate"]
