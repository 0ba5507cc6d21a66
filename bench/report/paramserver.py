"""The parameter-server part of a report (`ps_redis` rows): a table of cache, pulls, latency split,
Redis memory and throughput against the in-memory backend of the same row precision (fp32 for fp32
rows, int8_tbe for int8, uint4 for int4), and a plot of throughput against cache fraction."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from bench.metrics import THROUGHPUT
from bench.record import RunRecord
from bench.report import fmt
from bench.results.key import as_dict, replace
from bench.results.table import trials
from bench.stats import ratio_interval

NOTES = [
    "Hit rates count a batch's unique ids found in the local cache; the timed calls start from a cold "
    "cache: warm-up is the timing warm-up, steady state the trials (which cycle over "
    "`timing.batches_per_trial` batches, so a larger value gives a longer stream).",
    "Pull rate is rows per second while pulling (one pipelined round trip per batch: Redis plus the "
    "client); rows/s and MB/s pulled are per second of timed calls. A batch's latency splits into "
    "PS pull, cache bookkeeping (unique ids, eviction, remapping) and compute (the rest of the model).",
    "vs in-memory: throughput / throughput of the in-memory backend with the same rows and kernel, at "
    "the same batch size (95% CI, bootstrap over trials); its AUC is the same exactly.",
]


def _pct(x) -> str:
    return fmt.DASH if fmt.missing(x) else f"{100 * float(x):.1f}%"


def ps_rows(latest: dict[tuple, RunRecord], workload: str, device: str) -> list[tuple[tuple, RunRecord]]:
    def at(k: tuple) -> dict:
        return as_dict(k)

    return sorted(
        ((k, r) for k, r in latest.items()
         if (at(k)["workload"], at(k)["device"]) == (workload, device) and r.status == "ok" and (r.metrics or {}).get("ps_twin")),
        key=lambda kr: (kr[1].metrics.get("ps_precision", ""), kr[1].metrics.get("ps_cache_fraction") or 0, at(kr[0])["batch_size"]),
    )


C = fmt.Column
# The PS table's figures: its column and the record's metric it shows, with the metric's format.
FIGURES = [
    (C("cache", align="r"), "ps_cache_fraction", _pct), (C("hit warm-up", align="r"), "ps_hit_rate_warmup", _pct),
    (C("hit steady", align="r"), "ps_hit_rate_steady", _pct), (C("rows pulled/batch", align="r"), "ps_rows_pulled_per_batch", fmt.count),
    (C("pull rows/s", align="r"), "ps_pull_rows_per_s", fmt.count), (C("rows/s pulled", align="r"), "ps_rows_pulled_per_s", fmt.count),
    (C("MB/s pulled", align="r"), "ps_bytes_pulled_per_s", fmt.megabytes), (C("pull", "ms", "r"), "ps_pull_ms", fmt.ms),
    (C("cache", "ms", "r"), "ps_cache_ms", fmt.ms), (C("compute", "ms", "r"), "ps_compute_ms", fmt.ms),
    (C("pull share", align="r"), "ps_pull_share", _pct), (C("Redis", "MB", "r"), "ps_redis_used_memory_bytes", fmt.megabytes),
    (C("rows stored", align="r"), "ps_rows_stored", fmt.count), (C("samples/s", align="r"), THROUGHPUT, fmt.count),
]  # fmt: skip


def ps_section(latest: dict[tuple, RunRecord], workload: str, device: str) -> list[str]:
    rows = []
    for k, r in ps_rows(latest, workload, device):
        m, backend, bs = r.metrics, as_dict(k)["backend"], as_dict(k)["batch_size"]
        twin = latest.get(replace(k, backend=m["ps_twin"]))  # the in-memory backend at the same point
        vs = fmt.DASH
        if twin is not None and twin.status == "ok" and trials(r) and trials(twin):
            vs = f"{fmt.ratio_ci(*ratio_interval(trials(r), trials(twin)))} {m['ps_twin']}"
        rows.append([backend, bs, *(show(m.get(name)) for _, name, show in FIGURES), vs])
    if not rows:
        return []
    columns = [C("backend"), C("batch", align="r"), *(c for c, _, _ in FIGURES), C("vs in-memory", "[95% CI]")]
    return ["Parameter server (`ps_redis`):", "", *[f"- {n}" for n in NOTES], "", fmt.table(columns, rows), ""]


def cache_plot(df: pd.DataFrame, workload: str, device: str, path: Path) -> Path | None:
    """Throughput against cache fraction, one line per (row precision, batch size); dashed: in memory."""
    g = df[(df["workload"] == workload) & (df["device"] == device) & (df["status"] == "ok")]
    ps = g[g["ps_twin"].notna() & g["ps_cache_fraction"].notna()]
    if ps.empty:
        return None
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for (twin, bs), rows in ps.groupby(["ps_twin", "batch_size"], sort=True):
        rows = rows.sort_values("ps_cache_fraction")
        rows_of = rows["ps_precision"].dropna().iloc[0] if rows["ps_precision"].notna().any() else twin  # the rows' precision, as stored
        line = ax.plot(rows["ps_cache_fraction"] * 100, rows[THROUGHPUT], marker="o", label=f"PS, {rows_of} rows, batch {bs}")[0]
        memory = g[(g["backend"] == twin) & (g["batch_size"] == bs)][THROUGHPUT]
        if not memory.empty:
            ax.axhline(float(memory.iloc[0]), linestyle="--", color=line.get_color(), linewidth=1, label=f"{twin} in memory, batch {bs}")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("local cache (% of each table's rows, log)")
    ax.set_ylabel("throughput (samples/s, median of trials)")
    ax.set_title(f"{workload} on {device}: parameter server vs cache size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
