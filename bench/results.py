"""The run record: schema, atomic writes, and the JSONL store.

One JSON object per run. `record.json` is written by temp file + rename; `records.jsonl` is
appended under an exclusive lock and fsynced, so a kill never leaves half a line and parallel
launchers can share one file.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = 1
STATUSES = ("ok", "error", "skipped")


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunRecord":
        data = migrate(data)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class SchemaError(ValueError):
    pass


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older record up to SCHEMA_VERSION; refuse a newer one."""
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise SchemaError("record has no integer schema_version: not a bench run record")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"record schema_version {version} is newer than this harness reads ({SCHEMA_VERSION}): upgrade bench"
        )
    return dict(data)


def write_json_atomic(path: Path, data: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True, allow_nan=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def append_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append whole lines under an exclusive lock, then fsync."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(json.dumps(r, sort_keys=True, allow_nan=False, default=str) + "\n" for r in records)
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read_jsonl(path: Path) -> list[RunRecord]:
    """Read every record; a torn final line (a kill mid-write elsewhere) is an error, not a skip."""
    records = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SchemaError(f"{path}:{lineno}: not a JSON record ({exc.msg})") from None
            records.append(RunRecord.from_dict(data))
    return records


def save_record(record: RunRecord, run_dir: Path | None, reports_dir: Path) -> None:
    data = record.to_dict()
    if run_dir is not None:
        write_json_atomic(Path(run_dir) / "record.json", data)
    append_jsonl(Path(reports_dir) / "records.jsonl", [data])
