"""PNG plots from the results table, drawn with matplotlib's object API on the Agg canvas.

No pyplot: nothing global is touched, so the reporter works headless and inside tests.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from bench.report import fmt
from bench.report.machine import SCALE_BACKENDS, SCALE_PLOTS, scale_rows
from bench.report.table import backend_rank


def slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9._-]+", "-", str(p)).strip("-") for p in parts)


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _ok(df: pd.DataFrame, column: str) -> pd.DataFrame:
    return df[(df["status"] == "ok") & df[column].notna()]


def throughput_plot(df: pd.DataFrame, workload: str, device: str, path: Path) -> Path | None:
    """Samples/s against batch size, one line per backend, log x; bars span the trial interval."""
    rows = _ok(df[(df["workload"] == workload) & (df["device"] == device)], "throughput")
    if rows.empty:
        return None
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for backend in sorted(rows["backend"].unique(), key=backend_rank):
        b = rows[rows["backend"] == backend].sort_values("batch_size")
        ax.plot(b["batch_size"], b["throughput"], marker="o", label=backend)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(rows["batch_size"].unique()))
    ax.set_xticklabels([str(b) for b in sorted(rows["batch_size"].unique())])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("batch size (samples)")
    ax.set_ylabel("throughput (samples/s, median of trials)")
    ax.set_title(f"{workload} on {device}: throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def frontier_plot(df: pd.DataFrame, workload: str, device: str, path: Path) -> Path | None:
    """ΔAUC (CI as error bars) against embedding bytes, one point per backend."""
    rows = _ok(df[(df["workload"] == workload) & (df["device"] == device)], "auc_delta")
    rows = rows[rows["embedding_bytes"].notna()]
    if rows.empty:
        return None
    # AUC and bytes do not depend on the batch size: one point per backend (its largest batch).
    points = rows.sort_values("batch_size").groupby("backend", sort=False).tail(1)
    points = points.sort_values("backend", key=lambda s: s.map(backend_rank))
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for r in points.itertuples(index=False):
        x = r.embedding_bytes / fmt.MB
        err = None
        if not (np.isnan(r.auc_delta_lo) or np.isnan(r.auc_delta_hi)):
            err = [[max(r.auc_delta - r.auc_delta_lo, 0.0)], [max(r.auc_delta_hi - r.auc_delta, 0.0)]]
        ax.errorbar([x], [r.auc_delta], yerr=err, fmt="o", capsize=4, label=r.backend)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(sorted(set(points["embedding_bytes"] / fmt.MB)))
    ax.set_xlabel("embedding bytes (MB, log)")
    ax.set_ylabel("ΔAUC vs fp32 (95% CI)")
    ax.set_title(f"{workload} on {device}: accuracy against size")
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def scale_plot(df: pd.DataFrame, access: str, path: Path) -> Path | None:
    """Speedup over fp32 of each quantized backend (one row of panels each) against fp32 table bytes
    (left: one line per batch size >= 1024) and against batch size (right: one line per table size),
    for one access pattern; bars span the 95% CI."""
    rows = scale_rows(df)
    rows = rows[(rows["access"] == access) & rows["backend"].isin(SCALE_BACKENDS) & rows["speedup"].notna()]
    if rows.empty or rows["fp32_embedding_bytes"].nunique() < 2:
        return None
    backends = [b for b in SCALE_BACKENDS if (rows["backend"] == b).any()]
    fig = Figure(figsize=(11, 3.6 * len(backends)))
    sizes = sorted(rows["fp32_embedding_bytes"].unique())
    batches = sorted(rows["batch_size"].unique())

    def bars(b: pd.DataFrame) -> np.ndarray:
        return np.array([(b["speedup"] - b["speedup_lo"]).clip(lower=0).fillna(0), (b["speedup_hi"] - b["speedup"]).clip(lower=0).fillna(0)])

    for i, backend in enumerate(backends):
        mine = rows[rows["backend"] == backend]
        left, right = fig.add_subplot(len(backends), 2, 2 * i + 1), fig.add_subplot(len(backends), 2, 2 * i + 2)
        for bs in (s for s in batches if s >= 1024):
            b = mine[mine["batch_size"] == bs].sort_values("fp32_embedding_bytes")
            left.errorbar(b["fp32_embedding_bytes"] / fmt.MB, b["speedup"], yerr=bars(b), marker="o", capsize=3, label=f"batch {bs}")
        for size in sizes:
            b = mine[mine["fp32_embedding_bytes"] == size].sort_values("batch_size")
            right.errorbar(b["batch_size"], b["speedup"], yerr=bars(b), marker="o", capsize=3, label=f"{size / fmt.MB:,.0f} MB")
        left.set_xscale("log")
        left.set_xticks([x / fmt.MB for x in sizes])
        left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        left.xaxis.set_minor_formatter(NullFormatter())
        left.set_xlabel("tables in fp32 (MB, log)")
        right.set_xscale("log", base=2)
        right.set_xticks(batches)
        right.set_xticklabels([str(b) for b in batches])
        right.xaxis.set_minor_formatter(NullFormatter())
        right.set_xlabel("batch size (lines: tables in fp32)")
        for ax in (left, right):
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set_ylabel(f"{backend} / fp32 (95% CI)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize="x-small")
    fig.suptitle(f"access {access}: speedup over fp32 against table bytes and batch size")
    return _save(fig, path)


def write_plots(df: pd.DataFrame, out_dir: Path) -> dict[tuple[str, str], list[Path]]:
    """Both plots for every (workload, device), and the scale plots per access pattern under
    `SCALE_PLOTS`; returns the files written per group."""
    out_dir = Path(out_dir)
    written: dict[tuple[str, str], list[Path]] = {}
    for (workload, device), _ in df.groupby(["workload", "device"], sort=False):
        paths = [
            throughput_plot(df, workload, device, out_dir / f"throughput_{slug(workload, device)}.png"),
            frontier_plot(df, workload, device, out_dir / f"frontier_{slug(workload, device)}.png"),
        ]
        written[(workload, device)] = [p for p in paths if p is not None]
    scale = [scale_plot(df, access, out_dir / f"scale_{slug(access)}.png") for access in sorted(df["access"].dropna().unique())]
    if any(scale):
        written[SCALE_PLOTS] = [p for p in scale if p is not None]
    return written
