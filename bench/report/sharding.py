"""The report's sharding section: every sharded run with its AUC against the unsharded run of the same
backend (which must be equal), its global throughput, and the plan torchrec's planner produced:
which table went to which rank, and the bytes and peak memory of every rank."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from bench.metrics import AUC, EMBEDDING_BYTES, PEAK_RSS_BYTES, THROUGHPUT, hi, lo
from bench.record import RunRecord
from bench.report import fmt
from bench.results.key import backend_label, backend_rank, sharding_of

NOTES = [
    "ΔAUC vs unsharded is AUC(sharded) − AUC(the same backend unsharded, in one process) on the same eval "
    "samples. Sharding moves tables, not arithmetic: anything but exactly 0 is an error.",
    "Throughput is global: every rank's rows over the slowest rank's time, median over trials with a 95% "
    "bootstrap interval. `batch` is the global batch, split evenly over the ranks.",
    "Route `process_group`: one process per rank (DistributedModelParallel, collectives over gloo or NCCL), "
    "each rank holding only its own shards. Route `one_process`: torchrec's quantized inference sharding, "
    "one process holding every rank's shards (peak RSS is that process's).",
    "Bytes per rank: each shard's rows × FBGEMM's row bytes for its columns in the table's stored type.",
]
SHOWN_TABLES = 4  # table names listed per group in a plan line before "… (N tables)"


def is_sharded(record: RunRecord) -> bool:
    return backend_label(record) != record.backend


def sharding_section(records: Iterable[RunRecord]) -> list[str]:
    """Markdown lines; none when no record ran sharded."""
    rows = sorted((r for r in records if is_sharded(r)), key=lambda r: (r.workload, r.device, backend_rank(backend_label(r)), r.batch_size))
    if not rows:
        return []
    lines = ["## Sharding", "", *[f"- {note}" for note in NOTES], ""]
    columns = [fmt.Column(name) for name in ("workload", "device", "backend", "sharding", "ranks", "route", "batch", "status", "AUC",
                                              "ΔAUC vs unsharded", "samples/s [95% CI]", "emb MB per rank", "peak RSS MB per rank")]
    lines += [fmt.table(columns, [_row(r) for r in rows]), ""]
    plans = [(r, r.metrics["sharding"]) for r in rows if r.status in ("ok", "error") and (r.metrics or {}).get("sharding")]
    if plans:
        lines += ["### Plans", ""]
        for r, info in plans:
            lines.append(f"- **{backend_label(r)}** ({r.workload}, {r.device}, batch {r.batch_size}): " + plan_text(info))
        lines.append("")
    return lines


def _row(r: RunRecord) -> list[Any]:
    info = (r.metrics or {}).get("sharding") or {}
    per_rank = info.get("per_rank") or []
    delta = info.get("auc_delta_unsharded")
    if delta is None:
        delta_text = fmt.DASH
    elif delta == 0:
        delta_text = "0 (equal)"
    else:
        delta_text = f"**{delta:+.3g} ≠ 0**".replace("-", fmt.MINUS)
    m = r.metrics or {}
    return [
        r.workload, r.device, r.backend, *sharding_of(r),
        info.get("route", fmt.DASH) + (f" ({info['process_group']})" if info.get("process_group") else ""),
        r.batch_size, r.status,
        fmt.number(m.get(AUC)) if AUC in m else fmt.DASH,
        delta_text,
        f"{fmt.count(m[THROUGHPUT])} [{fmt.count(info.get(lo(THROUGHPUT)))}, {fmt.count(info.get(hi(THROUGHPUT)))}]" if THROUGHPUT in m else fmt.DASH,
        " / ".join(fmt.megabytes(p[EMBEDDING_BYTES]) for p in per_rank) or fmt.DASH,
        " / ".join(fmt.megabytes(p[PEAK_RSS_BYTES]) for p in per_rank) or fmt.DASH,
    ]  # fmt: skip


def plan_text(info: dict[str, Any]) -> str:
    """`table_wise → rank 0: t_cat_0, t_cat_2 (2 tables); …; bytes per rank 0.01 / 0.01 MB`."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for tables in (info.get("plan") or {}).values():
        for name, table in tables.items():
            groups[(table["sharding_type"], tuple(table["ranks"]), table["compute_kernel"], table.get("dtype"))].append(name)
    parts = []
    for (kind, ranks, kernel, dtype), names in sorted(groups.items()):
        where = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(str(x) for x in ranks)}"
        shown = ", ".join(names[:SHOWN_TABLES]) + (", …" if len(names) > SHOWN_TABLES else "")
        parts.append(f"{kind} → {where}: {shown} ({len(names)} {dtype} table{'s' if len(names) != 1 else ''}, {kernel} kernel)")
    per_rank = info.get("bytes_per_rank") or []
    tail = f"; bytes per rank {' / '.join(fmt.megabytes(b) for b in per_rank)} MB" if per_rank else ""
    return "; ".join(parts) + tail
