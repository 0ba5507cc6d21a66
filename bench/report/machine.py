"""Report views of where each job stood against the machine, read from the results table's columns
(`bench.results.machine_columns`):

- per workload and device: what the timed batches touched at each batch size (the timing pool,
  unique ids per batch, rows touched, the working set against the last-level cache) and which
  kernels each backend ran;
- across a table-size sweep (the `access` and `table_rows` axes, `+sweep=scale`): the speedups of the quantized
  backends against table bytes and batch size, with their intervals and roofline shares.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from bench.metrics import SPEEDUP, hi, lo
from bench.registry import BASELINE_BACKEND as BASELINE
from bench.report import fmt
from bench.results.key import UNSHARDED, backend_rank

PERFORMANCE_ONLY_NOTE = (
    "performance only, no accuracy: the weights are untrained (random), so no AUC or ΔAUC is measured, "
    "and each job is timed alone (unpaired): no fp32 reference is built beside it, so no speedup"
)


def roofline_cell(r) -> str:
    """'3.21 (41%)': embedding GB/s and its share of the gather roofline."""
    if fmt.missing(r.embedding_gbps):
        return fmt.DASH
    return f"{r.embedding_gbps:.2f} ({100 * r.embedding_share:.0f}%)"


def percent(x: float) -> str:
    return fmt.DASH if fmt.missing(x) else f"{100 * float(x):.0f}%"


def access_table(g: pd.DataFrame) -> list[str]:
    """Per batch size: what the timed batches touched, with the working set at each backend's row width."""
    ok = g[(g["status"] == "ok") & g["pool_batches"].notna()]
    if ok.empty:
        return []
    rows = []
    for bs, b in ok.groupby("batch_size", sort=True):
        first = b.iloc[0]
        sets = ", ".join(f"{r.backend} {fmt.megabytes(r.working_set_bytes)}" for r in b.itertuples(index=False) if not fmt.missing(r.working_set_bytes))
        rows.append([
            str(bs), f"{fmt.count(first.pool_batches)} × {bs} = {fmt.count(first.pool_samples)}", fmt.count(first.unique_ids_per_batch),
            percent(first.rows_touched), sets, fmt.megabytes(first.llc_bytes),
        ])
    C = fmt.Column
    columns = [C("batch", align="r"), C("timing pool", "(distinct batches × size = samples)"), C("unique ids / batch / table", align="r"),
               C("rows touched / table", align="r"), C("working set", "MB (distinct rows × row bytes)"), C("LLC", "MB", "r")]  # fmt: skip
    kernels = ok.drop_duplicates("backend")
    lines = [
        "What the timed batches touched (the timing loop cycles through the pool; a working set far above the "
        "last-level cache cannot be served from it):",
        "",
        fmt.table(columns, rows),
        "",
        "Kernels each backend ran (one call, recorded by a dispatch mode): "
        + "; ".join(f"{r.backend}: {r.embedding_kernel} + {r.gemm_kernel}" for r in kernels.itertuples(index=False)) + ".",
        "",
    ]
    faults = ok["page_faults_per_call"].dropna()
    if not faults.empty:
        lines += [f"Minor page faults per timed call: median {faults.median():,.0f}, at most {faults.max():,.0f}.", ""]
    return lines


def scale_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of a table-size sweep (the `table_rows` axis set; a record written before the axis: a
    `name:tag` workload with an access pattern), with their fp32 table bytes."""
    legacy = df["access"].notna() & df["workload"].str.contains(":")
    ok = df[(df["status"] == "ok") & (df["table_rows"].notna() | legacy)]
    return ok[ok["fp32_embedding_bytes"].notna()]


def scale_backends(rows: pd.DataFrame) -> list[str]:
    """The backends a scale view shows, in table order: those whose tables are smaller than fp32's
    (compression above 1, measured), unsharded."""
    small = rows[(rows["compression"] > 1) & (rows["sharding"] == UNSHARDED[0])]
    return sorted(set(small["backend"]), key=backend_rank)


def swept(rows: pd.DataFrame) -> bool:
    """Whether the rows span at least two (table size, batch size) points: one table size swept over
    batch sizes (a reduced `+sweep=scale`) is a sweep too."""
    return len(rows[["fp32_embedding_bytes", "batch_size"]].drop_duplicates()) >= 2


def scale_section(df: pd.DataFrame) -> list[str]:
    """Speedups of the quantized backends against table bytes and batch size, with roofline shares."""
    rows = scale_rows(df)
    if rows.empty or not swept(rows):
        return []
    lines = [
        "## Scale: speedup against table bytes and batch size",
        "",
        "Speedup over fp32 at the same workload, device and batch size (95% CI); in brackets after each "
        "backend, the share of the gather roofline its embedding traffic reached.",
        "",
    ]
    present = scale_backends(rows)
    C = fmt.Column
    columns = [C("access"), C("tables", "MB fp32", "r"), C("batch", align="r"), C(f"{BASELINE} samples/s", "(roofline)", "r"),
               *(C(f"{b} speedup", "(roofline)") for b in present)]
    table = []
    for (access, size, workload), point in rows.groupby(["access", "fp32_embedding_bytes", "workload"], sort=True):
        by_key = {(r.batch_size, r.backend): r for r in point.itertuples(index=False)}
        for bs in sorted(point["batch_size"].unique()):
            base = by_key.get((bs, BASELINE))
            cells = [access, fmt.megabytes(size), str(bs),
                     fmt.DASH if base is None else f"{fmt.count(base.throughput)} ({percent(base.embedding_share)})"]
            for b in present:
                r = by_key.get((bs, b))
                cells.append(fmt.DASH if r is None else f"{fmt.ratio_ci(r.speedup, r.speedup_lo, r.speedup_hi)} ({percent(r.embedding_share)})")
            table.append(cells)
    lines += [fmt.table(columns, table), ""]
    lines += scale_verdicts(rows, present)
    return lines


def scale_verdicts(rows: pd.DataFrame, backends: list[str]) -> list[str]:
    """One sentence per backend: at batch >= 1024 on the largest tables, how many intervals lie above 1;
    and how close fp32's embedding traffic came to the gather roofline (how much fewer bytes can buy)."""
    largest = rows[rows["fp32_embedding_bytes"] == rows["fp32_embedding_bytes"].max()]
    out = []
    base = largest[largest["backend"] == BASELINE]["embedding_share"].dropna()
    if not base.empty:
        out.append(
            f"- fp32's embedding traffic on the largest tables reached {100 * base.min():.0f}-{100 * base.max():.0f}% of the "
            "gather roofline: where that share is small, the lookups are not waiting on memory, and rows with fewer "
            "bytes can only save the lookups' own share of the time."
        )
    for b in backends:
        big = largest[(largest["backend"] == b) & (largest["batch_size"] >= 1024)]
        if big.empty:
            continue
        above = big[big[lo(SPEEDUP)] > 1]
        below = big[big[hi(SPEEDUP)] < 1]
        by_access = defaultdict(list)
        for r in big.itertuples(index=False):
            by_access[r.access].append(f"{r.batch_size}: {r.speedup:.2f}×")
        detail = "; ".join(f"{a} ({', '.join(v)})" for a, v in by_access.items())
        out.append(
            f"- **{b}** on the largest tables ({fmt.megabytes(big['fp32_embedding_bytes'].iloc[0])} MB fp32), batch ≥ 1024: "
            f"{len(above)} of {len(big)} speedup intervals lie above 1, {len(below)} below 1 ({detail})."
        )
    return out + [""] if out else []


SCALE_PLOTS = ("scale", "")  # key of the scale plots among write_plots' groups
