"""Find and read stored records through the store's one reader; every problem becomes a one-line UserError."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

from omegaconf import OmegaConf

from bench.config import CompareConfig
from bench.config.files import config_errors, merged, validate_compare
from bench.errors import UserError
from bench.record import RunRecord
from bench.store import RECORDS, read_store

log = logging.getLogger(__name__)
GATE_CONFIG = "gate_config.yaml"  # beside a report folder's records: the gate and compare configs its verdict was judged with


def records_file(path: Path) -> Path:
    """`path` itself if a file, else `path/records.jsonl`, else `path/latest/records.jsonl`."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        pointers = _pointers_beside(path)
        if pointers:
            raise UserError(f"{path}: no such file or directory; beside it: {', '.join(pointers)} (give one of them, "
                            "`latest` is the sweep as configured; a run with overrides has only its latest-<overrides>)")
        raise UserError(f"{path}: no such file or directory (give a folder holding {RECORDS}, or the file)")
    for candidate in (path / RECORDS, path / "latest" / RECORDS):
        if candidate.is_file():
            return candidate
    raise UserError(f"{path}: no {RECORDS} in this folder (nor in {path / 'latest'})")


def _pointers_beside(path: Path, most: int = 5) -> list[str]:
    """The `latest-*` pointers in the folder that would hold `path` (a sweep's per-variant pointers), newest first."""
    folder = path.parent
    if not folder.is_dir():
        return []
    found = [p for p in folder.glob("latest*") if p.name != path.name and p.exists()]
    found.sort(key=lambda p: p.resolve().name, reverse=True)
    names = [str(p) for p in found[:most]]
    return names + ([f"... {len(found) - most} more"] if len(found) > most else [])


def load_records(path: Path) -> list[RunRecord]:
    """The records a store holds; lines it cannot read are skipped with one warning (`read_store`)."""
    file = records_file(path)
    try:
        found = read_store(file, warn=False)
    except OSError as exc:
        raise UserError(f"{file}: cannot read ({exc})") from None
    if not found.records:
        why = "; ".join(found.problems())
        raise UserError(f"{file}: holds no records this harness can read" + (f" ({why})" if why else ""))
    if found.warning():
        log.warning("%s", found.warning())
    return found.records


def stored_compare(folder: Path) -> CompareConfig | None:
    """The compare config a report folder's gate verdict was judged with (its gate_config.yaml), or None
    where the folder was never gated."""
    path = Path(folder) / GATE_CONFIG
    if not path.is_file():
        return None
    with config_errors(f"bad stored gate config {path}"):
        node = OmegaConf.load(path)
        compare = node.get("compare") if OmegaConf.is_dict(node) else None
        return merged(CompareConfig, compare or {}, validate=validate_compare)


def load_many(paths: Iterable[Path]) -> list[RunRecord]:
    records: list[RunRecord] = []
    for p in paths:
        records += load_records(p)
    return records
