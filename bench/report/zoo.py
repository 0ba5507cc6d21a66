"""The zoo matrix: the report's first table when its rows name model families (`+sweep=zoo`, conf/zoo/).

One table per (device, batch size): a row per backend, a column per family. A cell reads what the pair did:
its ΔAUC against fp32 where it is `ok` and its drop is inside the gate's margin for the backend (`auc_margin`, from
the backend's gate rule as every verdict of the report reads it), the same with "past" where the drop is larger, the
fp32 AUC on the reference row, `skipped` or `error` with a numbered reason listed under the table. The counts line
under it says how many pairs were each; the gate (`run_gate`) judges the same rows with its own rules.
"""

from __future__ import annotations

import pandas as pd

from bench.report import fmt
from bench.results.key import BASELINE, backend_rank

FAMILY = "family"  # the results' axis a zoo case sets (bench.results.key)


def inside_margin(row) -> bool:
    """The pair's ΔAUC drop is at most the gate's margin for its backend (a gain is inside)."""
    return not fmt.missing(row.auc_delta) and -float(row.auc_delta) <= float(row.auc_margin)


def outcome(row) -> str:
    """What one pair did: `ok` (inside the margin), `past` (ok, its drop past the margin), `skipped` or `error`."""
    if row.status != "ok":
        return str(row.status)
    if row.backend == BASELINE:
        return "ok"
    return "ok" if inside_margin(row) else "past"


def counts_line(rows: pd.DataFrame) -> str:
    """`63 pairs: 40 ok inside the gate's margin, 0 past it, 23 skipped with a reason, 0 errors.`"""
    found = [outcome(r) for r in rows.itertuples(index=False)]
    n = {k: found.count(k) for k in ("ok", "past", "skipped", "error")}
    return (f"{len(found)} pairs: {n['ok']} ok inside the gate's margin, {n['past']} ok but past it, "
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
             "A cell is the pair's ΔAUC against fp32 on the family's own model (paired, the same eval samples) when its "
             "drop is inside the gate's margin for the backend; `past` marks one beyond it; the fp32 row holds the "
             "reference AUC. `skipped` and `error` carry the number of their reason, listed under the table. A family "
             "is a file of conf/zoo/.", ""]
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
    delta = fmt.signed(row.auc_delta)
    return delta if kind == "ok" else f"**{delta}** past {float(row.auc_margin):.4f}"
