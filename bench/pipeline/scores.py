"""Eval scores (labels, logits) per (model, backend config, device), in memory and on disk.

The disk key covers the model, the backend config, the device type, the workload, the seed, the
calibration batch size and a digest of the harness's code, so a warm re-run skips evaluation but
never reuses scores from other code. A cache file that cannot be read (truncated by a kill) is a
miss and is written anew; non-finite scores are never cached, so a retry scores again.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from bench.hashing import config_hash

log = logging.getLogger(__name__)
Scores = tuple[np.ndarray, np.ndarray]


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """Digest of the harness's sources: cached scores never outlive a code change."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    h.update(torch.__version__.encode())
    return h.hexdigest()[:16]


def scores_key(identity: dict) -> str:
    return config_hash({**identity, "code": code_digest()})


class ScoreCache:
    def __init__(self) -> None:
        self._memory: dict[str, Scores] = {}

    def clear(self) -> None:
        self._memory.clear()

    def __len__(self) -> int:
        return len(self._memory)

    def cached(self, key: str, cache_dir: Path) -> Scores | None:
        """From memory or disk, or None."""
        if key not in self._memory:
            path = _path(cache_dir, key)
            found = read_scores(path) if path.exists() else None
            if found is None:
                return None
            self._memory[key] = found
        return self._memory[key]

    def get(self, key: str, cache_dir: Path, score_now: Callable[[], Scores]) -> Scores:
        """Cached scores, or `score_now()` stored in memory and on disk (when finite)."""
        found = self.cached(key, cache_dir)
        if found is not None:
            return found
        result = score_now()
        if not np.all(np.isfinite(result[1])):
            return result  # a failure (accuracy_metrics says so): never cached
        write_scores(_path(cache_dir, key), result)
        self._memory[key] = result
        return result


def _path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / "scores" / f"{key}.npz"


def write_scores(path: Path, scores: Scores) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")  # per process: parallel jobs may share the cache
    try:
        np.savez(tmp, labels=scores[0], logits=scores[1])
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def read_scores(path: Path) -> Scores | None:
    """Cached scores, or None (a miss) when the file is truncated, foreign or inconsistent."""
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with data:
            labels, logits = data["labels"], data["logits"]
        if labels.ndim == 1 and labels.shape == logits.shape:
            return labels, logits
        raise ValueError("labels and logits do not match")
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        log.warning("scores cache %s is unreadable (%s: %s): scoring again", path, type(exc).__name__, exc)
    return None
