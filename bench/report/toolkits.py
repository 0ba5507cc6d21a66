"""The toolkit ranking: the report's first table when any record ran a quantization toolkit's backend
(`+sweep=toolkits`, docs/toolkits.md).

Per (workload, device) and batch size, the rows whose ΔAUC interval lies inside the gate's default
margin (gate.default_rules, one margin for every row, whatever rules a backend has of its own: the
verdict equivalent, or a gain), ranked by paired speedup; each with its ΔAUC and speedup intervals and
verdicts. The rows left out are named with the reason, so no backend drops silently. Under it, each quantized
row whose record names its fp32 runtime row (`runtime_reference`: the toolkit's `_fp32`, `compiled_fp32` for
Neural Compressor) is split in two: that row's speedup over eager fp32 (the runtime's fp32 gain) and the
quantized row's over it (the quantization's part; their product is the row's speedup, both paired medians).
"""

from __future__ import annotations

import pandas as pd

from bench.metrics import RUNTIME_REFERENCE, SPEEDUP, TIMED_INPUTS, TOOLKIT
from bench.record import RunRecord
from bench.report import fmt
from bench.results.readable import unreadable
from bench.results.key import BASELINE, row_key, section_point, shown_axes
from bench.results.table import margins
from bench.stats import practical_verdict

ACCEPTED = ("equivalent", "gain")  # ΔAUC verdicts inside the margin


def toolkit_section(df: pd.DataFrame, latest: dict[tuple, RunRecord]) -> list[str]:
    """The ranking section, or [] when no record ran a toolkit backend."""
    toolkits = {r.backend: r.metrics.get(TOOLKIT) for r in latest.values() if (r.metrics or {}).get(TOOLKIT)}
    if not toolkits:
        return []
    references = {r.backend: r.metrics[RUNTIME_REFERENCE] for r in latest.values() if (r.metrics or {}).get(RUNTIME_REFERENCE)}
    lines = ["## Ranking: backends whose ΔAUC is inside the gate's default margin, fastest first", ""]
    converted = sorted({r.metrics[TIMED_INPUTS] for r in latest.values() if (r.metrics or {}).get(TIMED_INPUTS)})
    lines += [
        "Every row is timed paired against eager fp32 in its own process. A toolkit backend runs the model's "
        "exported twin (its tables as gathers, dense id matrices for the KJT; docs/toolkits.md) in its toolkit's own "
        f"runtime; its timed calls took {'; '.join(converted) or 'their batches'} (the torch backends' KJTs are "
        "likewise built before timing). The margin is the gate's default rule (gate.default_rules), the same for "
        "every row. `<toolkit>_fp32` rows are the toolkit's runtime without quantization: a quantized row's speedup "
        "over its `_fp32` row is the quantization's part, the `_fp32` row's over fp32 the runtime's.",
        "",
    ]
    axes = shown_axes(df)  # a ranking per point of the further axes (a zoo's model family): one model's rows each
    for _, g in df.groupby(["workload", "device", *axes], sort=False, dropna=False):
        workload, device, *point = section_point(g, axes)
        where = "".join(f", {axis} {value}" for axis, value in zip(axes, point))
        for batch, b in g.groupby("batch_size", sort=True):
            lines += [f"### {workload} on {device}{where}, batch {batch}", ""] + _ranking(_default_verdicts(b, latest), toolkits)
            lines += _split(b, references)
    return lines


def _split(b: pd.DataFrame, references: dict[str, str]) -> list[str]:
    """Per quantized row with its fp32 runtime row in the same batch: the runtime's fp32 gain and the quantization's part."""
    ok = {r.backend: r for r in b.itertuples(index=False) if r.status == "ok" and not fmt.missing(r.speedup)}
    rows = []
    for backend, reference in sorted(references.items()):
        if backend in ok and reference in ok:
            fp32, total = ok[reference].speedup, ok[backend].speedup
            rows.append([backend, f"`{reference}`", f"{fp32:.2f}×", f"{total / fp32:.2f}×", f"{total:.2f}×"])
    if not rows:
        return []
    C = fmt.Column
    columns = [C("backend"), C("its fp32 runtime row"), C("runtime's fp32 gain", align="r"), C("quantization's part", align="r"),
               C("the row's speedup", align="r")]
    return ["Where each speedup comes from (the runtime's fp32 gain × the quantization's part):", "", fmt.table(columns, rows), ""]


def _default_verdicts(b: pd.DataFrame, latest: dict[tuple, RunRecord]) -> pd.DataFrame:
    """The rows with their ΔAUC verdict and margin read against the gate's default rule."""
    verdicts, margin_of = [], []
    for r in b.itertuples(index=False):
        margin = margins(latest[row_key(r)], default_rules=True)[0]
        keep = r.status == "ok" and r.backend != BASELINE and not fmt.missing(r.auc_delta_lo)
        verdicts.append(practical_verdict(r.auc_delta_lo, r.auc_delta_hi, margin) if keep else None)
        margin_of.append(margin)
    return b.assign(auc_verdict=verdicts, auc_margin=margin_of)


def _ranking(b: pd.DataFrame, toolkits: dict[str, str]) -> list[str]:
    ok = b[b["status"] == "ok"]
    ranked = ok[(ok["backend"] == BASELINE) | ok["auc_verdict"].isin(ACCEPTED)]
    # a speedup whose interval is too wide to read ranks after every readable one
    unread = [unreadable(r.speedup, r.speedup_lo, r.speedup_hi) and r.backend != BASELINE for r in ranked.itertuples(index=False)]
    ranked = ranked.assign(_unread=unread).sort_values(["_unread", SPEEDUP], ascending=[True, False], na_position="last")
    rows = []
    for rank, r in enumerate(ranked.itertuples(index=False), start=1):
        baseline = r.backend == BASELINE
        rows.append([
            rank, r.backend, toolkits.get(r.backend, "harness"),
            "0 (reference)" if baseline else fmt.delta_ci(r.auc_delta, r.auc_delta_lo, r.auc_delta_hi),
            fmt.word(r.auc_verdict) if not baseline else fmt.DASH,
            "1.00× (reference)" if baseline else fmt.ratio_ci(r.speedup, r.speedup_lo, r.speedup_hi, r.latency_calls),
            fmt.word(r.speed_verdict) if not baseline else fmt.DASH,
            fmt.megabytes(r.embedding_bytes), fmt.megabytes(r.model_bytes),
        ])
    C = fmt.Column
    columns = [C("rank", align="r"), C("backend"), C("toolkit"), C("ΔAUC", "[95% CI]"), C("ΔAUC verdict"), C("speedup [95% CI]"),
               C("speed verdict"), C("emb", "MB", "r"), C("model", "MB", "r")]
    lines = [fmt.table(columns, rows), ""] if rows else ["No row is inside the margin.", ""]
    left = [f"`{r.backend}` ({_why_out(r)})" for r in b.itertuples(index=False) if r.backend not in set(ranked["backend"])]
    if left:
        lines += ["Not ranked: " + "; ".join(left) + ".", ""]
    return lines


def _why_out(r) -> str:
    if r.status != "ok":
        return f"{r.status}: {fmt.first_line(r.error, 160) or 'no reason recorded'}"
    if r.auc_verdict is None or fmt.missing(r.auc_delta):
        return "no ΔAUC measured"
    return f"ΔAUC {fmt.delta_ci(r.auc_delta, r.auc_delta_lo, r.auc_delta_hi)} {r.auc_verdict} against a margin of {r.auc_margin:.4f}"
