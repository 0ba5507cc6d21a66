"""The run record: schema, migrations, atomic writes, the JSONL store and its index.

One JSON object per run. `record.json` is written by temp file + rename; `records.jsonl` is
appended under an exclusive lock with one write and an fsync, so parallel launchers can share one
file, and an append first cuts off a torn tail left by a writer killed mid-write (its record never
completed), so the store only ever grows by whole lines. Readers take a shared lock.

Versions: a record carries `schema_version`. Older records are brought up to date step by step
through `MIGRATIONS` (version N -> N+1, as asv migrates its result files); a newer one is refused
with a message that says to upgrade. History:
  1: the first schema.
  2: `record_id` (unique per record) and `resumed_from` (the `record_id` of the measurement a
     resumed sweep re-emitted instead of measuring again).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import uuid
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from bench.hashing import config_hash

SCHEMA_VERSION = 2
STATUSES = ("ok", "error", "skipped")
RESUMABLE = ("ok", "skipped")  # a resumed sweep reuses these; `error` jobs run again


def new_record_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass
class RunRecord:
    status: str  # ok | error | skipped
    workload: str
    backend: str
    device: str
    batch_size: int
    config: dict[str, Any]
    config_hash: str
    env: dict[str, Any]
    # auc, logloss, ne, n_eval, oracle_auc, auc_fp32, auc_delta(_lo/_hi), throughput,
    # throughput_trials, latency_ms{p50,p90,p99}, latency_samples_ms, embedding_bytes,
    # model_bytes, peak_rss_bytes, cuda_peak_bytes, ...
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    schema_version: int = SCHEMA_VERSION
    record_id: str = field(default_factory=new_record_id)
    resumed_from: Optional[str] = None  # record_id of the stored measurement this record re-emits

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunRecord":
        data = migrate(data)
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise SchemaError(f"record lacks required field(s) {', '.join(missing)}: not a bench run record (or an incomplete one)")
        if data["status"] not in STATUSES:
            raise SchemaError(f"record status {data['status']!r} is not one of {', '.join(STATUSES)}")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class SchemaError(ValueError):
    pass


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    # A v1 record has no id: derive a stable one from its content, so it reads the same every time.
    return {**data, "record_id": "v1-" + config_hash(data, length=13), "resumed_from": None}


# MIGRATIONS[n] turns a version-n record into a version-(n+1) record.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older record up to SCHEMA_VERSION one step at a time; refuse a newer one."""
    if not isinstance(data, dict):
        raise SchemaError(f"record is a JSON {type(data).__name__}, not an object: not a bench run record")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SchemaError("record has no integer schema_version: not a bench run record")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"record schema_version {version} is newer than this harness reads ({SCHEMA_VERSION}): upgrade bench"
        )
    data = dict(data)
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
        data["schema_version"] = version
    return data


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


def _read_locked(path: Path) -> str:
    with open(path) as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)  # no line is half-appended while we read
        return f.read()


def read_jsonl(path: Path) -> list[RunRecord]:
    """Read every record; a torn final line (a kill mid-write elsewhere) is an error, not a skip."""
    records = []
    for lineno, line in enumerate(_read_locked(Path(path)).split("\n"), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{path}:{lineno}: not a JSON record ({exc.msg})") from None
        try:
            records.append(RunRecord.from_dict(data))
        except SchemaError as exc:
            raise SchemaError(f"{path}:{lineno}: {exc}") from None
    return records


def save_record(record: RunRecord, run_dir: Path | None, reports_dir: Path, store: bool = True) -> None:
    """`record.json` in the job's folder, and one line in `<reports_dir>/records.jsonl` (`store`)."""
    data = record.to_dict()
    if run_dir is not None:
        write_json_atomic(Path(run_dir) / "record.json", data)
    if store:
        append_jsonl(Path(reports_dir) / "records.jsonl", [data])


class StoreIndex:
    """The ok and skipped records of a `records.jsonl` store by (config_hash, fingerprint), read incrementally.

    The store only grows by whole lines, so each lookup reads just what was appended since the
    last one. A torn tail (a writer killed mid-write, before the next append cuts it off) and
    lines this harness cannot read are ignored: the jobs they belong to simply run again.
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
        end = chunk.rfind(b"\n") + 1  # whole lines only
        for line in chunk[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                record = RunRecord.from_dict(json.loads(line))
            except (ValueError, TypeError, KeyError):
                continue
            if record.status in RESUMABLE:
                self._latest[(record.config_hash, (record.env or {}).get("fingerprint"))] = record
        self._offset += end

    def latest(self, config_hash: str, fingerprint: str | None) -> RunRecord | None:
        """The last ok or skipped record stored for this config on this machine, if any."""
        self._refresh()
        return self._latest.get((config_hash, fingerprint))
