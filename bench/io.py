"""The one I/O module: atomic file writes and locked JSONL appends.

`write_text_atomic` writes a temp file in the same folder, fsyncs and renames, so readers see the
old file or the new one. `append_jsonl` appends whole lines under an exclusive lock with one write
and an fsync, first cutting off a torn tail left by a writer killed mid-write, so a JSONL file only
ever grows by whole lines. Readers take a shared lock (`read_locked`). The record store, the
nightly history, reports, gate files, checkpoints and Criteo metadata all write through here.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable


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
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False, default=str) + "\n")


def cut_torn_tail(fd: int) -> None:
    """Truncate a last line without its newline: the record of a writer killed mid-write."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end, step = size, 1 << 16
    while end > 0:
        start = max(0, end - step)
        chunk = os.pread(fd, end - start, start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            os.ftruncate(fd, start + cut + 1)
            return
        end = start
    os.ftruncate(fd, 0)


def append_jsonl(path: Path, records: Iterable[dict[str, Any]],
                 unless: Callable[[dict[str, Any]], bool] | None = None) -> int:
    """Append whole lines under an exclusive lock, with one write, then fsync; returns lines written.

    `unless(stored_line)`, checked under the lock against every stored line that parses, skips
    the whole append when it holds for one (the history appends a run id only once).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, sort_keys=True, allow_nan=False, default=str) + "\n" for r in records]
    payload = "".join(lines).encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        cut_torn_tail(fd)
        if unless is not None and any(unless(line) for line in _stored_lines(fd)):
            return 0
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock
    return len(lines)


def _stored_lines(fd: int) -> Iterable[dict[str, Any]]:
    for raw in os.pread(fd, os.fstat(fd).st_size, 0).split(b"\n"):
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            yield line


def read_locked(path: Path) -> str:
    with open(path) as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)  # no line is half-appended while we read
        return f.read()
