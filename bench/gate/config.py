"""The gate's typed config: thresholds per backend, declared in `conf/gate/<name>.yaml`.

`GateConfig` is the Hydra structured-config schema of the `gate` group (stored as
`gate/base_gate`); a run overrides a threshold with `gate.rules.<backend>.<rule>=VALUE`. Outside
Hydra (the `python -m bench.gate` CLI), `load_gate_config` reads the same YAML and applies
`rules.<backend>.<rule>=VALUE` overrides through `OmegaConf.from_dotlist`.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench.config import GateConfig
from bench.errors import UserError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "gate"


def as_gate_config(cfg: Any) -> GateConfig:
    """A GateConfig from a GateConfig, a (Hydra) DictConfig or a plain dict; validated."""
    if isinstance(cfg, GateConfig):
        validate(cfg)
        return cfg
    with _config_errors("bad gate config"):
        return _merged(cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg))


def _merged(*layers: Any) -> GateConfig:
    """The schema with `layers` (dicts or OmegaConf nodes) merged over it, in order; validated."""
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GateConfig), *layers))
    validate(cfg)
    return cfg


@contextmanager
def _config_errors(what: str) -> Iterator[None]:
    try:
        yield
    except OmegaConfBaseException as exc:
        raise UserError(f"{what}: {' '.join(str(exc).split())}") from None


def validate(cfg: GateConfig) -> None:
    if cfg.history_runs < 1:
        raise UserError(f"gate.history_runs must be at least 1, got {cfg.history_runs}")
    if cfg.history_auc_tolerance < 0 or cfg.history_throughput_tolerance < 0:
        raise UserError("gate.history_*_tolerance must not be negative")
    for backend, rules in cfg.rules.items():
        if rules.min_auc_ratio is not None and rules.min_auc_ratio <= 0:
            raise UserError(f"gate.rules.{backend}.min_auc_ratio must be positive (a fraction such as 0.999), got {rules.min_auc_ratio}")
        if rules.max_embedding_bytes is not None and rules.max_embedding_bytes < 0:
            raise UserError(f"gate.rules.{backend}.max_embedding_bytes must not be negative")


def load_gate_config(source: str | Path = "default", overrides: Iterable[str] = ()) -> GateConfig:
    """Read `conf/gate/<source>.yaml` (or a YAML path) and apply dotlist overrides.

    Overrides read `rules.int8_tbe.min_speedup=100`; a leading `gate.` is accepted too, so the
    same text works here and on the `python -m bench` command line. The YAML's Hydra `defaults`
    list may name only the schema (`base_gate`) and `_self_`.
    """
    path = Path(source)
    if path.suffix not in (".yaml", ".yml"):
        path = CONF_DIR / f"{source}.yaml"
    if not path.is_file():
        raise UserError(f"no gate config {str(path)!r}: name one in {CONF_DIR} or give a YAML path")
    with _config_errors("bad gate config or override"):
        node = OmegaConf.load(path)
        extra = [d for d in node.pop("defaults", []) if d not in ("base_gate", "_self_")]
        if extra:
            raise UserError(f"{path}: defaults {extra} need Hydra composition; load it through `python -m bench`")
        dotlist = [o[len("gate."):] if o.startswith("gate.") else o for o in overrides]
        return _merged(node, OmegaConf.from_dotlist(dotlist))
