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
from bench.report.paramserver import cache_plot
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


def write_plots(df: pd.DataFrame, out_dir: Path) -> dict[tuple[str, str], list[Path]]:
    """Both plots for every (workload, device); returns the files written per group."""
    out_dir = Path(out_dir)
    written: dict[tuple[str, str], list[Path]] = {}
    for (workload, device), _ in df.groupby(["workload", "device"], sort=False):
        paths = [
            throughput_plot(df, workload, device, out_dir / f"throughput_{slug(workload, device)}.png"),
            frontier_plot(df, workload, device, out_dir / f"frontier_{slug(workload, device)}.png"),
            cache_plot(df, workload, device, out_dir / f"ps_cache_{slug(workload, device)}.png"),
        ]
        written[(workload, device)] = [p for p in paths if p is not None]
    return written
