"""Where tests and benchmarks find the real Criteo sample rows (never copied into the repo).

`BENCH_CRITEO_DIR` overrides; otherwise `../shared/data/criteo` next to the checkout (the repo
root's parent holds `shared/`). Files are checked against the folder's `SHA256SUMS`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def criteo_data_dir() -> Path:
    env = os.environ.get("BENCH_CRITEO_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data" / "criteo"


def checksums(folder: Path) -> dict[str, str]:
    """name -> sha256 from SHA256SUMS ({} when the file is absent)."""
    sums = folder / "SHA256SUMS"
    if not sums.exists():
        return {}
    out = {}
    for line in sums.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            out[name.strip().lstrip("*")] = digest
    return out


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
