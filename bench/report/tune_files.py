"""A tune's files from its result: tune.md, per_table.yaml, tune.csv and frontier.png (`write_files`).

The tune writes them into a fresh folder beside the folder's records.jsonl (bench.tune.tune_folder);
`python -m bench.report DIR` writes them again from those records alone (`rerender`)."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Sequence

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from bench.io import write_text_atomic
from bench.metrics import AUC_DELTA, AUC_DELTA_P, AUC_FP32, EMBEDDING_BYTES, hi, lo
from bench.record import RunRecord
from bench.report import fmt
from bench.results.tune import (NOTHING_COMPRESSED, PRECISIONS, Row, TuneResult, from_records, map_bytes,
                                nothing_compressed, uniform)
from bench.store import RECORDS, write_records

C = fmt.Column  # a table column: its header and alignment (bench.report.fmt.table)

CSV_COLUMNS = ["candidate", "split", EMBEDDING_BYTES, AUC_DELTA, lo(AUC_DELTA), hi(AUC_DELTA), "chosen",
               "kind", "dense", "measured_by", AUC_DELTA_P, AUC_FP32, "per_table"]  # fmt: skip

SELECTION_BIAS = (
    "Why a held-out half: the search measures many candidates on the same samples and keeps the "
    "smallest one whose interval clears the budget. Among many noisy measurements, the one kept is "
    "likely one whose noise happened to flatter it, so its search-half ΔAUC is biased upwards (the "
    "winner's curse, selection bias), and its interval no longer has its stated coverage. Judged on the "
    "samples it was chosen on, a map could pass the budget and then lose more AUC in deployment. The "
    "held-out half never took part in any choice, so the chosen map's interval there is an honest "
    "95% interval, and the verdict comes from it alone."
)


def per_table_yaml(chosen: dict[str, str]) -> str:
    """One flow-style line: valid YAML for `backend.per_table_file=`, and a `+backend.per_table=` value."""
    return "{" + ", ".join(f"{name}: {dtype}" for name, dtype in chosen.items()) + "}\n"


def csv_frame(rows: Sequence[Row]) -> pd.DataFrame:
    records = []
    for r in rows:
        d = dataclasses.asdict(r)
        d["per_table"] = " ".join(f"{k}={v}" for k, v in r.per_table.items())
        records.append(d)
    return pd.DataFrame(records, columns=CSV_COLUMNS)


def frontier_plot(result: TuneResult, path: Path) -> Path:
    """Embedding bytes against ΔAUC: search probes, the chosen map on both halves, the uniform backends."""
    fig = Figure(figsize=(7.0, 4.6))
    ax = fig.add_subplot()
    styles = {("probe", "search"): ("o", "tab:gray", "search probes (check quarter)"),
              ("chosen", "holdout"): ("*", "tab:red", "chosen map (held-out half, real backend)"),
              ("uniform", "holdout"): ("s", "tab:blue", "uniform (held-out half, real backends)")}
    for (kind, split), (marker, color, label) in styles.items():
        rows = [r for r in result.rows if r.kind == kind and r.split == split]
        for i, r in enumerate(rows):
            err = [[max(r.auc_delta - r.auc_delta_lo, 0.0)], [max(r.auc_delta_hi - r.auc_delta, 0.0)]]
            ax.errorbar([r.embedding_bytes / fmt.MB], [r.auc_delta], yerr=err, fmt=marker, color=color, capsize=3,
                        markersize=11 if marker == "*" else 5, label=label if i == 0 else None, alpha=0.9)
            if kind == "uniform":
                ax.annotate(r.candidate.split(" (")[0].removeprefix("uniform "), (r.embedding_bytes / fmt.MB, r.auc_delta),
                            textcoords="offset points", xytext=(6, 4), fontsize="small")
    if result.chosen is not None:
        ax.axhline(-result.budget.drop(result.chosen.auc_fp32), color="tab:red", linestyle="--", linewidth=1,
                   label="budget (held-out)")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("embedding bytes (MB, log)")
    ax.set_ylabel("ΔAUC vs fp32 (95% CI)")
    ax.set_title("tune: embedding bytes against ΔAUC")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def write_files(result: TuneResult, out: Path) -> None:
    """tune.csv, per_table.yaml and frontier.png (after a search) and tune.md in `out`."""
    write_text_atomic(out / "tune.csv", csv_frame(result.rows).to_csv(index=False))
    if result.search is not None:
        write_text_atomic(out / "per_table.yaml", per_table_yaml(result.search.chosen))
        frontier_plot(result, out / "frontier.png")
    write_text_atomic(out / "tune.md", render(result, out))


def rerender(records: Sequence[RunRecord], out: Path, write_records_file: bool = True) -> Path:
    """A tune folder's files written again from its stored records alone; returns tune.md's path."""
    out = Path(out)
    if out.is_symlink():  # `latest`: the folder it points at, as the tune named it in tune.md's commands
        out = out.parent / os.readlink(out)
    out.mkdir(parents=True, exist_ok=True)
    result = from_records(records)
    if write_records_file:
        write_records(records, out / RECORDS)
    write_files(result, out)
    return out / "tune.md"


# ------------------------------------------------------------------------------------------ tune.md


def _ci(r: Row) -> str:
    return fmt.delta_ci(r.auc_delta, r.auc_delta_lo, r.auc_delta_hi, digits=5)


def _header(result: TuneResult) -> list[str]:
    cfg = result.cfg
    return [
        "# Tune: per-table precisions inside an AUC budget",
        "",
        f"Workload `{cfg.workload.name}`, model `{cfg.model.name}` (dim {cfg.model.embedding_dim}, {len(result.tables)} tables), "
        f"device {cfg.device.type}, seed {cfg.seed}.",
        "",
    ]


def _sizes_section(result: TuneResult) -> list[str]:
    tables = result.tables
    fp32 = map_bytes(tables, uniform(tables, "fp32"))
    rows = []
    for p in PRECISIONS:
        if all(t.packs(p) for t in tables):
            b = map_bytes(tables, uniform(tables, p))
            rows.append([f"uniform {p}", fmt.megabytes(b), f"{fp32 / b:.2f}×"])
    return ["Embedding bytes (FBGEMM row bytes, CPU row alignment 1; MB = 10^6 bytes):", "",
            fmt.table([C("map"), C("embedding MB", align="r"), C("compression vs fp32", align="r")], rows), ""]


def _sensitivity_section(result: TuneResult) -> list[str]:
    precisions = list(result.cfg.tune.precisions)
    by = {r.table_precision: r for r in result.sensitivity if r.kind == "sensitivity"}
    rows = []
    for t in result.tables:
        rows.append([t.name, fmt.count(t.rows), fmt.megabytes(t.bytes("fp32"))]
                    + [_ci(by[(t.name, p)]) if (t.name, p) in by else "does not pack" for p in precisions])
    dense = [[r.candidate.removeprefix("dense "), _ci(r)] for r in result.sensitivity if r.kind == "dense"]
    cached = " (read from the cache: same model, data and code)" if result.sensitivity_cached else ""
    return [
        f"## Sensitivity (plan quarter of the search half, {fmt.count(result.n_plan)} samples){cached}",
        "",
        "Paired ΔAUC against fp32 [95% CI, DeLong] when that one table is quantize-dequantized at the precision, "
        "everything else fp32 (dense layers too):",
        "",
        fmt.table([C("table"), C("rows", align="r"), C("fp32 MB", align="r"), *(C(p) for p in precisions)], rows),
        "",
        "The dense layers are one more component: the MLP's Linear layers in int8 (torch.ao, as the integer backends "
        "run them), every table fp32:",
        "",
        fmt.table([C("dense layers"), C("ΔAUC [95% CI]")], [["fp32", "0 (reference)"], *dense]),
        "",
    ]


def _search_section(result: TuneResult) -> list[str]:
    s = result.search
    dense = "fp32" if result.cfg.tune.mlp == "fp32" else f"int8 {result.cfg.tune.mlp_mode}"
    budget = result.budget
    rows = [[r.candidate, fmt.megabytes(r.embedding_bytes), f"{s.candidates[k].predicted_loss:.5f}", _ci(r),
             fmt.signed(r.auc_delta_lo - budget.guard(r, s.ratio), 5), "yes" if budget.passes(r, s.ratio) else "no",
             "**chosen**" if r.chosen else ""]
            for k, r in zip(s.probed, s.probes)]
    passed = ("no candidate passed, not even every table at fp32: the dense layers alone leave no room in the budget "
              "(try tune.mlp=fp32)" if s.passed < 0 else f"the last passing candidate is {s.passed} of {len(s.candidates) - 1}")
    return [
        f"## Search (check quarter of the search half, {fmt.count(result.n_check)} samples)",
        "",
        f"Predicted loss of a table at a precision = its sensitivity's ΔAUC as a loss (gains count as none). "
        f"A knapsack over those losses (exact on a grid of budget/1000) gives {len(s.candidates)} candidates, the fewest bytes "
        f"for each predicted loss (candidate 0: every table fp32). The tables may spend {s.allowance:.5f} (the budget less "
        f"the {dense} dense layers' own loss), so the first probe was candidate {s.predicted}. Each probe is the combined "
        f"candidate, measured with the {dense} dense layers, not a sum of sensitivities, and on the check quarter, samples "
        "the sensitivities never saw: the knapsack prefers options whose sensitivity noise flattered them, and a candidate "
        "measured on those same samples would inherit that flattery. It passes when its interval's lower bound, less a guard, "
        "lies above the budget: the guard is set so that, judged from the check quarter, the held-out check passes with "
        f"probability {budget.holdout_confidence:g} (tune.holdout_confidence; the check's and the held-out delta differ by the "
        f"noise of both, the held-out one's variance {s.ratio:.2g}× the check's by their sample counts). Bisection: {passed}.",
        "",
        fmt.table([C("probe"), C("embedding MB", align="r"), C("predicted loss", align="r"), C("ΔAUC [95% CI]"),
                   C("lower bound − guard"), C("passes"), C("")], rows),
        "",
    ]


def _chosen_section(result: TuneResult, out: Path) -> list[str]:
    chosen, tables, budget = result.chosen, result.tables, result.budget
    fp32 = map_bytes(tables, uniform(tables, "fp32"))
    limit = budget.drop(chosen.auc_fp32)
    search_row = next((r for r in result.search.probes if r.chosen), None)
    counts = {p: sum(v == p for v in chosen.per_table.values()) for p in PRECISIONS}
    mix = ", ".join(f"{n} at {p}" for p, n in counts.items() if n)
    lines = [
        "## Verdict (held-out half)",
        "",
        f"Budget: {budget.describe()}, i.e. ΔAUC ≥ {fmt.signed(-limit, 5)} on the held-out half "
        f"(fp32 AUC {chosen.auc_fp32:.4f} over {fmt.count(result.n_holdout)} samples).",
        "",
        f"**{result.verdict}**: the chosen map ({mix}) measured with the real `{chosen.measured_by}` backend "
        f"({chosen.dense} dense layers): ΔAUC {_ci(chosen)}, {fmt.megabytes(chosen.embedding_bytes)} MB of embeddings "
        f"({fp32 / chosen.embedding_bytes:.2f}× smaller than fp32).",
        "",
    ]
    if nothing_compressed(result):
        lines += [f"**Nothing was compressed**: every table stays fp32, so the verdict says nothing of quantizing. "
                  f"{NOTHING_COMPRESSED.format(n_check=result.n_check)}", ""]
    if result.verdict != "within budget" and chosen.auc_delta_hi - chosen.auc_delta_lo > limit:
        lines += [f"The held-out interval ({chosen.auc_delta_hi - chosen.auc_delta_lo:.5f} wide) is wider than the "
                  f"budget: {fmt.count(result.n_holdout)} held-out samples cannot show a drop this small either way. Use a "
                  "larger eval split (workload.eval_samples) or a wider budget.", ""]
    if search_row is not None:
        lines += [f"On the check quarter the same map measured {_ci(search_row)}; the difference to the held-out figure "
                  f"({fmt.signed(search_row.auc_delta - chosen.auc_delta, 5)}) is what judging it on the samples it was "
                  "chosen on would have claimed on top.", ""]
    emulation = next((r for r in result.holdout if r.kind == "emulation"), None)
    if emulation is not None:
        lines += [f"The search's emulation of the same map (quantize-dequantize rows, torch.ao int8 Linear) on the held-out "
                  f"half: ΔAUC {_ci(emulation)}; " + ("its logits equal the real backend's bit for bit" if result.emulation_gap == 0
                  else f"its logits differ from the real backend's by at most {result.emulation_gap:.2g}")
                  + " (how faithful the search's figures are to what the backend runs).", ""]
    lines += [SELECTION_BIAS, ""]
    rows = [[r.candidate, r.measured_by, fmt.megabytes(r.embedding_bytes), f"{fp32 / r.embedding_bytes:.2f}×",
             f"{r.embedding_bytes / chosen.embedding_bytes:.2f}×", _ci(r), budget.verdict(r)] for r in result.holdout]
    lines += [
        "Held-out half, real integer backends (and the chosen map's emulation), the same dense layers:",
        "",
        fmt.table([C("map"), C("backend"), C("embedding MB", align="r"), C("compression vs fp32", align="r"),
                   C("bytes vs chosen", align="r"), C("ΔAUC [95% CI]"), C("against the budget")], rows),
        "",
        "![frontier](frontier.png)",
        "",
        "## The chosen map",
        "",
        fmt.table([C("table"), C("rows", align="r"), C("precision"), C("MB", align="r")],
                  [[t.name, fmt.count(t.rows), chosen.per_table[t.name], fmt.megabytes(t.bytes(chosen.per_table[t.name]))]
                   for t in tables]),
        "",
        "Use it (`per_table.yaml` names every table, so the backend's own default type names none):",
        "",
        "```sh",
        f"python -m bench backend=uint4 backend.per_table_file={out / 'per_table.yaml'} "
        f"backend.mlp={result.cfg.tune.mlp} backend.mlp_mode={result.cfg.tune.mlp_mode}",
        f"python -m bench backend=uint4 \"+backend.per_table=$(cat {out / 'per_table.yaml'})\" "
        f"backend.mlp={result.cfg.tune.mlp} backend.mlp_mode={result.cfg.tune.mlp_mode}",
        "```",
        "",
    ]
    return lines


def _timing(result: TuneResult) -> list[str]:
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items() if k != "total")
    return [f"Tune time: {result.seconds.get('total', math.nan):.1f} s ({parts}).", ""] if parts else \
        [f"Tune time: {result.seconds.get('total', math.nan):.1f} s.", ""]


def render(result: TuneResult, out: Path) -> str:
    lines = _header(result)
    if result.sizes_only:
        lines += [f"**Sizes only**: accuracy was not measured ({result.sizes_only}). Without it there is no sensitivity, "
                  "no search and no verdict; the sizes below hold for any model of this shape.", ""]
        lines += _sizes_section(result)
        rows = [[t.name, fmt.count(t.rows), *(fmt.megabytes(t.bytes(p)) if t.packs(p) else "does not pack" for p in PRECISIONS)]
                for t in result.tables]
        lines += [fmt.table([C("table"), C("rows", align="r"), *(C(p, "MB", "r") for p in PRECISIONS)], rows), ""]
        return "\n".join(lines + _timing(result))
    lines += [
        f"The eval split is cut by sample index: even indices are the search half ({fmt.count(result.n_search)} samples), "
        f"odd ones the held-out half ({fmt.count(result.n_holdout)}). The search saw only its half, and cut it again: "
        f"indices 0 mod 4 plan (sensitivity, {fmt.count(result.n_plan)}), indices 2 mod 4 check the combined candidates "
        f"({fmt.count(result.n_check)}).",
        "",
    ]
    lines += _chosen_section(result, out)
    lines += _sensitivity_section(result)
    lines += _search_section(result)
    lines += _sizes_section(result)
    lines += _timing(result)
    return "\n".join(lines).rstrip() + "\n"
