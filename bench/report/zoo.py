"""The zoo matrix: the report's first table when its rows name model families (`+sweep=zoo`, conf/zoo/).

One table per (device, batch size): a row per backend, a column per family. A cell reads what the pair did, its ΔAUC
against fp32 judged against the gate's margin for the backend (`auc_margin`, from the backend's gate rule as every
verdict of the report reads it) by the one accuracy rule (`bench.stats.budget_verdict` on the ΔAUC interval):
`ok` where the whole interval is inside the margin, `past` where the whole interval is past it, `straddles` where
the interval holds the margin (more eval rows would decide). The fp32 row holds the fp32 AUC; `skipped` or `error`
carry a numbered reason listed under the table. The counts line under it says how many pairs were each; the gate
(`run_gate`) judges the same rows with its own rules (and fails a straddling pair whose point is past the margin).
"""

from __future__ import annotations

import pandas as pd

from bench import stats
from bench.report import fmt
from bench.results.key import BASELINE, backend_rank

FAMILY = "family"  # the results' axis a zoo case sets (bench.results.key)
# what a pair did, by the one accuracy rule's reading of its ΔAUC interval against the margin
READING = {stats.WITHIN_BUDGET: "ok", stats.OVER_BUDGET: "past", stats.INCONCLUSIVE: "straddles"}


def outcome(row) -> str:
    """What one pair did: `ok` (its ΔAUC interval inside the margin), `past` (wholly past it), `straddles` (the
    interval holds the margin: more eval rows would decide), `skipped` or `error`."""
    if row.status != "ok":
        return str(row.status)
    if row.backend == BASELINE:
        return "ok"
    return READING[stats.budget_verdict(row.auc_delta_lo, row.auc_delta_hi, row.auc_margin)]


def counts_line(rows: pd.DataFrame) -> str:
    """`63 pairs: 40 ok inside the gate's margin, 0 past it, 0 straddling it (...), 23 skipped with a reason, 0 errors.`"""
    found = [outcome(r) for r in rows.itertuples(index=False)]
    n = {k: found.count(k) for k in ("ok", "past", "straddles", "skipped", "error")}
    return (f"{len(found)} pairs: {n['ok']} ok inside the gate's margin, {n['past']} ok but past it, "
            f"{n['straddles']} ok but straddling it (the interval holds the margin: more eval rows would decide), "
            f"{n['skipped']} skipped with a reason, {n['error']} error{'s' if n['error'] != 1 else ''}.")


def console_lines(df: pd.DataFrame) -> list[str]:
    """What the sweep prints after its bottom line: the matrix's counts per device and batch size, [] without families."""
    if FAMILY not in df.columns or df[FAMILY].isna().all():
        return []
    zoo = df[df[FAMILY].notna()]
    return [f"zoo matrix ({device}, batch {batch}): {counts_line(g)}" for (device, batch), g in zoo.groupby(["device", "batch_size"], sort=True)]


def zoo_section(df: pd.DataFrame) -> list[str]:
    """The matrix section, or [] when no row names a family. `df`: the results table, the family a column."""
    if FAMILY not in df.columns or df[FAMILY].isna().all():
        return []
    zoo = df[df[FAMILY].notna()]
    lines = ["## The zoo: every backend on every model family", "",
             "A cell is the pair's ΔAUC against fp32 on the family's own model (paired, the same eval samples), read "
             "against the gate's margin for the backend by the one accuracy rule (its 95% interval): a plain figure when "
             "the whole interval is inside the margin, `past` when the whole interval is beyond it, `straddles` with the "
             "interval when it holds the margin (more eval rows would decide; the gate fails such a pair when its point "
             "is past). The fp32 row holds the reference AUC. `skipped` and `error` carry the number of their reason, "
             "listed under the table. A family is a file of conf/zoo/.", ""]
    for (device, batch), g in zoo.groupby(["device", "batch_size"], sort=True):
        lines += [f"### {device}, batch {batch}", "", counts_line(g), ""] + _matrix(g)
    return lines


def _matrix(g: pd.DataFrame) -> list[str]:
    families = sorted(g[FAMILY].unique())
    backends = sorted(g["backend"].unique(), key=backend_rank)
    cells = {(r.backend, getattr(r, FAMILY)): r for r in g.itertuples(index=False)}
    reasons: dict[str, int] = {}
    rows = []
    for backend in backends:
        rows.append([f"`{backend}`", *(_cell(cells.get((backend, family)), reasons) for family in families)])
    columns = [fmt.Column("backend"), *(fmt.Column(f, align="r") for f in families)]
    lines = [fmt.table(columns, rows), ""]
    lines += [f"{n}. {reason}" for reason, n in reasons.items()]
    return lines + ([""] if reasons else [])


def _cell(row, reasons: dict[str, int]) -> str:
    if row is None:
        return fmt.DASH  # the sweep ran no such pair
    kind = outcome(row)
    if kind in ("skipped", "error"):
        reason = fmt.first_line(row.error, 300) or "no reason recorded"
        number = reasons.setdefault(reason, len(reasons) + 1)
        return f"**error** ({number})" if kind == "error" else f"skipped ({number})"
    if row.backend == BASELINE:
        return f"AUC {row.auc:.4f}" if not fmt.missing(row.auc) else "reference"
    delta, margin = fmt.signed(row.auc_delta), f"{float(row.auc_margin):.4f}"
    if kind == "ok":
        return delta
    if kind == "past":
        return f"**{delta}** past {margin}"
    return f"{delta} straddles {margin} [{fmt.signed(row.auc_delta_lo)}, {fmt.signed(row.auc_delta_hi)}]"
