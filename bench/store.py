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
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Optional

from bench.io import DAMAGED_SUFFIX, JsonlLines, append_jsonl, parse_jsonl, read_json, read_jsonl, write_json_atomic, write_text_atomic, to_json
from bench.config import RECORDS_FILE
from bench.record import NewerSchema, RunRecord, SchemaError, reusable, withheld

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
            out.append(f"{len(self.damaged)} damaged line(s) skipped: {named_lines(self.damaged)}")
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


def named_lines(damaged: list[tuple[int, str]], most: int = 5) -> str:
    """`line 2 (not JSON ...), line 3 (...)`: damaged lines by number, the first `most` of them."""
    return ", ".join(f"line {n} ({why})" for n, why in damaged[:most]) + (" ..." if len(damaged) > most else "")


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


def read_record(path: Path) -> RunRecord:
    """A job folder's `record.json`, as `save_record` wrote it."""
    return RunRecord.from_dict(read_json(path))


def write_records(records: Iterable[RunRecord], path: Path) -> None:
    """A whole records.jsonl at once (a report folder's copy of its sweep's records)."""
    write_text_atomic(Path(path), "".join(to_json(r.stored_form()) + "\n" for r in records))


# ------------------------------------------------------------------------------ resume


class StoreIndex:
    """The ok and skipped records of a store by (config_hash, fingerprint), read incrementally.

    The store only grows by whole lines, so each lookup parses only what was appended since the
    last one (under the readers' shared lock). Damaged lines and newer records are skipped, as
    `read_store` skips them: their jobs simply run again, and the damaged lines are named by number
    in one warning each time they are first read (`python -m bench store repair` moves them aside).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._newlines = 0  # newlines before _offset: the line number the next chunk starts after
        self._latest: dict[tuple[str, str | None], RunRecord] = {}
        self._withheld: dict[tuple[str, str | None], RunRecord] = {}  # ok records whose answer the host withheld
        self.skipped: list[tuple[int, str]] = []  # the damaged lines read so far: (line number, why)

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._ident, self._offset, self._latest, self._withheld = None, 0, {}, {}
            return
        if self._ident != (st.st_dev, st.st_ino) or st.st_size < self._offset:  # a new file (a repair): read from the start
            self._ident, self._offset, self._newlines, self._latest, self._withheld, self.skipped = (st.st_dev, st.st_ino), 0, 0, {}, {}, []
        if st.st_size == self._offset:
            return
        with open(self.path, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            f.seek(self._offset)
            chunk = f.read()
        found = contents(parse_jsonl(chunk, self.path, first_line=self._newlines + 1))
        for record in found.records:
            key = (record.config_hash, (record.env or {}).get("fingerprint"))
            if reusable(record):
                self._latest[key] = record
            elif withheld(record):  # ok, but its answer withheld by the host (MEASURE_AGAIN): measured again
                self._withheld[key] = record
        if found.damaged:
            self.skipped += found.damaged
            log.warning("%s: resume skips %d damaged line(s), whose jobs run again if this sweep has them: %s "
                        "(python -m bench store repair %s moves them aside)", self.path, len(found.damaged),
                        named_lines(found.damaged, most=20), self.path.parent)
        # a torn tail is read again next time: the next append cuts it and writes whole lines there
        used = chunk[: found.torn_tail[0]] if found.torn_tail else chunk
        self._offset += len(used)
        self._newlines += used.count(b"\n")

    def latest(self, config_hash: str, fingerprint: str | None) -> RunRecord | None:
        """The last ok or skipped record stored for this config on this machine, if any (not one the host withheld)."""
        self._refresh()
        return self._latest.get((config_hash, fingerprint))

    def withheld(self, config_hash: str, fingerprint: str | None) -> RunRecord | None:
        """The last ok record of this config whose answer the host withheld (`MEASURE_AGAIN`), if any."""
        self._refresh()
        return self._withheld.get((config_hash, fingerprint))


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


MOVED = "moved aside by store repair"  # the side file's header of a line `repair` moved there


def store_path(folder: Path) -> Path:
    """The records.jsonl of a reports folder (or the file itself); FileNotFoundError where there is none."""
    folder = Path(folder)
    path = folder if folder.is_file() else folder / RECORDS
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no {RECORDS} here (give a reports folder or the file)")
    return path


def kept_aside(aside: Path) -> tuple[int, int]:
    """(torn tails, damaged lines) a side file holds: each is a `# ` header line, then the line itself."""
    torn = moved = 0
    pieces = aside.read_bytes().split(b"\n")
    i = 0
    while i < len(pieces):
        head = pieces[i]
        if head.startswith(b"# ") and (b": torn tail of " in head or MOVED.encode() in head):
            torn, moved = (torn + 1, moved) if b": torn tail of " in head else (torn, moved + 1)
            i += 2  # the line kept under its header
        else:
            i += 1
    return torn, moved


def check(folder: Path) -> tuple[list[str], bool]:
    """(lines that say what the store in `folder` holds, whether it is sound)."""
    path = store_path(folder)
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
        torn, moved = kept_aside(aside)
        held = [f"{torn} torn tail(s) cut from the store earlier"] * bool(torn) + [f"{moved} damaged line(s) moved there by store repair"] * bool(moved)
        lines.append(f"  {aside.name}: {' and '.join(held) or 'nothing this harness wrote'}, kept there")
    sound = not (found.damaged or found.torn_tail or dup)
    lines.append("sound: every line is a whole record" + (" (some of a newer schema)" if found.newer else "") if sound
                 else "NOT SOUND: see the lines above")
    return lines, sound


# ------------------------------------------------------------------------------ repairing


def repair(folder: Path) -> list[str]:
    """Move what makes the store in `folder` unsound to its side file, `records.jsonl.damaged`: each damaged line
    (not JSON, or not a record), a torn last line, and a line whose JSON is an earlier line's (one record stored twice:
    the store keeps the first). Each goes there under a header naming its
    line and why, appended and fsynced before the store changes. The new store (every other line, in order) is written
    to a temp file and renamed over the old one, under the old one's exclusive lock, so a writer waiting for the lock
    appends to the new file (bench.io) and no reader sees half of either. A line that repeats a record_id with other
    content is a record of its own: kept, and said. Returns what was done, one line each."""
    path = store_path(folder)
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the writers' lock: no append lands between the read and the rename
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        raw = data.split(b"\n")
        lines = parse_jsonl(data, path)
        moving = dict(lines.damaged)  # line number -> why
        if lines.torn_tail:
            moving[len(raw)] = f"a torn last line ({lines.torn_tail[1]} bytes, a writer killed mid-write)"
        first: dict[str, tuple[int, dict]] = {}  # record_id -> (the line that holds it first, its JSON)
        differing = []
        for lineno, obj in lines.lines:
            try:
                record_id = RunRecord.from_dict(obj).record_id
            except NewerSchema:
                continue  # kept: a newer harness reads it
            except (SchemaError, TypeError) as exc:
                moving[lineno] = " ".join(str(exc).split())  # one line: the side file pairs each header with one line
                continue
            if record_id not in first:
                first[record_id] = (lineno, obj)
            elif first[record_id][1] == obj:
                moving[lineno] = f"repeats line {first[record_id][0]}, record {record_id}, exactly"
            else:
                differing.append(lineno)
        if not moving:
            said = [f"{path}: nothing to move aside"]
        else:
            aside = path.with_name(path.name + DAMAGED_SUFFIX)
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            block = b"".join(f"# {stamp}: line {n} of {path.name} {MOVED} ({why}), {len(raw[n - 1])} bytes\n".encode()
                             + raw[n - 1] + b"\n" for n, why in sorted(moving.items()))
            with open(aside, "ab") as f:  # kept first: a crash before the rename leaves the line in both, never in neither
                f.write(block)
                f.flush()
                os.fsync(f.fileno())
            kept = [line for n, line in enumerate(raw, 1) if n not in moving and line.strip()]
            write_text_atomic(path, b"".join(line + b"\n" for line in kept))
            said = [f"{path}: moved {len(moving)} line(s) to {aside.name}: {named_lines(sorted(moving.items()), most=20)}; "
                    f"{len(kept)} line(s) kept, in order"]
        if differing:
            said.append(f"{path}: line(s) {', '.join(map(str, differing))} repeat a stored record_id with other content: "
                        "records of their own, kept (remove one by hand if one is wrong)")
        return said
    finally:
        os.close(fd)  # releases the lock on the old file; writers that waited take the new one's


def main(argv: list[str]) -> int:
    """`python -m bench store check|repair DIR`: check exits 0 sound, 1 problems found; repair exits 0 when the
    store is sound after it, 1 when something is left; 2 bad input."""
    if len(argv) != 2 or argv[0] not in ("check", "repair"):
        print("usage: python -m bench store check REPORTS_DIR, or python -m bench store repair REPORTS_DIR "
              "(moves damaged lines aside to records.jsonl.damaged)", file=sys.stderr)
        return 2
    try:
        done = repair(Path(argv[1])) if argv[0] == "repair" else []
        lines, sound = check(Path(argv[1]))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(done + lines))
    return 0 if sound else 1
