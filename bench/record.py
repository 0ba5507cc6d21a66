"""The run record: its schema and migrations. `bench.store` keeps records in a JSONL store.

One JSON object per run. Versions: a record carries `schema_version`. Older records are brought
up to date step by step through `MIGRATIONS` (version N -> N+1, as asv migrates its result files);
a newer one is refused with a message that says to upgrade (`NewerSchema`). History:
  1: the first schema.
  2: `record_id` (unique per record) and `resumed_from` (the `record_id` of the measurement a
     resumed sweep re-emitted instead of measuring again).
  3: `error_kind`: "user" when an `error` record holds bad input that only the running job could
     find (a batch larger than the eval split), so that reports and the gate tell it from a failed
     measurement. A `skipped` record may hold "not_applicable": the backend cannot take this model
     (its NotApplicable, e.g. a toolkit's export on a sequential model), not this machine.
"""

from __future__ import annotations

import uuid
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from bench.hashing import config_hash
from bench.metrics import MEASURE_AGAIN
from bench.io import json_safe

SCHEMA_VERSION = 3
STATUSES = ("ok", "error", "skipped")
USER = "user"
NOT_APPLICABLE = "not_applicable"  # a skipped record: the backend cannot take this model
ERROR_KINDS = (USER, NOT_APPLICABLE)
RESUMABLE = ("ok", "skipped")  # a resumed sweep reuses these; `error` jobs run again
# An ok record whose job withheld its answer because the host disturbed it (a paired Server job whose rounds were set
# aside, and so has no ratio) says why under metrics' MEASURE_AGAIN: a resumed sweep measures such a job again.


def withheld(record: "RunRecord") -> bool:
    """An ok record whose job withheld its answer because the host disturbed it: measured again (bench.cli.measure_again, resume)."""
    return record.status == "ok" and bool((record.metrics or {}).get(MEASURE_AGAIN))


MEASURED_AGAIN_AFTER = "measured_again_after"  # metrics key: the withheld record this one measured its job again after


def measured_again_after(record: "RunRecord", withheld_record_id: str) -> None:
    """Name in a new measurement the stored record of the same job whose answer the host withheld (that one stays in
    the store as it was). A record handed back from the store (resume) is not a new measurement: left as it is."""
    if not record.resumed_from:
        record.metrics[MEASURED_AGAIN_AFTER] = withheld_record_id


def reusable(record: "RunRecord") -> bool:
    """A record a resumed sweep hands back: ok or skipped, and not one whose answer the host withheld."""
    return record.status in RESUMABLE and not withheld(record)


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
    error_kind: Optional[str] = None  # "user": the error is bad input found while running (ERROR_KINDS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def stored_form(self) -> dict[str, Any]:
        """The record as JSON data: a non-finite metric is stored as null and named, with what it
        was, under `metrics.non_finite` (a reader sees the value was not measurable, not absent)."""
        replaced: dict[str, str] = {}
        data = json_safe(self.to_dict())
        data["metrics"] = json_safe(self.metrics or {}, replaced=replaced)
        if replaced:
            data["metrics"]["non_finite"] = {**(data["metrics"].get("non_finite") or {}), **replaced}
        return data

    @property
    def user_error(self) -> bool:
        return self.status == "error" and self.error_kind == USER

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunRecord":
        data = migrate(data)
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise SchemaError(f"record lacks required field(s) {', '.join(missing)}: not a bench run record (or an incomplete one)")
        if data["status"] not in STATUSES:
            raise SchemaError(f"record status {data['status']!r} is not one of {', '.join(STATUSES)}")
        if data.get("error_kind") not in (None, *ERROR_KINDS):
            raise SchemaError(f"record error_kind {data['error_kind']!r} is not one of {', '.join(ERROR_KINDS)}")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def is_serving(record: RunRecord) -> bool:
    """A serving job (`+sweep=serve`): reports show it in serve.md and the gate joins it by scenario and bound."""
    return (record.config or {}).get("serve") is not None and measure_of(record) is None


def measure_of(record: RunRecord) -> str | None:
    """The part of a job the record measured (`facts`, `served`: Config.measure, run by recommend's plan), or None for a
    whole job. Such records have a table of their own (bench.results.parts), never a row of the results table."""
    return (record.config or {}).get("measure")


class SchemaError(ValueError):
    pass


class NewerSchema(SchemaError):
    """A record written by a newer harness: kept in the store, named, not read."""

    def __init__(self, version: int) -> None:
        super().__init__(f"record schema_version {version} is newer than this harness reads ({SCHEMA_VERSION}): upgrade bench")
        self.version = version


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    # A v1 record has no id: derive a stable one from its content, so it reads the same every time.
    return {**data, "record_id": "v1-" + config_hash(data, length=13), "resumed_from": None}


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "error_kind": None}  # older harnesses stored every failure as a plain error


# MIGRATIONS[n] turns a version-n record into a version-(n+1) record.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older record up to SCHEMA_VERSION one step at a time; refuse a newer one."""
    if not isinstance(data, dict):
        raise SchemaError(f"record is a JSON {type(data).__name__}, not an object: not a bench run record")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SchemaError("record has no integer schema_version: not a bench run record")
    if version > SCHEMA_VERSION:
        raise NewerSchema(version)
    data = dict(data)
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
        data["schema_version"] = version
    return data


# What the eager fp32 reference of a paired speedup runs: a speedup rests on these kernels too.
REFERENCE_FAMILIES = ("embedding_bag_fp32", "gemm_fp32")


def degraded_kernels(record: RunRecord, reference: bool = True) -> list[dict[str, Any]]:
    """The degraded kernel families (`env.kernel_health`, bench.devices) this record's speed
    rests on, each with its verdict: the families its call ran (`metrics.kernel_families`; every degraded
    one where the record does not say which it ran), and with `reference` the fp32 reference's as well."""
    health = (record.env or {}).get("kernel_health") or {}
    degraded = health.get("degraded") or []
    if not degraded or record.status != "ok":
        return []
    used = (record.metrics or {}).get("kernel_families")
    relevant = set(degraded) if used is None else set(used) | (set(REFERENCE_FAMILIES) if reference else set())
    verdicts = health.get("verdicts") or {}
    return [{"family": family, **verdicts.get(family, {})} for family in degraded if family in relevant]


def kernel_verdict_text(v: dict[str, Any]) -> str:
    """One degraded kernel in words: measured against expected time, the likely cause and the fix."""
    measured, expected, unit = v.get("measured_ns"), v.get("expected_ns"), v.get("unit", "")
    timing = (f"{measured:.1f} {unit} against at most {expected:.1f} expected" if isinstance(measured, (int, float))
              and isinstance(expected, (int, float)) and measured == measured else v.get("why") or "degraded")
    return "; ".join(filter(None, [f"{v['family']}: {timing}", v.get("cause") and f"likely cause: {v['cause']}",
                                   v.get("fix") and f"fix: {v['fix']}"]))
