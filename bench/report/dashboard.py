"""`python -m bench dashboard REPORTS_DIR`: the nightly history as a static, self-contained web page.

It reads every `history.jsonl` under REPORTS_DIR (through `load_history`, so every history version
reads) and writes `index.html` (default folder: REPORTS_DIR/dashboard). The page holds plotly's
JavaScript inline: it opens from a file, with no network. For each sweep, and each workload and
device in it, four charts over the runs, one series per backend and batch size:

- speedup over fp32, with its paired 95% interval (as recorded);
- throughput (rows/s), the median of the run's trials with a 95% bootstrap interval over them;
- ΔAUC against fp32, with its paired 95% DeLong interval;
- peak RSS of the job (one reading per run: no interval).

Steps: each series is cut into constant pieces by asv's step detection (`asv.step_detect.detect_steps`,
the Potts-model fit asv runs over a benchmark's history; points weighted by 2 / interval width, as asv
weights by its confidence interval). A cut is marked as a step only where the comparison engine also
calls the runs on either side of it different, with the tolerances of `conf/compare/` that
`history.md` uses: speedup, throughput and ΔAUC by `compare_metrics` (the very verdicts `history.md` and
`python -m bench.report --baseline` give: the paired speedup's change with both runs' intervals, the ΔAUC's,
and the throughput normalized by the runs' machine probes, judged only where they agree), and memory when
it moved by more than the throughput tolerance. The newest run is always a candidate
too, against the run before it, exactly as `history.md` judges it (a single point cannot yet make
a piece of asv's fit). A run whose gate failed has its points
drawn as red crosses; the table of runs lists each run's gate verdict and stack versions, and each
point links to the run's report when the report folder is still there (CI artifacts expire).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd

from bench.comparison import Tolerances, compare_metrics, finite, identity
from bench.errors import UserError
from bench.metrics import AUC, AUC_DELTA, PEAK_RSS_BYTES, SPEEDUP, THROUGHPUT, THROUGHPUT_TRIALS, hi, lo
from bench.report.history import HISTORY_FILE, STACK_KEYS, load_history, run_order
from bench.results.key import KEY, row_label
from bench.stats import median_interval

SITE_DIR = "dashboard"
NO_SWEEP = "sweep not recorded (history lines before version 3)"


@dataclass(frozen=True)
class Metric:
    name: str  # the chart's id part
    title: str
    baseline_too: bool  # fp32 has a series (speedup and ΔAUC of fp32 are 1 and 0 by definition)
    value: Callable[[dict], tuple[Optional[float], Optional[float], Optional[float]]]  # (point, lo, hi)


def _speedup(row: dict):
    return finite(row.get(SPEEDUP)), finite(row.get(lo(SPEEDUP))), finite(row.get(hi(SPEEDUP)))


def _throughput(row: dict):
    trials = [t for t in (row.get(THROUGHPUT_TRIALS) or []) if finite(t) is not None]
    if trials:
        point, lo, hi = median_interval(trials)
        return finite(row.get(THROUGHPUT)) or point, lo, hi
    return finite(row.get(THROUGHPUT)), None, None


def _auc_delta(row: dict):
    return finite(row.get(AUC_DELTA)), finite(row.get(lo(AUC_DELTA))), finite(row.get(hi(AUC_DELTA)))


def _memory(row: dict):
    v = finite(row.get(PEAK_RSS_BYTES))
    return (v / 2**20 if v is not None else None), None, None


METRICS = [
    Metric(SPEEDUP, "Speedup over fp32 (x, 95% paired interval)", False, _speedup),
    Metric(THROUGHPUT, "Throughput (rows/s, median of trials, 95% bootstrap interval)", True, _throughput),
    Metric(AUC_DELTA, "ΔAUC vs fp32 (95% paired DeLong interval)", False, _auc_delta),
    Metric("memory", "Peak RSS (MiB, one reading per run)", True, _memory),
]


def _confirmed(metric: str, before: dict, after: dict, cfg: Tolerances) -> Optional[str]:
    """Why two runs astride a change point differ beyond noise, by the engine history.md uses; None if not."""
    refused, _ = identity(after, before)
    if refused:
        return None
    if metric in (THROUGHPUT, AUC_DELTA, SPEEDUP):
        if before.get("status") != "ok" or after.get("status") != "ok":
            return None
        change = compare_metrics(after, before, cfg).get(AUC if metric == AUC_DELTA else metric)  # no speedup change: fp32's
        return f"{change.verdict}: {change.reason}" if change is not None and change.flagged else None
    new, base = _memory(after)[0], _memory(before)[0]
    if new is None or not base:
        return None
    moved = new / base - 1
    return f"peak RSS {moved:+.1%} (more than {cfg.throughput_tolerance:.0%})" if abs(moved) > cfg.throughput_tolerance else None


def detect_steps(rows: list[dict], metric: Metric, cfg: Tolerances) -> list[dict]:
    """Steps of one series (rows in run order): asv's change points that the comparison engine confirms."""
    from asv.step_detect import detect_steps as asv_steps

    points = [metric.value(r) for r in rows]
    y = [p[0] for p in points]
    w = [2 / (hi - lo) if lo is not None and hi is not None and hi > lo else None for _, lo, hi in points]
    if sum(v is not None for v in y) < 2:
        return []
    pieces = asv_steps(y, w)
    cuts = {left: (before_value, value) for (_, _, before_value, _, _), (left, _, value, _, _) in zip(pieces, pieces[1:])}
    # The newest run is also judged against the one before it, as history.md judges it: one point
    # cannot make a new piece of asv's fit yet, and the page must not miss what history.md flags.
    last = max(i for i, v in enumerate(y) if v is not None)
    shown = [i for i, v in enumerate(y) if v is not None]
    if len(shown) >= 2 and last not in cuts:
        cuts[last] = (y[shown[-2]], y[last])
    steps = []
    for index, (value_before, value_after) in sorted(cuts.items()):
        before = max(i for i in range(index) if y[i] is not None)
        why = _confirmed(metric.name, rows[before], rows[index], cfg)
        if why:
            steps.append({"index": index, "run_id": rows[index]["run_id"], "from": value_before, "to": value_after, "why": why})
    return steps


def _report_link(row: dict, history_dir: Path, site_dir: Path) -> Optional[str]:
    report = row.get("report")
    if not isinstance(report, str) or not report:
        return None
    target = history_dir / report / "report.md"
    return os.path.relpath(target, site_dir) if target.is_file() else None


def _series(group: pd.DataFrame, runs: list[str], metric: Metric, cfg: Tolerances, history_dir: Path, site_dir: Path,
            run_labels: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """Plotly traces (one per backend and batch size, plus one of steps) and the steps found."""
    import plotly.graph_objects as go

    traces, steps = [], []
    rank = {r: i for i, r in enumerate(runs)}
    for _, rows in group.groupby([k for k in KEY if k not in ("workload", "device")], sort=True, dropna=False):
        first = rows.iloc[0].to_dict()
        backend, batch = row_label(first), first["batch_size"]  # a sharded series, or one at another point of a further axis, is its own line
        if backend == "fp32" and not metric.baseline_too:
            continue
        rows = sorted(rows.to_dict("records"), key=lambda r: rank[r["run_id"]])
        points = [metric.value(r) if r["status"] == "ok" else (None, None, None) for r in rows]
        if all(p[0] is None for p in points):
            continue
        name = f"{backend} bs={batch}"
        failed = [r.get("gate") == "fail" for r in rows]
        text = [_hover(r, p) for r, p in zip(rows, points)]
        traces.append(go.Scatter(
            x=[run_labels[r["run_id"]] for r in rows], y=[p[0] for p in points], name=name, mode="lines+markers",
            error_y=dict(type="data", symmetric=False, array=[(p[2] - p[0]) if p[2] is not None and p[0] is not None else None for p in points],
                         arrayminus=[(p[0] - p[1]) if p[1] is not None and p[0] is not None else None for p in points]),
            marker=dict(symbol=["x" if f else "circle" for f in failed], size=[13 if f else 8 for f in failed],
                        line=dict(width=[2 if f else 0 for f in failed], color="#c00")),
            text=text, hovertemplate="%{text}<extra>" + html.escape(name) + "</extra>",
            customdata=[_report_link(r, history_dir, site_dir) for r in rows],
            meta={"series": name, "kind": "series"},
        ))
        for s in detect_steps(rows, metric, cfg):
            steps.append({**s, "series": name, "x": run_labels[s["run_id"]], "y": points[s["index"]][0]})
    if steps:
        traces.append(go.Scatter(
            x=[s["x"] for s in steps], y=[s["y"] for s in steps], name="step", mode="markers",
            marker=dict(symbol="triangle-down", size=18, color="rgba(0,0,0,0)", line=dict(width=2, color="#d60")),
            text=[f"step in {s['series']}: {s['from']:.4g} -> {s['to']:.4g}<br>{html.escape(s['why'])}" for s in steps],
            hovertemplate="%{text}<extra>step</extra>", meta={"kind": "steps"},
        ))
    return traces, steps


def _hover(row: dict, point: tuple) -> str:
    stack = row.get("stack") or {}
    versions = ", ".join(f"{k} {stack[k]}" for k in STACK_KEYS if stack.get(k)) or "stack not recorded"
    value = "no value" if point[0] is None else f"{point[0]:.5g}" + (f" [{point[1]:.5g}, {point[2]:.5g}]" if point[1] is not None else "")
    gate = row.get("gate") or "not recorded"
    return (f"run {html.escape(str(row['run_id']))} ({html.escape(str(row.get('timestamp')))})<br>{value}<br>"
            f"status {row['status']}, gate {gate}<br>{html.escape(versions)}")


def _kernel_cell(history: pd.DataFrame, run: str) -> str:
    """Degraded kernels under any of a run's speed figures (bench.devices), or healthy."""
    if "kernel_degraded" not in history:
        return "not recorded"
    found = sorted({f.strip() for v in history.loc[history["run_id"] == run, "kernel_degraded"] if isinstance(v, str) for f in v.split(",")})
    return f"<b class=fail>Kernel health: {html.escape(', '.join(found))} degraded</b>" if found else "healthy"


def _runs_table(history: pd.DataFrame, runs: list[str], history_dir: Path, site_dir: Path) -> str:
    first = history.drop_duplicates("run_id").set_index("run_id")
    head = "".join(f"<th>{h}</th>" for h in ["run", "time", "git", "gate", "kernel health", *STACK_KEYS, "report"])
    body = []
    for r in runs:
        row = first.loc[r].to_dict() | {"run_id": r}
        stack = row.get("stack") if isinstance(row.get("stack"), dict) else {}
        passed = row.get("gate_passed")
        gate = "passed" if passed is True else ("<b class=fail>FAILED</b>" if passed is False else "not recorded")
        link = _report_link(row, history_dir, site_dir)
        report = f'<a href="{html.escape(link)}">report.md</a>' if link else ("expired or not kept" if row.get("report") else "not recorded")
        sha = row.get("git_sha") if isinstance(row.get("git_sha"), str) else ""
        cells = [html.escape(r), html.escape(str(row.get("timestamp"))), html.escape(sha[:12]), gate, _kernel_cell(history, r),
                 *(html.escape(str(stack.get(k) or "")) for k in STACK_KEYS), report]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _slug(*parts: Any) -> str:
    return "-".join("".join(c if c.isalnum() else "_" for c in str(p)) for p in parts)


def build_site(reports_dir: Path, out_dir: Path, cfg: Tolerances) -> tuple[Path, dict]:
    """Write `out_dir/index.html`; returns its path and a summary (charts, series, points, steps)."""
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs

    files = sorted(p for p in Path(reports_dir).rglob(HISTORY_FILE) if out_dir not in p.parents)
    if not files:
        tiny = sorted(Path(reports_dir).rglob("history-*.jsonl"))
        beside = (f"; only {', '.join(str(p) for p in tiny)} (+preset=tiny runs keep their own history: run one with "
                  f"gate.history_name={HISTORY_FILE} to draw it)") if tiny else ""
        raise UserError(f"no {HISTORY_FILE} under {reports_dir}: run `python -m bench +sweep=nightly` first (it keeps the history){beside}")
    out_dir.mkdir(parents=True, exist_ok=True)
    sections, summary = [], {"charts": {}, "steps": []}
    for path in files:
        history = load_history(path)
        if history.empty:
            continue
        history["sweep"] = history["sweep"].where(history["sweep"].notna(), NO_SWEEP)
        for sweep, sweep_rows in history.groupby("sweep", sort=True):
            runs = run_order(sweep_rows)
            labels = {r: f"{i + 1}" for i, r in enumerate(runs)}  # run ids are in the table and the hover text
            parts = [f"<h2>Sweep <code>{html.escape(str(sweep))}</code> ({len(runs)} runs; history {html.escape(str(path))})</h2>",
                     _runs_table(sweep_rows, runs, path.parent, out_dir)]
            for (workload, device), group in sweep_rows.groupby(["workload", "device"], sort=True):
                parts.append(f"<h3>{html.escape(str(workload))} on {html.escape(str(device))}</h3><div class=grid>")
                for metric in METRICS:
                    traces, steps = _series(group, runs, metric, cfg, path.parent, out_dir, labels)
                    chart_id = _slug("chart", sweep, workload, device, metric.name)
                    fig = go.Figure(traces, layout=dict(title=metric.title, height=380, margin=dict(l=60, r=20, t=50, b=90),
                                                        xaxis=dict(type="category", title="run"), showlegend=True,
                                                        legend=dict(orientation="h", y=-0.3)))
                    parts.append(f'<div class=chart data-steps="{html.escape(json.dumps(steps, default=str))}">'
                                 + fig.to_html(full_html=False, include_plotlyjs=False, div_id=chart_id) + "</div>")
                    series = [t for t in traces if t.meta["kind"] == "series"]
                    summary["charts"][chart_id] = {"series": len(series), "points": [sum(v is not None for v in t.y) for t in series]}
                    summary["steps"] += [{**s, "chart": chart_id} for s in steps]
                parts.append("</div>")
            sections.append("\n".join(parts))
    index = out_dir / "index.html"
    index.write_text(_page(sections, get_plotlyjs(), cfg))
    return index, summary


def _page(sections: list[str], plotly_js: str, cfg: Tolerances) -> str:
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>bench: nightly dashboard</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;font-size:.85em}}
td,th{{border:1px solid #ccc;padding:2px 6px}} .grid{{display:grid;grid-template-columns:1fr 1fr;gap:8px}}
.fail{{color:#c00}} .note{{color:#555;max-width:70em}}</style>
<script>{plotly_js}</script></head><body>
<h1>Nightly dashboard</h1>
<p class=note>Each point is one nightly run (oldest left). Error bars are 95% intervals; peak RSS is one reading.
Red crosses: the run's gate failed for that row. Orange triangles: steps, found by asv's step detection over
the series and kept where the comparison engine calls the runs on either side different (throughput tolerance
{cfg.throughput_tolerance:.0%}, AUC tolerance {cfg.auc_tolerance:g}, {1 - cfg.alpha:.0%} intervals: the rules of
<code>history.md</code>). Click a point to open its run's report. Reports uploaded by CI are artifacts that
expire (the nightly workflow keeps them 30 days): older links then lead nowhere, while the figures here come
from <code>history.jsonl</code>, which is kept.</p>
{''.join(sections)}
<script>
document.querySelectorAll('.js-plotly-plot').forEach(function (gd) {{
  gd.on('plotly_click', function (ev) {{
    var p = ev.points[0], link = p.customdata;
    if (link) {{ window.location.href = link; }}
  }});
}});
</script>
</body></html>
"""


def main(argv: list[str]) -> int:
    from bench.config.files import load_compare_config

    parser = argparse.ArgumentParser(prog="python -m bench dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("reports_dir", type=Path, help="the reports folder: every history.jsonl under it is read")
    parser.add_argument("--out", type=Path, default=None, help=f"where the site goes (default: REPORTS_DIR/{SITE_DIR})")
    parser.add_argument("overrides", nargs="*", metavar="compare.KEY=VALUE",
                        help="the tolerances the nightly ran with, when not conf/compare/default.yaml's (e.g. compare.throughput_tolerance=0.1)")
    args = parser.parse_intermixed_args(argv)  # overrides before or after --out, as docs/dashboard.md writes them
    try:
        if not args.reports_dir.is_dir():
            raise UserError(f"{args.reports_dir} is not a folder: give the reports folder (reports_dir) the nightly wrote to")
        wrong = [o for o in args.overrides if not o.startswith("compare.")]
        if wrong:
            raise UserError(f"{wrong[0]!r}: only compare.KEY=VALUE overrides are taken here (e.g. compare.throughput_tolerance=0.1)")
        cfg = load_compare_config("default", [o[len("compare."):] for o in args.overrides])
        index, summary = build_site(args.reports_dir, (args.out or args.reports_dir / SITE_DIR).resolve(), cfg)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"dashboard: {index} ({len(summary['charts'])} charts, {len(summary['steps'])} steps marked)")
    for s in summary["steps"]:
        print(f"  step: {s['chart']} {s['series']} at run {s['run_id']}: {s['why']}")
    return 0
