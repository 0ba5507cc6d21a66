"""One way to turn Hydra overrides into the typed `Config`: `compose(["backend=int8_tbe", ...])`.

Tests, suites and benchmark scripts use it instead of Hydra's compose API; `python -m bench` goes
through `hydra.main` and converts its DictConfig with `to_config`. Either way the runner and the
plug-ins receive dataclasses (`bench.config.Config` and each plug-in's registered schema), never a
DictConfig.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from bench.config import CONF_DIR, Config, register_configs



def compose_dictconfig(overrides: Iterable[str] = (), with_hydra: bool = False) -> DictConfig:
    """The composed config as Hydra's DictConfig (what `python -m bench --cfg job` prints);
    `with_hydra` keeps the `hydra` node (sweeper params, callbacks)."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides), return_hydra_config=with_hydra)


def to_config(cfg: DictConfig | Config) -> Config:
    """The typed Config of a composed DictConfig (each group option as its registered dataclass)."""
    if isinstance(cfg, Config):
        return cfg
    return OmegaConf.to_object(cfg)


def compose(overrides: Iterable[str] = ()) -> Config:
    return to_config(compose_dictconfig(overrides))
