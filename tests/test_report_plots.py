"""The throughput plot (bench.report.plots.speedup_figure): each backend's paired speedup against fp32 per batch
size with its interval as error bars, read off the figure's own data (not its pixels)."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.report.plots import speedup_figure, throughput_plot
from bench.results.table import COLUMNS
from tests.test_report_pick import table_row


def drawn(fig):
    """{backend: [(x, speedup, bar low, bar high)]} of the figure's error-bar series, in x order."""
    [ax] = fig.axes
    out = {}
    for c in ax.containers:
        points = c.lines[0].get_xydata()
        bars = c.lines[2][0].get_segments() if c.lines[2] else []
        out[c.get_label()] = [(x, y, seg[0][1], seg[1][1]) for (x, y), seg in zip(points, bars)]
    return out


@pytest.fixture()
def table():
    # int8_tbe at 1024: 1.17x [1.10, 1.25] paired, though its samples/s are 1.84x fp32's (two jobs, a host that moved)
    return pd.DataFrame([
        table_row("fp32", batch_size=1024, throughput=100_000.0),
        table_row("fp32", batch_size=4096, throughput=150_000.0),
        table_row("int8_tbe", (1.17, 1.10, 1.25), batch_size=1024, throughput=184_000.0, stable=False),
        table_row("int8_tbe", (1.31, 1.22, 1.40), batch_size=4096, throughput=190_000.0),
        table_row("uint4", (1.05, 0.97, 1.12), batch_size=1024, speedup_method="unpaired"),
        table_row("uint4", (1.2, 0.1, 9.0), batch_size=4096),  # too wide to read: a cross, no bar
    ], columns=COLUMNS)


def test_the_throughput_plot_draws_paired_speedups_with_their_intervals(table, tmp_path):
    fig = speedup_figure(table, "synthetic", "cpu")
    series = drawn(fig)
    assert set(series) == {"int8_tbe", "uint4"}  # fp32 is the reference line, not a series
    (x1, y1, lo1, hi1), (x4, y4, lo4, hi4) = series["int8_tbe"]
    assert (y1, lo1, hi1) == pytest.approx((1.17, 1.10, 1.25)) and (y4, lo4, hi4) == pytest.approx((1.31, 1.22, 1.40))
    assert 1024 * 0.9 < x1 < 1024 * 1.1 and 4096 * 0.9 < x4 < 4096 * 1.1  # beside its batch size, a little apart from uint4's
    # the unreadable uint4 point at 4096 carries no bar: drawn as a cross instead
    [(_, y, lo, hi)] = series["uint4"]
    assert (y, lo, hi) == pytest.approx((1.05, 0.97, 1.12))
    [ax] = fig.axes
    marks = {(round(float(y), 3), len(c.get_facecolor()) == 0)  # (speedup, hollow) of each scattered point
             for c in ax.collections if not c.get_label().startswith(("hollow", "×")) for _, y in c.get_offsets()}
    assert (1.2, False) in marks  # the cross, filled
    assert (1.05, True) in marks  # the unpaired point, hollowed
    # no absolute samples/s anywhere: int8_tbe's 1.84x of fp32's samples/s is not drawn
    ys = [y for points in series.values() for _, y, _, _ in points]
    assert not any(y == pytest.approx(1.84, abs=0.01) or y > 1000 for y in ys)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "fp32 (the reference)" in labels and "0.95: not slower above (1 − the 5% margin)" in labels
    assert "hollow: unpaired (two jobs' trials)" in labels and any(t.startswith("×: not judged") for t in labels)
    assert not any("unstable" in t for t in labels)
    assert {line.get_ydata()[0] for line in ax.get_lines() if line.get_label().startswith(("fp32", "0.95"))} == {1.0, 0.95}
    assert ax.get_ylabel() == "speedup against fp32 (bars: its interval)"
    path = throughput_plot(table, "synthetic", "cpu", tmp_path / "throughput.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_speedup_to_draw_gives_no_plot(table, tmp_path):
    assert speedup_figure(table[table["backend"] == "fp32"], "synthetic", "cpu") is None
    assert throughput_plot(table, "criteo", "cpu", tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()
