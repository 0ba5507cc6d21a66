"""Find and read stored records; every problem becomes a one-line UserError."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from bench.errors import UserError
from bench.record import RunRecord, SchemaError, read_jsonl

RECORDS = "records.jsonl"


def records_file(path: Path) -> Path:
    """`path` itself if a file, else `path/records.jsonl`, else `path/latest/records.jsonl`."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        raise UserError(f"{path}: no such file or directory (give a folder holding {RECORDS}, or the file)")
    for candidate in (path / RECORDS, path / "latest" / RECORDS):
        if candidate.is_file():
            return candidate
    raise UserError(f"{path}: no {RECORDS} in this folder (nor in {path / 'latest'})")


def load_records(path: Path) -> list[RunRecord]:
    file = records_file(path)
    try:
        records = read_jsonl(file)
    except SchemaError as exc:
        message = str(exc)
        raise UserError(message if message.startswith(str(file)) else f"{file}: {message}") from None
    except (TypeError, KeyError) as exc:
        raise UserError(f"{file}: a line is not a bench run record ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{file}: cannot read ({exc})") from None
    if not records:
        raise UserError(f"{file}: holds no records")
    return records


def load_many(paths: Iterable[Path]) -> list[RunRecord]:
    records: list[RunRecord] = []
    for p in paths:
        records += load_records(p)
    return records
