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
from matplotlib.transforms import offset_copy

from bench.metrics import AUC_DELTA, EMBEDDING_BYTES, SPEEDUP, hi, lo
from bench.report import fmt
from bench.report.machine import SCALE_PLOTS, scale_backends, scale_rows, swept
from bench.report.paramserver import cache_plot
from bench.results.key import BASELINE, backend_rank, section_point, shown_axes
from bench.results.readable import unreadable
from bench.results.table import DEFAULT_SPEED_MARGIN


def slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9._-]+", "-", str(p)).strip("-") for p in parts)


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _ok(df: pd.DataFrame, column: str) -> pd.DataFrame:
    return df[(df["status"] == "ok") & df[column].notna()]


MARKERS = "osD^vP*Xh<>p"


NOT_JUDGED_MARKER = "x"


def _not_judged(r) -> bool:
    """A row whose speedup says nothing to read: its interval too wide, or timed on a degraded kernel."""
    return unreadable(r.speedup, r.speedup_lo, r.speedup_hi) or isinstance(getattr(r, "kernel_degraded", None), str)


def speedup_figure(df: pd.DataFrame, workload: str, device: str) -> Figure | None:
    """Each backend's speedup against fp32 at each batch size (log x), with its interval as error bars: the
    paired figure the table and the bottom line read (fp32's row: the line at 1), not absolute samples/s,
    which move with the host between jobs. A speedup from two jobs' trials (unpaired) is drawn hollow; one
    with nothing to read (an interval too wide, a degraded kernel) is a cross without a bar. The dotted line
    is the bottom line's non-inferiority bound, 1 − the speed margin. None with no speedup but fp32's."""
    rows = _ok(df[(df["workload"] == workload) & (df["device"] == device) & (df["backend"] != BASELINE)], SPEEDUP)
    if rows.empty:
        return None
    fig = Figure(figsize=(7.2, 4.6))
    ax = fig.add_subplot()
    backends = sorted(rows["backend"].unique(), key=backend_rank)
    for i, backend in enumerate(backends):
        b = rows[rows["backend"] == backend].sort_values("batch_size")
        shift = 2 ** (0.06 * (i - (len(backends) - 1) / 2))  # side by side at one batch size: no bar hides another
        x = b["batch_size"] * shift
        judged = np.array([not _not_judged(r) for r in b.itertuples(index=False)])
        below, above = (b[SPEEDUP] - b[lo(SPEEDUP)]).clip(lower=0).fillna(0), (b[hi(SPEEDUP)] - b[SPEEDUP]).clip(lower=0).fillna(0)
        bars = np.where(judged, [below, above], 0.0)
        line = ax.errorbar(x[judged], b[SPEEDUP][judged], yerr=bars[:, judged], fmt=MARKERS[i % len(MARKERS)],
                           linestyle="-", capsize=3, label=backend)
        colour = line[0].get_color()
        unpaired = judged & (b["speedup_method"] == "unpaired").to_numpy()
        if unpaired.any():  # the same points, hollowed
            line[0].set_markevery([bool(v) for v in ~unpaired[judged]])
            ax.scatter(x[unpaired], b[SPEEDUP][unpaired], marker=MARKERS[i % len(MARKERS)], facecolors="none", edgecolors=colour, zorder=3)
        if (~judged).any():
            ax.scatter(x[~judged], b[SPEEDUP][~judged], marker=NOT_JUDGED_MARKER, color=colour, zorder=3)
    ax.axhline(1.0, color="grey", linewidth=0.9, label="fp32 (the reference)")
    margins = rows["speed_margin"].dropna() if "speed_margin" in rows.columns else pd.Series(dtype=float)
    margin = float(margins.iloc[0]) if not margins.empty else DEFAULT_SPEED_MARGIN
    ax.axhline(1.0 - margin, color="grey", linewidth=0.8, linestyle=":",
               label=f"{1 - margin:.2f}: not slower above (1 − the {margin:.0%} margin)")
    if (rows["speedup_method"] == "unpaired").any():
        ax.scatter([], [], marker="o", facecolors="none", edgecolors="grey", label="hollow: unpaired (two jobs' trials)")
    if any(_not_judged(r) for r in rows.itertuples(index=False)):
        ax.scatter([], [], marker=NOT_JUDGED_MARKER, color="grey", label="×: not judged (interval too wide, or a degraded kernel)")
    sizes = sorted(rows["batch_size"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(x) for x in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2f}×"))
    ax.set_xlabel("batch size (samples)")
    ax.set_ylabel("speedup against fp32 (bars: its interval)")
    ax.set_title(f"{workload} on {device}: throughput against fp32 (paired speedup)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the axes: no point hidden
    return fig


def throughput_plot(df: pd.DataFrame, workload: str, device: str, path: Path) -> Path | None:
    """`speedup_figure` saved to `path`; None when there is nothing to draw."""
    fig = speedup_figure(df, workload, device)
    return None if fig is None else _save(fig, path)


def frontier_plot(df: pd.DataFrame, workload: str, device: str, path: Path) -> Path | None:
    """ΔAUC (CI as error bars) against embedding bytes, one point per backend.

    Backends that store the same bytes (fp32, fp32_tbe, fake_quant) are spread a little apart on
    the log axis and each point is labelled, so every backend is visible; ticks are the byte
    sizes present, in MB.
    """
    rows = _ok(df[(df["workload"] == workload) & (df["device"] == device)], AUC_DELTA)
    rows = rows[rows[EMBEDDING_BYTES].notna()]
    if rows.empty:
        return None
    # AUC and bytes do not depend on the batch size: one point per backend (its largest batch).
    points = rows.sort_values("batch_size").groupby("backend", sort=False).tail(1)
    points = points.sort_values("backend", key=lambda s: s.map(backend_rank))
    fig = Figure(figsize=(7.2, 4.6))
    ax = fig.add_subplot()
    groups: dict[float, list] = {}  # backends that store the same bytes share one column of labels
    for i, r in enumerate(points.itertuples(index=False)):
        mb = r.embedding_bytes / fmt.MB
        group = groups.setdefault(round(mb, 6), [])
        x = mb * (1.06 ** len(group))  # side by side where sizes coincide
        group.append((r.backend, x, r.auc_delta))
        err = None
        if not (np.isnan(r.auc_delta_lo) or np.isnan(r.auc_delta_hi)):
            err = [[max(r.auc_delta - r.auc_delta_lo, 0.0)], [max(r.auc_delta_hi - r.auc_delta, 0.0)]]
        ax.errorbar([x], [r.auc_delta], yerr=err, fmt=MARKERS[i % len(MARKERS)], capsize=4, label=r.backend)
    for group in groups.values():
        # one label per line above the group's highest point, each tied to its own point by a thin line when shared
        top = max(y for _, _, y in group)
        for j, (name, x, y) in enumerate(group):
            place = offset_copy(ax.transData, fig=fig, x=-8 if len(group) > 1 else 6, y=6 + 11 * j, units="points")
            ax.annotate(name, (x, y), xytext=(group[0][1], top), textcoords=place, fontsize="x-small", va="bottom",
                        ha="right" if len(group) > 1 else "left",
                        annotation_clip=False, arrowprops=dict(arrowstyle="-", lw=0.5, color="grey") if len(group) > 1 else None)
    ax.margins(y=0.22)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    sizes = sorted(set(round(v, 6) for v in points[EMBEDDING_BYTES] / fmt.MB))
    ax.set_xticks(sizes)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlim(min(sizes) / 1.3, max(sizes) * 1.45)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt.signed(v)))
    ax.set_xlabel("embedding bytes (MB, log)")
    ax.set_ylabel("ΔAUC vs fp32 (95% CI)")
    ax.set_title(f"{workload} on {device}: accuracy against size")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def scale_plot(df: pd.DataFrame, access: str, path: Path) -> Path | None:
    """Speedup over fp32 of each quantized backend (one row of panels each) against fp32 table bytes
    (left: one line per batch size >= 1024) and against batch size (right: one line per table size),
    for one access pattern; bars span the 95% CI."""
    rows = scale_rows(df)
    rows = rows[(rows["access"] == access) & rows["backend"].isin(scale_backends(rows)) & rows[SPEEDUP].notna()]
    if rows.empty or not swept(rows):
        return None
    backends = scale_backends(rows)
    fig = Figure(figsize=(11, 3.6 * len(backends)))
    sizes = sorted(rows["fp32_embedding_bytes"].unique())
    batches = sorted(rows["batch_size"].unique())

    def bars(b: pd.DataFrame) -> np.ndarray:
        return np.array([(b[SPEEDUP] - b[lo(SPEEDUP)]).clip(lower=0).fillna(0), (b[hi(SPEEDUP)] - b[SPEEDUP]).clip(lower=0).fillna(0)])

    for i, backend in enumerate(backends):
        mine = rows[rows["backend"] == backend]
        left, right = fig.add_subplot(len(backends), 2, 2 * i + 1), fig.add_subplot(len(backends), 2, 2 * i + 2)
        for bs in (s for s in batches if s >= 1024):
            b = mine[mine["batch_size"] == bs].sort_values("fp32_embedding_bytes")
            left.errorbar(b["fp32_embedding_bytes"] / fmt.MB, b[SPEEDUP], yerr=bars(b), marker="o", capsize=3, label=f"batch {bs}")
        for size in sizes:
            b = mine[mine["fp32_embedding_bytes"] == size].sort_values("batch_size")
            right.errorbar(b["batch_size"], b[SPEEDUP], yerr=bars(b), marker="o", capsize=3, label=f"{size / fmt.MB:,.0f} MB")
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


def write_plots(df: pd.DataFrame, out_dir: Path) -> dict[tuple, list[Path]]:
    """Both plots for every (workload, device, point of the further axes a row moved: `shown_axes`), and
    the scale plots per access pattern under `SCALE_PLOTS`; returns the files written per group
    (`section_point`)."""
    out_dir = Path(out_dir)
    written: dict[tuple, list[Path]] = {}
    axes = shown_axes(df)
    for _, g in df.groupby(["workload", "device", *axes], sort=False, dropna=False):
        point = section_point(g, axes)
        workload, device = point[:2]
        name = slug(workload, device, *(f"{a}-{v}" for a, v in zip(axes, point[2:])))
        paths = [
            throughput_plot(g, workload, device, out_dir / f"throughput_{name}.png"),
            frontier_plot(g, workload, device, out_dir / f"frontier_{name}.png"),
            cache_plot(g, workload, device, out_dir / f"ps_cache_{name}.png"),
        ]
        written[point] = [p for p in paths if p is not None]
    scale = [scale_plot(df, access, out_dir / f"scale_{slug(access)}.png") for access in sorted(df["access"].dropna().unique())]
    if any(scale):
        written[SCALE_PLOTS] = [p for p in scale if p is not None]
    return written
