"""Stable short hashes of resolved configs, for cache keys and record identity."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def config_hash(data: Any, length: int = 16) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
