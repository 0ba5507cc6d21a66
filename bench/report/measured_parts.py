"""report.md's section of the parts of jobs recommend's plan ran (bench.results.parts): each backend's ΔAUC and
model MB (`facts`), and its served batch times beside fp32's at each batcher size and thread count (`served`)."""

from __future__ import annotations

from typing import Any, Iterable


from bench.config import FACTS, SERVED
from bench.metrics import AUC_DELTA, hi, lo
from bench.record import RunRecord
from bench.report import fmt
from bench.results.key import label
from bench.results.parts import measured_table


def _name(r: dict[str, Any]) -> str:
    return label(r["backend"], r["sharding"], r["world_size"], access=r["access"], table_rows=r["table_rows"])


def _num(x: Any, spec: str) -> str:
    return fmt.DASH if fmt.missing(x) else format(x, spec)


def _threads(x: Any) -> str:
    return "torch's default" if fmt.missing(x) else str(int(x))


def measured_parts_section(records: Iterable[RunRecord]) -> list[str]:
    """The section's lines ([] without such records)."""
    df = measured_table(records)
    if df.empty:
        return []
    lines = ["## Measured for recommend", "",
             "Parts of jobs `python -m bench recommend` ran through the same runner and store (`measure=facts`: ΔAUC against "
             "fp32 and model size, nothing timed; `measure=served`: the serving function's median batch time beside fp32's, "
             "each after its own batch), the newest record per key.", ""]
    rows = [r for r in df.to_dict("records") if r["measure"] == FACTS]
    if rows:
        table = [[r["workload"], r["device"], _name(r), r["status"] if r["status"] != "ok" else
                  f"{_num(r[AUC_DELTA], '+.5f')} [{_num(r[lo(AUC_DELTA)], '+.5f')}, {_num(r[hi(AUC_DELTA)], '+.5f')}]".replace("-", fmt.MINUS),
                  _num(r["model_mb"], ".2f"), _num(r["embedding_mb"], ".2f"), fmt.first_line(r["error"])] for r in rows]
        lines += [fmt.markdown_table(["workload", "device", "backend", "ΔAUC [95%]", "model MB", "tables MB", "why not"], table,
                                     "lllrrrl"), ""]
    rows = [r for r in df.to_dict("records") if r["measure"] == SERVED]
    if rows:
        table = [[r["workload"], r["device"], _name(r), str(int(r["batch_size"])), _threads(r["threads"]), _num(r["served_pairs"], ".0f"),
                  _num(r["served_ms"], ".3f"), _num(r["fp32_served_ms"], ".3f"), _num(r["residue"], ".2f"),
                  fmt.first_line(r["error"])] for r in rows]
        lines += [fmt.markdown_table(["workload", "device", "backend", "batcher rows", "threads", "pairs", "ms", "fp32 ms",
                                      "after the other", "why not"], table, "lllrrrrrrl"), ""]
    return lines


__all__ = ["measured_parts_section"]
