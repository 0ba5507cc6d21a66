"""The results' row key, declared once: its axes, their order, how a record gives each, how a row is named.

A results row is one `KEY` (workload, device, backend, sharding, world_size, batch_size, then any
further axis a sweep declares in `AXES`: access, table_rows, threads), the newest record winning. A
serving row is one `SERVE_KEY`: the same axes and the serving ones (`SERVE_AXES`: scenario, bound,
batcher wait, workers). Every reader of the results (the
report's tables, results.csv, the gate's rows, the baseline comparison, the history) takes the axes
from here: a new axis is one `Axis` entry.

A further axis (past the six every harness version keyed by) reads one config value of the record
(`config_value`). It keys as None where the run did not move it off its `unswept` value, so a row of a
job that never swept it, and a history line written before the axis was declared, key alike. The
results table's column holds the value the record ran with. An axis declared `where_varied` (threads)
keys only where a set of records holds one point at several of its values (`in_context`): a sweep
pins one thread count for all its jobs and keys as before, recommend's jobs at 1 and 2 threads are two
rows.

`label` names a row's backend in the reports' tables: the backend, its placement when it did not run
unsharded in one process (`int8_tbe@row_wise×2`), and each further axis it moved
(`int8_tbe table_rows=10000`). `read_label` is its inverse for the placement, for the tables and
history lines written before sharding had columns of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from bench.record import RunRecord
from bench.registry import BASELINE_BACKEND, BATCHED_BACKEND

BASELINE = BASELINE_BACKEND
UNSHARDED = ("none", 1)  # (sharding, world_size) of a run in one process, its tables whole
# Backends whose order in tables is fixed; the others follow alphabetically.
LEADING_BACKENDS = (BASELINE_BACKEND, BATCHED_BACKEND)
# The axes every harness version keyed by; the others are further axes (`extra_axes`).
CORE = ("workload", "device", "backend", "sharding", "world_size", "batch_size")


def sharding_of(record: RunRecord) -> tuple[str, int]:
    """(sharding, world_size) the record ran with; ("none", 1) unsharded in one process."""
    config = record.config or {}
    return str((config.get("sharding") or {}).get("name", "none")), int(config.get("world_size", 1) or 1)


@dataclass(frozen=True)
class Axis:
    """One axis of the row key.

    `of` reads a record's value; `kind` is the cell's type (str or int); `default` is the value of a row
    or history line written before the axis existed (None: every row has it); `reference` says what the
    fp32 reference row of a row holds on this axis: None, the row's own value (it is compared at the
    same point), else that fixed value. `placement` marks the axes named after `@` in a label. A further
    axis keys as None at its `unswept` value (and where the record has none).
    """

    name: str
    of: Callable[[RunRecord], Any]
    kind: type = str
    default: Any = None
    reference: Any = None
    placement: bool = False
    unswept: Any = None
    where_varied: bool = False  # keys only where a set of records holds one point at several values (`in_context`)

    def keyed(self, value: Any) -> Any:
        """The value as the row key holds it: of the axis's kind; a further axis's unswept value is None."""
        if self.name not in CORE and (_absent(value) or value == self.unswept):
            return None
        if _absent(value):
            value = self.default
        try:
            return value if value is None else self.kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name} {value!r} is not {'an integer' if self.kind is int else 'text'}") from None


def config_value(path: str) -> Callable[[RunRecord], Any]:
    """An axis's reader: the record's config value at `path` (`workload.table_rows`); None where absent."""
    def read(record: RunRecord) -> Any:
        node: Any = record.config or {}
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        return node
    return read


AXES: tuple[Axis, ...] = (
    Axis("workload", lambda r: r.workload),
    Axis("device", lambda r: r.device),
    Axis("backend", lambda r: r.backend, reference=BASELINE),
    Axis("sharding", lambda r: sharding_of(r)[0], default=UNSHARDED[0], reference=UNSHARDED[0], placement=True),
    Axis("world_size", lambda r: sharding_of(r)[1], kind=int, default=UNSHARDED[1], reference=UNSHARDED[1], placement=True),
    Axis("batch_size", lambda r: int(r.batch_size), kind=int),
    # `+sweep=scale`: the access pattern and the rows of every table (bench.workloads.synthetic_scale)
    Axis("access", config_value("workload.access"), unswept="zipf"),
    Axis("table_rows", config_value("workload.table_rows"), kind=int),
    # the torch threads the job set (`threads`): recommend times each candidate at several. A sweep pins one count for
    # all its jobs, so threads keys only where the records hold one point at several counts (`in_context`)
    Axis("threads", config_value("threads"), kind=int, where_varied=True),
    # `+sweep=zoo`: the model family (conf/zoo/), so the families of one sweep keep rows of their own
    Axis("family", config_value("family")),
)
KEY = [a.name for a in AXES]


def server_bound(record: RunRecord) -> Any:
    """A serving job's p99 bound: the Server scenario's (an Offline run has none)."""
    serve = (record.config or {}).get("serve") or {}
    return serve.get("bound_ms") if serve.get("scenario") == "server" else None


# The axes a serving job has beside `AXES` (`+sweep=serve`, bench.results.serving_table): its LoadGen scenario, the
# Server bound, and the batcher's wait and workers. Each keys as the record holds it (None where absent).
SERVE_AXES: tuple[Axis, ...] = (
    Axis("scenario", config_value("serve.scenario")),
    Axis("bound_ms", server_bound, kind=float),
    Axis("max_wait_ms", config_value("serve.max_wait_ms"), kind=float),
    Axis("workers", config_value("serve.workers"), kind=int),
)
SERVE_KEY = [*KEY, *(a.name for a in SERVE_AXES)]


def serve_key_of(record: RunRecord) -> tuple:
    """A serving record's row key, in SERVE_KEY order: its results key, then its serving axes."""
    return (*key_of(record), *(a.keyed(a.of(record)) for a in SERVE_AXES))


def extra_axes() -> list[Axis]:
    return [a for a in AXES if a.name not in CORE]


def key_of(record: RunRecord) -> tuple:
    """The record's row key, in KEY order."""
    return tuple(a.keyed(a.of(record)) for a in AXES)


def in_context(keys: list[tuple], names: Sequence[str] = KEY) -> list[tuple]:
    """`keys` (each in `names` order) as a set of records keys them: an axis declared `where_varied` keeps its value
    only where the records hold that point (every other axis but the backend) at several of its values, else None.
    So the jobs a recommend timed at 1 and 2 threads are two rows, each against fp32 at its own thread count, while a
    sweep that pins one thread count (the serving sweep's 1) keys, labels and joins its rows as before the axis."""
    out = [list(k) for k in keys]
    for a in AXES:
        if not a.where_varied:
            continue
        i, skip = names.index(a.name), {names.index("backend"), names.index(a.name)}
        seen: dict[tuple, set] = {}
        for k in keys:
            seen.setdefault(tuple(v for j, v in enumerate(k) if j not in skip), set()).add(k[i])
        for k in out:
            if len(seen[tuple(v for j, v in enumerate(k) if j not in skip)]) < 2:
                k[i] = None
    return [tuple(k) for k in out]


def key_values(record: RunRecord, key: tuple | None = None) -> dict[str, Any]:
    """The record's value on each axis as the results table's columns show it (a further axis's as it ran; a
    `where_varied` one as `key`, the record's key in its set, holds it)."""
    key = dict(zip(KEY, key_of(record) if key is None else key))
    for a in extra_axes():
        value = a.of(record)
        key[a.name] = key[a.name] if _absent(value) or a.where_varied else a.kind(value)
    return key


def _get(row: Any) -> Callable[[str], Any]:
    if isinstance(row, Mapping):
        return row.get
    return lambda k: getattr(row, k, None)


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def row_key(row: Any) -> tuple:
    """The row key of a table row (a dict or a namedtuple), in KEY order. A row without placement columns
    (a results.csv or history line written before sharding had columns of its own) reads them from its
    backend cell (`read_label`); an axis a row lacks takes its default."""
    get = _get(row)
    values = {a.name: get(a.name) for a in AXES}
    if _absent(values["sharding"]):
        values["backend"], values["sharding"], values["world_size"] = read_label(str(get("backend")))
    return tuple(a.keyed(values[a.name]) for a in AXES)


def as_dict(key: tuple) -> dict[str, Any]:
    return dict(zip(KEY, key))


def replace(key: tuple, **values: Any) -> tuple:
    """`key` with the named axes set to `values`."""
    return tuple(values.get(k, v) for k, v in zip(KEY, key))


def reference_key(key: tuple) -> tuple:
    """The key of the row `key` is compared against: fp32, unsharded in one process, at the same point."""
    return tuple(v if a.reference is None else a.reference for a, v in zip(AXES, key))


def is_reference(key: tuple) -> bool:
    return reference_key(key) == tuple(key)


def label(backend: str, sharding: str = UNSHARDED[0], world_size: int = UNSHARDED[1], **extra: Any) -> str:
    """How the reports name a row: the backend, its sharding when it did not run unsharded in one process
    (`int8_tbe@row_wise×2`), and each further axis off its default (` name=value`)."""
    text = backend if (sharding, int(world_size)) == UNSHARDED else f"{backend}@{sharding}×{int(world_size)}"
    for a in extra_axes():
        value = a.keyed(extra.get(a.name))
        if value is not None:
            text += f" {a.name}={value}"
    return text


def key_label(key: tuple) -> str:
    d = as_dict(key)
    return label(d["backend"], d["sharding"], d["world_size"], **{a.name: d[a.name] for a in extra_axes()})


def read_label(text: str) -> tuple[str, str, int]:
    """`label`'s inverse for a backend cell written before sharding had columns of its own:
    `int8_tbe@row_wise×2` -> ("int8_tbe", "row_wise", 2); a bare name -> (name, "none", 1)."""
    name, at, rest = str(text).partition("@")
    sharding, times, ranks = rest.rpartition("×")[0], "×" in rest, rest.rpartition("×")[2]
    if not at or not times or not ranks.isdigit():
        return str(text), *UNSHARDED
    return name, sharding, int(ranks)


def record_label(record: RunRecord) -> str:
    """`label` of a record's row: its backend, placement and further axes (not the `where_varied` ones, which need the
    other records)."""
    return key_label(tuple(None if a.where_varied else v for a, v in zip(AXES, key_of(record))))


def backend_label(record: RunRecord) -> str:
    """The record's backend and placement alone (`int8_tbe@row_wise×2`)."""
    return label(record.backend, *sharding_of(record))


def row_label(row: Any) -> str:
    """`label` of a results-table row (a dict or a namedtuple); a row without sharding columns is unsharded."""
    get = _get(row)
    sharding, world_size = get("sharding"), get("world_size")
    if not isinstance(sharding, str) or _absent(world_size):
        return str(get("backend"))
    return label(str(get("backend")), sharding, int(world_size), **{a.name: get(a.name) for a in extra_axes()})


def backend_rank(backend: str) -> tuple[int, str, str]:
    """Where a row named `backend` (a `label`) sorts: fp32, fp32_tbe, then by name; a sharded row after
    its backend's unsharded one."""
    name, _, sharding = backend.partition("@")
    if name in LEADING_BACKENDS:
        return (LEADING_BACKENDS.index(name), "", sharding)
    return (len(LEADING_BACKENDS), name, sharding)


def sort_key(key: tuple) -> tuple:
    """Table order of a row key: workload, device, backend rank (`backend_rank` of its placement label),
    each further axis, batch size."""
    d = as_dict(key)
    extra = tuple((d[a.name] is None, d[a.name]) for a in extra_axes())
    return (d["workload"], d["device"], backend_rank(label(d["backend"], d["sharding"], d["world_size"])), *extra, d["batch_size"])


def shown_axes(df: Any) -> list[str]:
    """The further axes some row of a table moved off their unswept value: the columns its views show."""
    return [a.name for a in extra_axes() if a.name in df.columns and any(a.keyed(v) is not None for v in df[a.name])]


def section_point(rows: Any, axes: Any) -> tuple:
    """The (workload, device, value of each further axis in `axes`) a group of table rows shares."""
    return tuple(rows[c].iloc[0] for c in ("workload", "device", *axes))


def labelled(df: Any, further: bool = True) -> Any:
    """The results table as the reports show it: `backend` holds each row's `label`, so a sharded row stays
    apart from its unsharded twin in markdown tables and plots (results.csv keeps the backend alone).
    `further=False` leaves the further axes out of the label (a view with columns of their own)."""
    if df.empty or "sharding" not in df.columns:
        return df
    if not further:
        return df.assign(backend=[label(str(r["backend"]), r["sharding"], int(r["world_size"])) if isinstance(r["sharding"], str)
                                  else str(r["backend"]) for r in df.to_dict("records")])
    return df.assign(backend=[row_label(r) for r in df.to_dict("records")])
