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

from bench.metrics import AUC_DELTA, EMBEDDING_BYTES, SPEEDUP, THROUGHPUT, hi, lo
from bench.report import fmt
from bench.report.machine import SCALE_PLOTS, scale_backends, scale_rows, swept
from bench.report.paramserver import cache_plot
from bench.results.key import backend_rank, section_point, shown_axes


def slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9._-]+", "-", str(p)).strip("-") for p in parts)


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _ok(df: pd.DataFrame, column: str) -> pd.DataFrame:
    return df[(df["status"] == "ok") & df[column].notna()]


MARKERS = "osD^vP*Xh<>p"


def _trial_band(row, trials_of) -> tuple[float, float]:
    """Error bar below/above a throughput point: the spread of its trials."""
    t = trials_of(row)
    if not t:
        return 0.0, 0.0
    return max(row.throughput - min(t), 0.0), max(max(t) - row.throughput, 0.0)


def throughput_plot(df: pd.DataFrame, workload: str, device: str, path: Path, trials_of=None) -> Path | None:
    """Samples/s against batch size, one line per backend, log x. Error bars span the trials;
    an unstable row (timing too noisy) is drawn hollow and hatched, and the legend says so."""
    rows = _ok(df[(df["workload"] == workload) & (df["device"] == device)], THROUGHPUT)
    if rows.empty:
        return None
    fig = Figure(figsize=(7.2, 4.6))
    ax = fig.add_subplot()
    any_unstable = False
    for i, backend in enumerate(sorted(rows["backend"].unique(), key=backend_rank)):
        b = rows[rows["backend"] == backend].sort_values("batch_size")
        marker = MARKERS[i % len(MARKERS)]
        err = None
        if trials_of is not None:
            bands = [_trial_band(r, trials_of) for r in b.itertuples(index=False)]
            err = [[lo for lo, _ in bands], [hi for _, hi in bands]]
        line = ax.errorbar(b["batch_size"], b[THROUGHPUT], yerr=err, marker=marker, capsize=3, label=backend)
        unstable = b[b["stable"] == False]  # noqa: E712 - None (not recorded) is not unstable
        if not unstable.empty:
            any_unstable = True
            ax.scatter(unstable["batch_size"], unstable[THROUGHPUT], s=160, facecolors="none", hatch="///",
                       edgecolors=line[0].get_color(), linewidths=1.2, zorder=3)
    if any_unstable:
        ax.scatter([], [], s=160, facecolors="none", hatch="///", edgecolors="grey", label="unstable timing (not a finding)")
    sizes = sorted(rows["batch_size"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(x) for x in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("batch size (samples)")
    ax.set_ylabel("throughput (samples/s; bars: trial range)")
    ax.set_title(f"{workload} on {device}: throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the axes: no point hidden
    return _save(fig, path)


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


def write_plots(df: pd.DataFrame, out_dir: Path, trials_of=None) -> dict[tuple, list[Path]]:
    """Both plots for every (workload, device, point of the further axes a row moved: `shown_axes`), and
    the scale plots per access pattern under `SCALE_PLOTS`; returns the files written per group
    (`section_point`). `trials_of(row)` gives a row's per-trial throughputs for the error bars."""
    out_dir = Path(out_dir)
    written: dict[tuple, list[Path]] = {}
    axes = shown_axes(df)
    for _, g in df.groupby(["workload", "device", *axes], sort=False, dropna=False):
        point = section_point(g, axes)
        workload, device = point[:2]
        name = slug(workload, device, *(f"{a}-{v}" for a, v in zip(axes, point[2:])))
        paths = [
            throughput_plot(g, workload, device, out_dir / f"throughput_{name}.png", trials_of),
            frontier_plot(g, workload, device, out_dir / f"frontier_{name}.png"),
            cache_plot(g, workload, device, out_dir / f"ps_cache_{name}.png"),
        ]
        written[point] = [p for p in paths if p is not None]
    scale = [scale_plot(df, access, out_dir / f"scale_{slug(access)}.png") for access in sorted(df["access"].dropna().unique())]
    if any(scale):
        written[SCALE_PLOTS] = [p for p in scale if p is not None]
    return written
