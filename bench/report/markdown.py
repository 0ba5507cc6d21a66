"""report.md: one table per (workload, device), sentences for the deltas, environment, errors."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import pandas as pd

from bench.config import MAX_AUC_DROP
from bench.metrics import (AUC, AUC_DELTA, AUC_DELTA_EMBEDDINGS, FIDELITY_GAP, GAUC_DELTA, N_EVAL, NE_DELTA, ORACLE_AUC, POPULARITY_AUC,
                           SCORES_SATURATED, SPEEDUP, lo)
from bench.record import USER, RunRecord, is_serving
from bench.report import fmt
from bench.results.readable import too_short, unreadable, UNREADABLE_SPAN
from bench.report.kernels import banner_lines, inconclusive_note, isa_line
from bench.report.regime import regime_sentences
from bench.report.measured_parts import measured_parts_section
from bench.report.machine import (
    PERFORMANCE_ONLY_NOTE,
    SCALE_PLOTS,
    access_table,
    percent,
    roofline_cell,
    scale_section,
)
from bench.report.paramserver import ps_section
from bench.report.pick import bottom_line
from bench.report.protocol import measured_section
from bench.report.sharding import sharding_section
from bench.report.toolkits import toolkit_section
from bench.report.zoo import zoo_section
from bench.registry import BATCHED_BACKEND, SPLIT_BACKEND
from bench.results.key import BASELINE, UNSHARDED, as_dict, labelled, replace, row_key, section_point, shown_axes
from bench.results.table import UNEXPLAINED, latest_records, trials
from bench import stats
from bench.stats import indistinguishable_from_zero, interval_contains, ratio_interval

CONFIDENCE = "95%"
TAIL_CALLS = 10  # a p99 made by fewer calls than this is named as such

SAMPLE_NOTE = (
    "A **sample** is one row: one user-item pair (its dense features, one id list per sparse feature, "
    "one label). Throughput is samples (rows) per second, the median over timing trials. MLPerf's "
    "DLRM-v2 counts a query of about 100-700 such pairs as one sample: divide by the query size "
    "before comparing with MLPerf figures."
)

READING_NOTES = [
    SAMPLE_NOTE,
    f"ΔAUC is AUC(backend) − AUC(fp32) on the same eval samples, with a paired {CONFIDENCE} "
    "confidence interval (DeLong's test for correlated ROC curves) and its p-value. Its verdict "
    "reads the interval against one accuracy budget for every backend, the largest AUC drop accepted "
    "(compare.max_auc_drop, stated at the top): *within budget* when the whole interval lies at or "
    "above −budget (a gain is within), *over budget* when it lies wholly below, *inconclusive* when "
    "it straddles −budget (a budget below 1e-05 reads as 1e-05: float rounding, not a loss). The gate "
    "judges each backend by its own rule (conf/gate/default.yaml) with the same reading; where that "
    "rule's margin differs from the budget, the verdict also gives the gate rule's reading. Deltas too "
    "small for four decimals are printed in scientific notation: a printed 0.0000 is exactly zero. "
    "ΔNE (lower is better) and Δacc (accuracy at 0.5 on the probability) are paired the same way, over the same "
    "samples; `gate=mlperf_dlrmv3` judges all three as MLPerf's DLRMv3 does.",
    f"Speedup is throughput / fp32 throughput at the same workload, device and batch size, timed "
    "*paired*: in the job's own process, rounds alternate fp32 and the backend over the same fresh "
    "batches (ABBA order), and the speedup is the median of the per-round ratios. Its "
    f"{CONFIDENCE} interval covers both the rounds of that process and the spread between "
    "processes measured on this machine (a re-run starts a new process: new placement in memory, "
    "new allocator state), so a re-run of the sweep should land inside it. Its verdict is read "
    "off that interval alone against a relative margin (compare.throughput_tolerance): "
    "*inconclusive* only when the interval straddles the margin. The absolute samples/s has its "
    "own interval and its own flag (⚠ when its trials varied more than timing.max_trial_cv): "
    "variation common to both sides of a round cancels in the ratio, so that flag does not touch "
    "the speedup.",
    "Latency p99 is over every timed call of the backend, with a distribution-free "
    f"{CONFIDENCE} interval; a p99 that rests on fewer than {TAIL_CALLS} calls also says how many (its "
    "interval then reaches the slowest calls, so its upper bound is the slowest call timed).",
    "Compression is fp32 embedding bytes / embedding bytes. MB = 10^6 bytes. Model MB counts every "
    "storage the prepared model holds once, at its real size (packed INT4/INT2 rows by their bytes).",
    "Emb GB/s is the embedding traffic (rows looked up per sample × stored row bytes × samples/s); in "
    "brackets, its share of this machine's random-row-gather bandwidth at the same row width (a GPU job: "
    "its GPU's, from device memory), measured once per machine (the roofline). Above 100% means rows came from cache, as a skewed (Zipf) access "
    "pattern allows; far below means the time went elsewhere (the MLP, the interaction, overheads). "
    "GEMM roofline is the same for the matrix products: their FLOPs per sample × samples/s against the "
    "measured fp32, int8 (CPU) or fp16 (GPU) GEMM throughput of the kernels that ran them.",
    "`fp32_tbe` (fp32 tables through FBGEMM's table-batched kernel) splits a speedup in two: "
    "fp32_tbe vs fp32 is the table-batching part, int8_tbe vs fp32_tbe the quantization part. "
    "Both parts are given below wherever the three rows exist, from the same paired speedups as the main table.",
]


def _group_table(g: pd.DataFrame, axes: Sequence[str] = ()) -> str:
    with_status = (g["status"] != "ok").any()
    with_fidelity = g[FIDELITY_GAP].notna().any()
    with_accuracy = g[AUC].notna().any() or not g["performance_only"].any()  # untrained models have no AUC to show
    with_build = g["performance_only"].any()  # building their tables is part of what they measure
    budgets = g["auc_budget"].dropna() if "auc_budget" in g.columns else pd.Series(dtype=float)
    budget = f"ΔAUC vs {float(budgets.iloc[0]):g} budget" if not budgets.empty else "ΔAUC vs budget"

    def baseline(r) -> bool:
        return r.backend == BASELINE and r.status == "ok"

    def speed(r) -> str:
        text = fmt.ratio_ci(r.speedup, r.speedup_lo, r.speedup_hi, r.latency_calls)
        return text + (" (unpaired)" if r.speedup_method == "unpaired" and text != fmt.DASH else "")  # two jobs' trials, timed apart

    C = fmt.Column
    columns = [
        (C("backend"), lambda r: r.backend),
        *((C(a), lambda r, a=a: fmt.word(getattr(r, a))) for a in axes),
        (C("batch", align="r"), lambda r: r.batch_size),
        *([(C("status"), lambda r: r.status)] if with_status else []),
        *([(C("AUC", align="r"), lambda r: fmt.number(r.auc)),
           (C(f"ΔAUC [{CONFIDENCE} CI]"), lambda r: "0 (reference)" if baseline(r) else fmt.delta_ci(r.auc_delta, r.auc_delta_lo, r.auc_delta_hi)),
           (C("p", align="r"), lambda r: "" if baseline(r) else fmt.p_value(r.auc_delta_p))] if with_accuracy else []),
        # ΔNE (lower is better) and Δaccuracy at 0.5, paired as ΔAUC; records written before them have none
        *([(C(f"ΔNE [{CONFIDENCE} CI]"), lambda r: "0 (reference)" if baseline(r) else fmt.delta_ci(r.ne_delta, r.ne_delta_lo, r.ne_delta_hi)),
           (C(f"Δacc [{CONFIDENCE} CI]"), lambda r: "0 (reference)" if baseline(r) else fmt.delta_ci(r.acc_delta, r.acc_delta_lo, r.acc_delta_hi))]
          if with_accuracy and NE_DELTA in g.columns and g[NE_DELTA].notna().any() else []),
        # a workload served by request: the grouped AUC's delta, MLPerf DLRMv3's AUC (each request's own, averaged)
        *([(C(f"ΔGAUC [{CONFIDENCE} CI]"), lambda r: "0 (reference)" if baseline(r) else fmt.delta_ci(r.gauc_delta, r.gauc_delta_lo, r.gauc_delta_hi))]
          if with_accuracy and GAUC_DELTA in g.columns and g[GAUC_DELTA].notna().any() else []),
        *([(C("fidelity gap", align="r"), lambda r: fmt.number(r.fidelity_gap))] if with_fidelity else []),
        *([(C(budget), verdict_cell)] if with_accuracy else []),
        (C("samples/s", align="r"), lambda r: fmt.count(r.throughput) + (" ⚠" if r.stable is False else "")),
        (C(f"speedup [{CONFIDENCE} CI]"), lambda r: "1.00× (reference)" if baseline(r) else speed(r)),
        (C("speed verdict"), lambda r: fmt.word(r.speed_verdict)),
        (C("p50", "ms", "r"), lambda r: fmt.ms(r.latency_p50_ms)),
        (C("p99", f"ms [{CONFIDENCE} CI]", "r"), p99_cell),
        (C("emb", "GB/s (roofline)", "r"), roofline_cell),
        (C("GEMM roofline", align="r"), lambda r: percent(r.dense_share)),
        (C("emb", "MB", "r"), lambda r: fmt.megabytes(r.embedding_bytes)),
        (C("compression", align="r"), lambda r: fmt.DASH if fmt.missing(r.compression) else f"{r.compression:.2f}×"),
        (C("model", "MB", "r"), lambda r: fmt.megabytes(r.model_bytes)),
        (C("peak RSS", "MB", "r"), lambda r: fmt.megabytes(r.peak_rss_bytes)),
        *([(C("build", "s", "r"), lambda r: fmt.DASH if fmt.missing(r.prepare_seconds) else f"{r.prepare_seconds:.1f}")] if with_build else []),
    ]
    return fmt.table([c for c, _ in columns], [[cell(r) for _, cell in columns] for r in g.itertuples(index=False)])


def _batches(sizes: Sequence[int]) -> str:
    sizes = sorted(set(int(s) for s in sizes))
    return f"batch {sizes[0]}" if len(sizes) == 1 else "batch sizes " + ", ".join(str(s) for s in sizes)


def differs_from_budget(r) -> bool:
    """Whether the row's gate rule reads its ΔAUC against another margin than the reader's budget."""
    return not (fmt.missing(r.auc_margin) or fmt.missing(r.auc_budget)) and not math.isclose(r.auc_margin, r.auc_budget)


def gate_reading(r) -> str:
    """The row's ΔAUC against its gate rule's margin, by the one accuracy rule (`budget_verdict`) the gate reads too."""
    return stats.budget_verdict(r.auc_delta_lo, r.auc_delta_hi, r.auc_margin)


def verdict_cell(r) -> str:
    """The ΔAUC against the one budget; the gate rule's reading beside it where its margin differs."""
    if r.budget_verdict is None or fmt.missing(r.budget_verdict):
        return fmt.DASH
    gate = f" (gate rule {r.auc_margin:g}: {gate_reading(r)})" if differs_from_budget(r) else ""
    return f"{r.budget_verdict}{gate}"


BUDGET_WORDS = {
    "within budget": "within the {b} budget (its whole interval lies at or above −{b})",
    "over budget": "outside the {b} budget (its whole interval lies below −{b})",
    "inconclusive": "inconclusive against the {b} budget (its interval straddles −{b})",
}
GATE_WORDS = {
    "within budget": "within {name}'s {m} gate rule",
    "over budget": "over {name}'s {m} gate rule",
    "inconclusive": "inconclusive against {name}'s {m} gate rule",
}


def delta_sentences(g: pd.DataFrame) -> list[str]:
    """One sentence per distinct ΔAUC of a backend (AUC does not depend on the batch size), with
    its practical verdict: equivalent within the margin, a gain, a loss, or inconclusive."""
    ok = g[(g["status"] == "ok") & (g["backend"] != BASELINE) & g[AUC_DELTA].notna()]
    groups: dict[tuple, list[int]] = defaultdict(list)
    extra: dict[tuple, tuple] = {}
    for r in ok.itertuples(index=False):
        k = (r.backend, r.auc_delta, r.auc_delta_lo, r.auc_delta_hi)
        groups[k].append(r.batch_size)
        extra[k] = r
    n_eval = g[N_EVAL].dropna()
    n_text = f", {fmt.count(n_eval.iloc[0])} eval samples" if not n_eval.empty else ""
    out = []
    for (backend, d, lo, hi), sizes in groups.items():
        r = extra[(backend, d, lo, hi)]
        p_value = r.auc_delta_p
        text = f"**{backend}** ({_batches(sizes)}): ΔAUC {fmt.delta_ci(d, lo, hi)}"
        p_text = fmt.p_value(p_value)
        p = f"p {p_text if p_text.startswith('<') else '= ' + p_text}{n_text}"
        if fmt.missing(lo) or fmt.missing(hi):
            out.append(f"{text} has no confidence interval in its record, so it cannot be judged against noise.")
            continue
        detect = "cannot be told from zero" if indistinguishable_from_zero(lo, hi) else "differs from zero"
        b = f"{r.auc_budget:g}"
        words = BUDGET_WORDS.get(str(r.budget_verdict), str(r.budget_verdict)).format(b=b)
        if differs_from_budget(r):
            reading = gate_reading(r)
            words += "; " + GATE_WORDS.get(reading, reading).format(name=backend, m=f"{r.auc_margin:g}")
        out.append(f"{text}: {words}; it {detect} ({p}).")
    return out


def attribution_rows(g: pd.DataFrame) -> list[list[str]]:
    """One row per backend whose record splits its ΔAUC into embeddings and dense layers (MLP)."""
    rows = g[(g["status"] == "ok") & g[AUC_DELTA_EMBEDDINGS].notna()]
    points = rows.sort_values("batch_size").groupby("backend", sort=False).tail(1)  # AUC ignores the batch size
    return [
        [r.backend, fmt.delta_ci(r.auc_delta, r.auc_delta_lo, r.auc_delta_hi),
         fmt.delta_ci(r.auc_delta_embeddings, r.auc_delta_embeddings_lo, r.auc_delta_embeddings_hi),
         fmt.delta_ci(r.auc_delta_mlp, r.auc_delta_mlp_lo, r.auc_delta_mlp_hi)]
        for r in points.itertuples(index=False)
    ]


def p99_cell(r) -> str:
    """p99 ms with its interval; when fewer than TAIL_CALLS calls make it, how many too."""
    if fmt.missing(r.latency_p99_ms):
        return fmt.DASH
    if fmt.missing(r.latency_p99_calls) or fmt.missing(r.latency_p99_lo_ms):
        return fmt.ms(r.latency_p99_ms)
    cell = f"{fmt.ms(r.latency_p99_ms)} [{fmt.ms(r.latency_p99_lo_ms)}, {fmt.ms(r.latency_p99_hi_ms)}]"
    if r.latency_p99_calls < TAIL_CALLS:
        return f"{cell} (slowest {r.latency_p99_calls:.0f} of {fmt.count(r.latency_calls)} calls)"
    return cell


def speedup_sentences(g: pd.DataFrame) -> list[str]:
    """Undecided speedups with the interval that cannot decide them, equivalent ones that hold 1, then
    absolute throughputs whose trials varied too much to quote (the speedup stands on its own)."""
    rows = g[(g["status"] == "ok") & (g["backend"] != BASELINE)]
    out = []
    for r in rows[rows[lo(SPEEDUP)].notna()].itertuples(index=False):
        ci = fmt.ratio_ci(r.speedup, r.speedup_lo, r.speedup_hi)
        if unreadable(r.speedup, r.speedup_lo, r.speedup_hi):
            out.append(f"**{r.backend}** (batch {r.batch_size}): speedup {too_short(r.latency_calls)}: its interval spans more than {UNREADABLE_SPAN:g}x.")
        elif r.speed_verdict == "inconclusive":
            out.append(inconclusive_note(r.backend, r.batch_size, ci, r.speedup_lo, r.speedup_hi, r.speed_margin, getattr(r, "kernel_degraded", None)))
        elif interval_contains(r.speedup_lo, r.speedup_hi, 1.0):
            out.append(f"**{r.backend}** (batch {r.batch_size}): speedup {ci} cannot be told from no change: the interval "
                       f"contains 1 and lies within the ±{r.speed_margin:.0%} margin.")
    out += disagreement_sentences(g)
    all_rows = g[g["status"] == "ok"]
    out += [f"⚠ **{r.backend}** (batch {r.batch_size}): the absolute samples/s is not a finding: {r.unstable_reason}"
            + ("; the paired speedup is judged on its own interval." if r.backend != BASELINE else ".")
            for r in all_rows.itertuples(index=False) if r.stable is False]
    return out


def disagreement_sentences(g: pd.DataFrame) -> list[str]:
    """One line per row whose samples/s against fp32's and paired speedup point opposite ways: the cause
    (`speed_disagreement`), or a flag where none is known."""
    base = {r.batch_size: r for r in g[(g["backend"] == BASELINE) & (g["status"] == "ok")].itertuples(index=False)}
    out = []
    for r in g[g["speed_disagreement"].notna()].itertuples(index=False) if "speed_disagreement" in g.columns else []:
        ratio = r.throughput / base[r.batch_size].throughput if r.batch_size in base else math.nan
        said = (f"**{r.backend}** (batch {r.batch_size}): its samples/s are {ratio:.2f}x fp32's but its paired speedup is "
                f"{r.speedup:.2f}x")
        if r.speed_disagreement == UNEXPLAINED:
            rounds = f"{int(r.speedup_rounds)} paired rounds" if math.isfinite(r.speedup_rounds) else "paired rounds not recorded"
            out.append(f"⚠ {said}, with no known cause (same timing mode, {rounds}): "
                       "read neither as a finding until a re-run agrees.")
        else:
            out.append(f"{said}: {r.speed_disagreement}. The samples/s come from two jobs timed apart, each alone; "
                       "the speedup alternates both in one process, and is the figure to read.")
    return out


SPLIT = (BASELINE, BATCHED_BACKEND, SPLIT_BACKEND)  # the rows a TBE speedup is split by (bench.registry)


def _speed_rows(g: pd.DataFrame, bs: int) -> list | None:
    """The ok unsharded fp32, fp32_tbe and int8_tbe rows of one batch size, each with a speedup; else None."""
    one = g[(g["status"] == "ok") & (g["batch_size"] == bs) & (g["sharding"] == UNSHARDED[0]) & (g["world_size"] == UNSHARDED[1])]
    rows = [one[one["backend"] == b] for b in SPLIT]
    if any(r.empty for r in rows) or any(fmt.missing(r[SPEEDUP].iloc[0]) for r in rows[1:]):
        return None
    return [next(r.itertuples(index=False)) for r in rows]


def _speed_cell(r) -> str:
    return fmt.ratio_ci(r.speedup, r.speedup_lo, r.speedup_hi) + ("" if r.speedup_method == "paired" else f" ({r.speedup_method})")


def tbe_split(g: pd.DataFrame, latest: dict[tuple, RunRecord]) -> tuple[list[list[str]], list[str]]:
    """Rows (batch, batching part, quantization part, total) where fp32, fp32_tbe and int8_tbe exist, from the
    main table's speedups (paired where the records are), the quantization part being total / batching; and a
    labelled line per pair whose unpaired ratio (the two jobs' trials, timed apart) differs from that speedup by
    more than the speed margin."""
    workload, device = g["workload"].iloc[0], g["device"].iloc[0]
    rows, notes = [], []
    for bs in sorted(set(int(b) for b in g["batch_size"])):
        found = _speed_rows(g, bs)
        if found is None:
            continue
        _, tbe, int8 = found
        rows.append([str(bs), _speed_cell(tbe), f"{int8.speedup / tbe.speedup:.2f}×", _speed_cell(int8)])
        recs = {b: latest.get(replace(row_key(found[0]), backend=b)) for b in SPLIT}
        for r in (tbe, int8):
            if r.speedup_method != "paired" or not (trials(recs[r.backend]) and trials(recs[BASELINE])):
                continue
            un, un_lo, un_hi = ratio_interval(trials(recs[r.backend]), trials(recs[BASELINE]))
            if abs(math.log(un / r.speedup)) > math.log1p(r.speed_margin):
                notes.append(unpaired_note(r, un, un_lo, un_hi))
    return rows, notes


def unpaired_note(r, un: float, un_lo: float, un_hi: float) -> str:
    """A ratio of one pair made two ways, labelled: the paired speedup and the unpaired ratio, and why they differ."""
    return (f"{r.backend} / fp32 at batch {r.batch_size}: the paired speedup is {fmt.ratio_ci(r.speedup, r.speedup_lo, r.speedup_hi)} "
            f"(the figure above and in the main table); the unpaired ratio of the two jobs' median samples/s is "
            f"{fmt.ratio_ci(un, un_lo, un_hi)}. They differ because the unpaired ratio sets two jobs timed minutes apart side "
            "by side, so it carries whatever changed between them (load, clock, placement; a ⚠ row's trials varied), while "
            "the paired one alternates both in one process over the same batches: read the paired one.")


def _oracle_line(g: pd.DataFrame) -> str | None:
    """The oracle AUC (a workload that knows its true probabilities) and the popularity-only baseline (a sequential
    workload), each beside fp32's AUC."""
    base = g[(g["backend"] == BASELINE) & g[AUC].notna()][AUC]
    fp32 = float(base.iloc[0]) if not base.empty else None
    lines = []
    oracle = g[ORACLE_AUC].dropna()
    if not oracle.empty:
        o = float(oracle.iloc[0])
        tail = f"; fp32 reaches {fp32:.4f} ({100 * fp32 / o:.1f}% of it)" if fp32 is not None else ""
        lines.append(f"Oracle AUC (the workload's true probabilities on the same eval split): {o:.4f}{tail}.")
    popularity = g[POPULARITY_AUC].dropna() if POPULARITY_AUC in g else None
    if popularity is not None and not popularity.empty:
        p = float(popularity.iloc[0])
        tail = f"; fp32 {fp32:.4f}, {fp32 - p:+.4f} above it" if fp32 is not None else ""
        lines.append(f"Popularity-only baseline AUC (each candidate's train click rate, no history): {p:.4f}{tail}.")
    return " ".join(lines) or None


def score_lines(g: pd.DataFrame) -> list[str]:
    """How a probabilities model's scores were read, and where its clamp tied them (ranking lost there)."""
    reads = sorted({str(x) for x in g["score_read"].dropna()})
    if not reads:
        return []
    lines = [f"The model returns probabilities; its scores are read as logits through {' and '.join(reads)}."]
    saturated = g[g[SCORES_SATURATED] > 0].drop_duplicates("backend")
    lines += [f"{r.backend}: {r.scores_saturated:.0%} of scores saturated: ranking lost there." for r in saturated.itertuples(index=False)]
    return [" ".join(lines), ""]


def _one_reason(g: pd.DataFrame) -> str | None:
    """The shared reason when no row of the group ran and all say the same (a device absent here)."""
    reasons = {fmt.first_line(e) for e in g["error"]}
    if len(g) > 1 and (g["status"] == "skipped").all() and len(reasons) == 1:
        return next(iter(reasons)) or "no reason recorded"
    return None


def _group_section(g: pd.DataFrame, latest: dict[tuple, RunRecord], plots: Sequence[Path], out_dir: Path,
                   axes: Sequence[str] = ()) -> list[str]:
    workload, device = g["workload"].iloc[0], g["device"].iloc[0]
    at = ", ".join(f"{a} {fmt.word(g[a].iloc[0])}" for a in axes)
    lines = [f"## {workload} on {device}" + (f", {at}" if at else ""), ""]
    reason = _one_reason(g)
    if reason is not None:
        return lines + [f"All {len(g)} jobs skipped ({g['backend'].nunique()} backends, {_batches(g['batch_size'])}): {reason}", ""]
    n_eval = g[N_EVAL].dropna()
    if not n_eval.empty:
        lines += [f"AUC over {fmt.count(n_eval.max())} eval samples, each scored once.", ""]
    lines += malformed_lines(latest, workload, device)
    oracle = _oracle_line(g)
    if oracle:
        lines += [oracle, ""]
    lines += score_lines(g)
    if (g["backend"] != BASELINE).any() and not ((g["backend"] == BASELINE) & (g["status"] == "ok")).any():
        lines += ["No ok fp32 row here: speedup, compression and deltas have no reference.", ""]
    if g["performance_only"].any():
        lines += [f"**{PERFORMANCE_ONLY_NOTE[0].upper()}{PERFORMANCE_ONLY_NOTE[1:]}.**", ""]
    lines += [_group_table(g, axes), ""]
    lines += access_table(g)
    sentences = delta_sentences(g) + speedup_sentences(g) + regime_sentences(g)
    if sentences:
        lines += ["Reading the deltas:", ""] + [f"- {s}" for s in sentences] + [""]
    parts = attribution_rows(g)
    if parts:
        lines += [
            "Where the ΔAUC comes from: the embeddings' share is the same backend with an fp32 MLP against fp32; "
            "the dense layers' share is the backend against that fp32-MLP twin (paired, 95% CI):",
            "",
            fmt.table([fmt.Column("backend"), fmt.Column("ΔAUC"), fmt.Column("embeddings"), fmt.Column("dense layers (MLP)")], parts),
            "",
        ]
    split, unpaired = tbe_split(g, latest)
    if split:
        lines += [
            "Table batching vs quantization: the batching part and the total are the main table's speedups (paired, "
            "95% CI); the quantization part is total / batching, the ratio of those two speedups (no interval):",
            "",
            fmt.table([fmt.Column("batch", align="r"), fmt.Column(f"{BATCHED_BACKEND} / {BASELINE}", "(batching)"),
                       fmt.Column(f"{SPLIT_BACKEND} / {BATCHED_BACKEND}", "(quantization)"), fmt.Column(f"{SPLIT_BACKEND} / {BASELINE}", "(total)")], split),
            "",
            *[f"- Made another way: {n}" for n in unpaired],
            *([""] if unpaired else []),
        ]
    lines += ps_section(latest, workload, device)
    for p in plots:
        lines += [f"![{p.stem}]({Path(p).relative_to(out_dir).as_posix()})", ""]
    return lines


def malformed_lines(latest: dict[tuple, RunRecord], workload: str, device: str) -> list[str]:
    """The raw text's malformed lines that the workload skipped, by kind (read from the records)."""
    for key, r in latest.items():
        at = as_dict(key)
        found = ((r.metrics or {}).get("workload_info") or {}).get("malformed") if (at["workload"], at["device"]) == (workload, device) else None
        if found is not None:
            kinds = ", ".join(f"{reason}: {fmt.count(n)}" for reason, n in sorted(found["by_reason"].items()))
            return [f"Read from raw text: {fmt.count(found['count'])} malformed lines skipped" + (f" ({kinds})." if kinds else "."), ""]
    return []


def _env_block(records: Sequence[RunRecord]) -> list[str]:
    by_fp: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        by_fp[str((r.env or {}).get("fingerprint"))].append(r)
    lines = ["## Environment", ""]
    if len(by_fp) > 1:
        lines += [f"**{len(by_fp)} different machine fingerprints**: compare rows only within one fingerprint.", ""]
    lines.append("```")
    for fp, recs in by_fp.items():
        envs: dict[tuple, int] = {}  # distinct environments in first-seen order, with their counts
        for r in recs:
            env = tuple(sorted((k, str(v)) for k, v in (r.env or {}).items()))
            envs[env] = envs.get(env, 0) + 1
        for env, n in envs.items():
            e = dict(env)
            dirty = " (dirty)" if e.get("git_dirty") == "True" else ""
            lines += [
                f"fingerprint {fp}: {n} record(s)",
                f"  cpu {e.get('cpu')}, threads {e.get('threads')}, gpu {e.get('gpu')}, host {e.get('hostname')}",
                f"  python {e.get('python')}, torch {e.get('torch')}, torchrec {e.get('torchrec')}, "
                f"fbgemm_gpu {e.get('fbgemm_gpu')}",
                isa_line(e),
                f"  git {e.get('git_sha')}{dirty}",
            ]
    lines += ["```", ""]
    return lines


def _problems(df: pd.DataFrame) -> list[str]:
    bad = df[df["status"] != "ok"]
    lines = ["## Errors and skips", ""]
    if bad.empty:
        return lines + ["None: every run finished.", ""]
    for (workload, device), g in bad.groupby(["workload", "device"], sort=False):
        reason = _one_reason(g) if len(g) == len(df[(df["workload"] == workload) & (df["device"] == device)]) else None
        if reason is not None:  # one line for a device absent here, not one per job
            lines.append(f"- {workload} / {device}: **skipped**, all {len(g)} jobs: {reason}")
            continue
        for r in g.itertuples(index=False):
            text = fmt.first_line(r.error) or "no reason recorded"
            status = "bad input (not a measurement)" if r.error_kind == USER else r.status
            lines.append(f"- {r.workload} / {r.device} / {r.backend} / batch {r.batch_size}: **{status}**: {text}")
    return lines + [""]


def _bottom_line_block(df: pd.DataFrame, budget: float) -> list[str]:
    lines = bottom_line(df, budget)
    return [lines[0], "", *lines[1:], ""] if lines else []


def _key_words(df: pd.DataFrame) -> str:
    words = ["workload", "device", "backend", "sharding", "ranks", "batch size", *shown_axes(df)]
    return ", ".join(words[:-1]) + " and " + words[-1]


def render_report(
    df: pd.DataFrame,
    records: Sequence[RunRecord],
    title: str,
    plots: dict[tuple[str, str], list[Path]],
    out_dir: Path,
    budget: float = MAX_AUC_DROP,
) -> str:
    """report.md: the bottom line against `budget` (compare.max_auc_drop) first, then how to read the
    tables, the tables per workload and device, errors and the environment."""
    latest = latest_records(records)
    df = labelled(df, further=False)  # a sharded row is named `backend@sharding×ranks`; further axes are columns
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    lines = [
        f"# {title}",
        "",
        *banner_lines(list(latest.values())),
        f"{len(records)} records, {len(df)} rows (the newest record per {_key_words(df)}); rendered {now} from stored records only.",
        "",
        *_bottom_line_block(df, budget),
        *zoo_section(df),
        *toolkit_section(df, latest),
        "How to read this:",
        "",
        *[f"- {note}" for note in READING_NOTES],
        "",
        *measured_section(records),
    ]
    serving = sum(is_serving(r) for r in records)
    if serving:
        lines += [f"{serving} serving records (MLPerf LoadGen scenarios): see [serve.md](serve.md).", ""]
    lines += measured_parts_section(records)
    lines += scale_section(df)
    lines += [f"![{p.stem}]({Path(p).relative_to(out_dir).as_posix()})\n" for p in plots.get(SCALE_PLOTS, [])]
    axes = shown_axes(df)  # a section per point of the further axes a row moved, each a column of its table
    for _, g in df.groupby(["workload", "device", *axes], sort=False, dropna=False):
        lines += _group_section(g, latest, plots.get(section_point(g, axes), []), out_dir, axes)
    lines += sharding_section(latest.values())
    lines += _problems(df)
    lines += _env_block(records)
    return "\n".join(lines).rstrip() + "\n"
