"""The one I/O module: JSON serialization, atomic file writes, and JSONL files that never lose a line.

- `to_json` is the one serialization path for records, history lines, verdicts and caches: a
  non-finite number (NaN, inf; pandas' NaN for a missing cell) becomes `null` and is listed by
  `json_safe`, so a writer never crashes on data and never writes a token other JSON readers reject.
- `write_text_atomic` writes a temp file in the same folder, fsyncs and renames: readers see the
  old file or the new one.
- `append_jsonl` appends whole lines under an exclusive lock, with one write and an fsync. Before
  appending it mends the tail a writer killed mid-write may have left: a last line without its
  newline that parses as a whole JSON object is completed (never deleted); a torn one is first
  copied aside into `<file>.damaged` (with its offset) and only then cut off. Lines before the tail
  are never rewritten. A file replaced while a writer waited for its lock (`store repair`) is locked
  again and appended to, never the unlinked old one.
- `read_jsonl` reads under a shared lock and says what it found: the JSON objects with their line
  numbers, the damaged lines by number, and a torn tail. Every reader of a JSONL file goes through
  it, so the writer and every reader agree on what the file holds.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePath
from typing import Any, Callable, Iterable, Optional

import numpy as np

DAMAGED_SUFFIX = ".damaged"


# ------------------------------------------------------------------------------ serialization


def json_safe(value: Any, where: str = "", replaced: Optional[dict[str, str]] = None) -> Any:
    """`value` as plain JSON data: non-finite floats become None (their paths and kinds go to
    `replaced`), numpy scalars and arrays become Python numbers and lists, paths become strings.
    Anything else that JSON cannot hold is a TypeError naming where it sits, never a silent string."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isfinite(value):
            return value
        if replaced is not None:
            replaced[where or "."] = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return None
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v, f"{where}.{k}" if where else str(k), replaced) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_safe(v, f"{where}[{i}]", replaced) for i, v in enumerate(value)]
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{where or 'value'}: a {type(value).__name__} cannot be written as JSON")


def to_json(value: Any, indent: Optional[int] = None) -> str:
    """The JSON text of `value` (keys sorted; non-finite numbers as null, see `json_safe`)."""
    return json.dumps(json_safe(value), sort_keys=True, indent=indent, allow_nan=False)


# ------------------------------------------------------------------------------ atomic files


def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # not thread-safe, hence the /proc path first
    os.umask(mask)
    return mask


def write_text_atomic(path: Path, data: str | bytes) -> None:
    """Temp file in the same folder + fsync + rename: readers see the old file or the new one.

    The file gets the permissions `open()` would give it (mkstemp's are 0600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, to_json(data, indent=2) + "\n")


def read_json(path: Path) -> Any:
    """A JSON file written whole (`write_json_atomic`): no half-written file is ever read."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------ JSONL files


@dataclass
class JsonlLines:
    """What a JSONL file holds, as its one reader sees it."""

    path: Path
    lines: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (line number, object)
    damaged: list[tuple[int, str]] = field(default_factory=list)  # (line number, why), before the tail
    torn_tail: Optional[tuple[int, int]] = None  # (byte offset, bytes): a last line cut mid-write


def _parse(raw: bytes) -> tuple[Optional[dict[str, Any]], str]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except ValueError as exc:
        return None, f"not JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else exc})"
    if not isinstance(data, dict):
        return None, f"a JSON {type(data).__name__}, not an object"
    return data, ""


def parse_jsonl(data: bytes, path: Path, first_line: int = 1) -> JsonlLines:
    """Split `data` into objects, damaged lines and a torn tail (a last line without newline that
    does not parse). A last line without newline that parses is a whole line: kept."""
    out = JsonlLines(Path(path))
    pieces = data.split(b"\n")
    offset = 0
    for i, raw in enumerate(pieces):
        lineno, last = first_line + i, i == len(pieces) - 1
        if raw.strip():
            obj, why = _parse(raw)
            if obj is not None:
                out.lines.append((lineno, obj))
            elif last:
                out.torn_tail = (offset, len(raw))
            else:
                out.damaged.append((lineno, why))
        offset += len(raw) + 1
    return out


def read_jsonl(path: Path) -> JsonlLines:
    """Every line of a JSONL file, read under a shared lock (no line is half-appended meanwhile)."""
    with open(path, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        return parse_jsonl(f.read(), Path(path))


def _mend_tail(fd: int, path: Path) -> Optional[str]:
    """Under the writer's lock: complete a last line that parses, or copy a torn one aside and cut
    it. Returns what was done (None: the file ended in a newline)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    start, end, step = 0, size, 1 << 16
    while end > 0:  # the start of the last line
        lo = max(0, end - step)
        cut = os.pread(fd, end - lo, lo).rfind(b"\n")
        if cut >= 0:
            start = lo + cut + 1
            break
        end = lo
    tail = os.pread(fd, size - start, start)
    if _parse(tail)[0] is not None:
        os.write(fd, b"\n")  # a whole line whose newline was lost: complete it
        return f"completed the last line (offset {start}), which lacked its newline"
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    header = f"# {stamp}: torn tail of {path.name} at byte offset {start}, {len(tail)} bytes, cut from the file\n"
    with open(aside, "ab") as f:
        f.write(header.encode() + tail + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.ftruncate(fd, start)
    return f"cut a torn last line at offset {start} ({len(tail)} bytes, copied to {aside.name})"


def _locked(path: Path) -> int:
    """An fd of `path` for appending, under the exclusive lock. Where the file was replaced while this
    waited for the lock (`python -m bench store repair` writes a new file and renames it over the old one,
    under the old one's lock), the lock is taken again on the new file: an append to the old one would be lost."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            st, now = os.fstat(fd), os.stat(path)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def append_jsonl(path: Path, rows: Iterable[Any], unless: Callable[[dict[str, Any]], bool] | None = None,
                 on_mend: Callable[[str], None] | None = None) -> int:
    """Append whole lines under an exclusive lock, with one write, then fsync; returns lines written.

    The tail is mended first (`_mend_tail`; `on_mend` hears what was done). `unless(stored)`,
    checked under the lock against every stored object, skips the whole append when it holds for
    one (the history appends a run id only once).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [to_json(r) + "\n" for r in rows]
    payload = "".join(lines).encode()
    fd = _locked(path)
    try:
        mended = _mend_tail(fd, path)
        if mended and on_mend is not None:
            on_mend(mended)
        if unless is not None:
            stored = parse_jsonl(os.pread(fd, os.fstat(fd).st_size, 0), path)
            if any(unless(obj) for _, obj in stored.lines):
                return 0
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock
    return len(lines)


def compact_jsonl(path: Path, keep: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> int:
    """Rewrite a JSONL log with the objects `keep` picks from its whole lines (a damaged line is dropped with the rest),
    renamed over it under the appenders' exclusive lock: no append lands between the read and the rename, and an
    appender that waited for the lock takes it again on the new file (`_locked`). Returns the lines dropped."""
    path = Path(path)
    fd = _locked(path)
    try:
        stored = parse_jsonl(os.pread(fd, os.fstat(fd).st_size, 0), path)
        kept = keep([obj for _, obj in stored.lines])
        dropped = len(stored.lines) + len(stored.damaged) + bool(stored.torn_tail) - len(kept)
        if dropped:
            write_text_atomic(path, "".join(to_json(obj) + "\n" for obj in kept))
    finally:
        os.close(fd)  # releases the lock
    return dropped
