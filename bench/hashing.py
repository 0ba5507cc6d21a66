"""Stable short hashes of resolved configs, for cache keys and record identity."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from omegaconf import OmegaConf


def config_hash(data: Any, length: int = 16) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def plain(cfg: Any) -> Any:
    """A config (OmegaConf node or dataclass) as plain, resolved Python containers; anything else as is."""
    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True)
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    return cfg
