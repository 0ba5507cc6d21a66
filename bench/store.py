"""The record store: `<reports_dir>/records.jsonl`, one run record per line, kept like a database.

What it promises (the README's "Exit codes and guarantees" says the same to users):
- An append is atomic: one locked, fsynced write of whole lines (`bench.io.append_jsonl`). A kill
  never leaves half a record; a torn tail left by a writer killed mid-write is copied to
  `records.jsonl.damaged` before the next append cuts it, and a last line that lost only its
  newline is completed. Lines already stored are never rewritten.
- Every reader (report, gate, compare, history, resume, `python -m bench store check`) reads through
  `read_store`, so they agree on what the store holds: the records, the damaged lines by number
  (skipped with one warning), and the lines of a newer schema (kept, named, not read).
- Resume claims a job before looking for its record (`Claims`): two concurrent identical sweeps
  measure each job once. A claim is an flock on `<reports_dir>/.claims/<job>.lock`, so the claim of
  a process that died is released by the kernel and taken over, never waited on forever.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from bench.io import DAMAGED_SUFFIX, JsonlLines, append_jsonl, parse_jsonl, read_jsonl, write_json_atomic, write_text_atomic, to_json
from bench.config import RECORDS_FILE
from bench.record import RESUMABLE, NewerSchema, RunRecord, SchemaError

RECORDS = RECORDS_FILE
CLAIMS = ".claims"
log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ reading


@dataclass
class StoreContents:
    """What one records.jsonl holds."""

    path: Path
    records: list[RunRecord] = field(default_factory=list)
    damaged: list[tuple[int, str]] = field(default_factory=list)  # (line number, why)
    newer: list[tuple[int, int]] = field(default_factory=list)  # (line number, schema_version)
    torn_tail: Optional[tuple[int, int]] = None  # (byte offset, bytes)

    def problems(self) -> list[str]:
        """What a reader skips, one phrase each (empty: every line is a record this harness reads)."""
        out = []
        if self.damaged:
            shown = ", ".join(f"line {n} ({why})" for n, why in self.damaged[:5]) + (" ..." if len(self.damaged) > 5 else "")
            out.append(f"{len(self.damaged)} damaged line(s) skipped: {shown}")
        if self.newer:
            versions = sorted({v for _, v in self.newer})
            out.append(f"{len(self.newer)} record(s) of a newer schema ({', '.join(map(str, versions))}) kept but not read: "
                       f"line {', '.join(str(n) for n, _ in self.newer[:5])}{' ...' if len(self.newer) > 5 else ''} (upgrade bench to read them)")
        if self.torn_tail:
            offset, size = self.torn_tail
            out.append(f"a torn last line at byte offset {offset} ({size} bytes, a writer killed mid-write) skipped: "
                       f"the next append copies it to {self.path.name}{DAMAGED_SUFFIX} and cuts it")
        return out

    def warning(self) -> Optional[str]:
        problems = self.problems()
        return f"{self.path}: " + "; ".join(problems) if problems else None


def contents(lines: JsonlLines) -> StoreContents:
    out = StoreContents(lines.path, damaged=list(lines.damaged), torn_tail=lines.torn_tail)
    for lineno, data in lines.lines:
        try:
            out.records.append(RunRecord.from_dict(data))
        except NewerSchema as exc:
            out.newer.append((lineno, exc.version))
        except (SchemaError, TypeError) as exc:
            out.damaged.append((lineno, str(exc)))
    out.damaged.sort()
    return out


def read_store(path: Path, warn: bool = True) -> StoreContents:
    """Every record of a records.jsonl; what was skipped is in the result (and logged once, `warn`)."""
    found = contents(read_jsonl(Path(path)))
    if warn and found.warning():
        log.warning("%s", found.warning())
    return found


def read_records(path: Path) -> list[RunRecord]:
    """The records of a records.jsonl (what `read_store` reads; skipped lines are logged)."""
    return read_store(path).records


# ------------------------------------------------------------------------------ writing


def append_records(path: Path, records: Iterable[RunRecord]) -> int:
    return append_jsonl(Path(path), [r.stored_form() for r in records], on_mend=lambda what: log.warning("%s: %s", path, what))


def save_record(record: RunRecord, run_dir: Path | None, reports_dir: Path, store: bool = True) -> None:
    """`record.json` in the job's folder, and one line in `<reports_dir>/records.jsonl` (`store`).
    The store line goes first: it is the record that must not be lost."""
    if store:
        append_records(Path(reports_dir) / RECORDS, [record])
    if run_dir is not None:
        write_json_atomic(Path(run_dir) / "record.json", record.stored_form())


def write_records(records: Iterable[RunRecord], path: Path) -> None:
    """A whole records.jsonl at once (a report folder's copy of its sweep's records)."""
    write_text_atomic(Path(path), "".join(to_json(r.stored_form()) + "\n" for r in records))


# ------------------------------------------------------------------------------ resume


class StoreIndex:
    """The ok and skipped records of a store by (config_hash, fingerprint), read incrementally.

    The store only grows by whole lines, so each lookup parses only what was appended since the
    last one (under the readers' shared lock). Damaged lines and newer records are skipped, as
    `read_store` skips them: their jobs simply run again.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._latest: dict[tuple[str, str | None], RunRecord] = {}

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._ident, self._offset, self._latest = None, 0, {}
            return
        if self._ident != (st.st_dev, st.st_ino) or st.st_size < self._offset:
            self._ident, self._offset, self._latest = (st.st_dev, st.st_ino), 0, {}
        if st.st_size == self._offset:
            return
        with open(self.path, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            f.seek(self._offset)
            chunk = f.read()
        found = contents(parse_jsonl(chunk, self.path))
        for record in found.records:
            if record.status in RESUMABLE:
                self._latest[(record.config_hash, (record.env or {}).get("fingerprint"))] = record
        # a torn tail is read again next time: the next append cuts it and writes whole lines there
        self._offset += found.torn_tail[0] if found.torn_tail else len(chunk)

    def latest(self, config_hash: str, fingerprint: str | None) -> RunRecord | None:
        """The last ok or skipped record stored for this config on this machine, if any."""
        self._refresh()
        return self._latest.get((config_hash, fingerprint))


class Claims:
    """Claims on jobs, taken by resume before it looks a job up and held until the record is stored.

    Use as a context manager around one job (find or measure, then store): `take` inside it blocks
    while another live process holds the same job's claim, so the second of two identical sweeps
    finds the first one's record instead of measuring again. Outside a `with`, `take` does nothing.
    """

    def __init__(self) -> None:
        self._held: dict[Path, int] = {}
        self._depth = 0

    def __enter__(self) -> "Claims":
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.release()

    def take(self, reports_dir: Path, job: str) -> None:
        if self._depth == 0:
            return
        path = Path(reports_dir) / CLAIMS / f"{job}.lock"
        if path in self._held:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if the holder dies
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a claim file its last holder unlinked while we waited
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._held[path] = fd
                return
            os.close(fd)

    def release(self) -> None:
        for path, fd in self._held.items():
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            os.close(fd)
        self._held.clear()


# ------------------------------------------------------------------------------ checking


def check(folder: Path) -> tuple[list[str], bool]:
    """(lines that say what the store in `folder` holds, whether it is sound)."""
    folder = Path(folder)
    path = folder if folder.is_file() else folder / RECORDS
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no {RECORDS} here (give a reports folder or the file)")
    found = read_store(path, warn=False)
    statuses = Counter(r.status for r in found.records)
    user = sum(r.user_error for r in found.records)
    ids = Counter(r.record_id for r in found.records)
    dup = sum(n - 1 for n in ids.values() if n > 1)
    lines = [f"{path}: {len(found.records)} records ({statuses['ok']} ok, {statuses['error']} error"
             + (f" of which {user} bad input" if user else "") + f", {statuses['skipped']} skipped)"]
    lines += [f"  {p}" for p in found.problems()]
    if dup:
        lines.append(f"  {dup} line(s) repeat a record_id already stored")
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    if aside.is_file():
        cut = sum(1 for line in aside.read_bytes().split(b"\n") if line.startswith(b"# "))
        lines.append(f"  {aside.name}: {cut} torn tail(s) cut from the store earlier, kept there")
    sound = not (found.damaged or found.torn_tail or dup)
    lines.append("sound: every line is a whole record" + (" (some of a newer schema)" if found.newer else "") if sound
                 else "NOT SOUND: see the lines above")
    return lines, sound


def main(argv: list[str]) -> int:
    """`python -m bench store check DIR`: 0 sound, 1 problems found, 2 bad input."""
    if len(argv) != 2 or argv[0] != "check":
        print("usage: python -m bench store check REPORTS_DIR", file=sys.stderr)
        return 2
    try:
        lines, sound = check(Path(argv[1]))
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0 if sound else 1
