"""A recommend's folder `reports/recommend/<timestamp>/`: recommend.md, recommend.json and front.png, and the
few lines the command prints."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.io import to_json, write_text_atomic
from bench.metrics import AUC_DELTA
from bench.recommend.decide import Candidate, Facts, ratio_text
from bench.recommend.funnel import Outcome, front_points
from bench.report import fmt


def _num(x: Any, spec: str = ",.0f") -> str:
    return fmt.DASH if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def ne_text(f: Facts) -> str:
    """`; ΔNE +0.00031 [...]` beside ΔAUC where stage 1 measured it (facts stored before it have none), and `; ΔGAUC ...`
    for a workload served by request (MLPerf DLRMv3's AUC)."""
    text = "" if math.isnan(f.ne_delta) else f"; ΔNE {fmt.delta_ci(f.ne_delta, f.ne_delta_lo, f.ne_delta_hi, 5)}"
    return text + ("" if math.isnan(f.gauc_delta) else f"; ΔGAUC {fmt.delta_ci(f.gauc_delta, f.gauc_delta_lo, f.gauc_delta_hi, 5)}")


def pick_lines(out: Outcome) -> list[str]:
    """The pick in a few lines: backend, batcher, threads, Server QPS (absolute and against fp32), ΔAUC, MB."""
    c = out.chosen
    if c is None:
        return [f"no pick: no candidate meets p99 <= {out.cfg.slo.p99_ms:g} ms"
                + (f" at {out.cfg.slo.qps:g} QPS" if out.cfg.slo.qps is not None else "") + f" inside the {out.budget:g} ΔAUC budget",
                f"  {out.miss}"]
    conf, f, e = out.confirmations[c], out.facts[c.backend], out.estimates[c]
    return [f"pick: {c.backend}, batcher {c.batch_size} rows, {c.threads} thread{'s' if c.threads > 1 else ''} (max wait "
            f"{out.cfg.serve.max_wait_ms:g} ms)" if out.cfg.serve is not None else f"pick: {c.label()}",
            f"  Server max QPS under {out.cfg.slo.p99_ms:g} ms: {conf.max_qps:,.4g} [{_num(conf.max_qps_lo, ',.4g')}, "
            f"{_num(conf.max_qps_hi, ',.4g')}], {ratio_text(conf.relative, conf.relative_lo, conf.relative_hi)} fp32's "
            f"({conf.fp32_max_qps:,.4g}); stage-3 estimate {e.qps:,.0f} QPS, {ratio_text(e.relative, e.relative_lo, e.relative_hi)} fp32's",
            f"  ΔAUC {fmt.delta_ci(f.auc_delta, f.auc_delta_lo, f.auc_delta_hi, 5)} (budget {out.budget:g}){ne_text(f)}; model {f.model_mb:.2f} MB "
            f"(embeddings {f.embedding_mb:.2f} MB)"]


def front_rows(out: Outcome) -> list[list[str]]:
    rows = []
    anchored = out.through_ratio
    for p in out.front:
        e, f = out.estimates.get(p.candidate), out.facts[p.candidate.backend]
        conf = out.confirmations.get(p.candidate)
        q, lo, hi = anchored[p.candidate]
        rows.append([p.candidate.label() + (" (pick)" if p.candidate == out.chosen else ""),
                     f"{q:,.0f} [{lo:,.0f}, {hi:,.0f}]", ratio_text(e.relative, e.relative_lo, e.relative_hi),
                     f"{conf.max_qps:,.4g}, {ratio_text(conf.relative, conf.relative_lo, conf.relative_hi)} fp32's" if conf else "not served",
                     fmt.delta_ci(f.auc_delta, f.auc_delta_lo, f.auc_delta_hi, 5), f"{f.model_mb:.2f}"])
    return rows


def console_lines(out: Outcome, folder: Path) -> list[str]:
    lines = pick_lines(out) + [f"  {w}" for w in out.why] + [f"  {n}" for n in out.notes if " not confirmed: " in n]
    if any(p.qps > 0 for p in out.front):  # a front of candidates no load serves within the bound says nothing
        lines.append("front (estimated QPS under the bound, ΔAUC, model MB): " + "; ".join(
            f"{p.candidate.label()} {p.qps:,.0f}, {p.auc_delta:+.5f}, {p.model_mb:.2f} MB" for p in out.front[:6]))
    stages: dict[str, int] = {}
    for r in out.rejections:
        stages[r.stage] = stages.get(r.stage, 0) + 1
    lines.append("rejected: " + (", ".join(f"{n} at stage {s}" for s, n in sorted(stages.items())) or "none"))
    lines.append(f"took {out.seconds.get('total', 0):.0f} s ({out.jobs_measured} jobs measured, {out.jobs_resumed} reused from the store, "
                 f"{out.facts_reused} of {len(out.facts)} backends' accuracy and {out.served_reused} of {out.served_reused + out.served_timed} "
                 f"served batch times read back); report: {folder / 'recommend.md'}")
    return lines


def write_recommend(out: Outcome, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "recommend.json", to_json(as_json(out), indent=1) + "\n")
    write_text_atomic(folder / "recommend.md", markdown(out))
    plot_front(out, folder / "front.png")


def _candidate(c: Candidate) -> dict[str, Any]:
    return dataclasses.asdict(c)


def as_json(out: Outcome) -> dict[str, Any]:
    cfg = out.cfg
    anchored = out.through_ratio
    return {
        "objectives": {"p99_ms": cfg.slo.p99_ms, "qps": cfg.slo.qps, "max_auc_drop": out.budget, "max_model_mb": cfg.memory.max_model_mb},
        "candidates": {"backends": out.backends, "batch_sizes": list(cfg.recommend.batch_sizes), "threads": out.threads},
        "pick": None if out.chosen is None else {**_candidate(out.chosen), "server": dataclasses.asdict(out.confirmations[out.chosen]),
                                                 "estimate": dataclasses.asdict(out.estimates[out.chosen]),
                                                 "accuracy_and_size": dataclasses.asdict(out.facts[out.chosen.backend])},
        "nearest_miss": out.miss,
        "front": [{**_candidate(p.candidate), "qps": p.qps, AUC_DELTA: p.auc_delta, "model_mb": p.model_mb, "confirmed": p.confirmed}
                  for p in out.front],
        "facts": {k: dataclasses.asdict(f) for k, f in out.facts.items()},
        "estimates": [{**_candidate(c), **dataclasses.asdict(e), "qps_through_ratio": dict(zip(("point", "lo", "hi"), anchored[c]))}
                      for c, e in out.estimates.items()],
        "confirmations": [{**_candidate(c), **dataclasses.asdict(v)} for c, v in out.confirmations.items()],
        "rejected": [dataclasses.asdict(r) for r in out.rejections],
        "what_would_change": out.changes,
        "notes": out.notes,
        "seconds": out.seconds,
        "jobs": {"measured": out.jobs_measured, "reused": out.jobs_resumed},
        "served_times": {"timed": out.served_timed, "read_back": out.served_reused},
    }


HOW = ("How it was decided: a funnel, cheapest stage first. (1) Each backend's ΔAUC against fp32 on the eval split, "
       "from the cached eval scores, with a paired 95% DeLong interval: the whole interval must lie above minus the budget. "
       "(2) The prepared model's MB against the limit. (3) Paired offline jobs (fp32 and the backend alternating in one "
       "process) at a query's rows and at each batcher size give the backend's batch times as fp32's over the speedup; a "
       "simulated batcher on Poisson arrivals turns them into the max QPS under the bound, with the speedups' interval. "
       "A candidate beaten beyond both intervals at the same threads, by one whose ΔAUC interval reaches no lower and whose model is no larger, is out. (4) The best "
       "estimates are served under LoadGen's Server scenario, each search interleaved run by run with fp32's at the same batcher and threads; the pick is the "
       "confirmed one with the highest low end of its Server QPS interval read through its paired ratio to fp32 (the ratio's interval times fp32's "
       "median max QPS at the same batcher and threads: the host's speed phases cancel in the ratio); with a target rate, "
       "the fewest threads that hold it. A candidate whose bracket or fp32's is open (no INVALID target above its max) is not confirmed: "
       "it ranks below every closed one.")


def markdown(out: Outcome) -> str:
    cfg = out.cfg
    lines = ["# Recommend", "",
             f"Objectives: p99 <= {cfg.slo.p99_ms:g} ms" + (f" at {cfg.slo.qps:g} QPS" if cfg.slo.qps is not None else "")
             + f", ΔAUC budget {out.budget:g}" + (f", model <= {cfg.memory.max_model_mb:g} MB" if cfg.memory.max_model_mb is not None else "")
             + f". Candidates: {len(out.backends)} backends x batcher sizes {list(cfg.recommend.batch_sizes)} x threads {out.threads}.", "",
             "## The pick", "", *pick_lines(out), ""]
    if out.chosen is not None:
        conf = out.confirmations[out.chosen]
        lines += [f"Confirmation: {conf.method}; records {', '.join(conf.records)}. p99 at the max QPS: {_num(conf.p99_ms, '.1f')} ms.", ""]
    lines += ["## Pareto front (QPS under the bound, ΔAUC, model MB)", "",
              "The QPS axis is stage 3's queue estimate for every candidate, read through its ratio to fp32 (the ratio times fp32's "
              "median estimate at that batcher size and threads; one measure for all; LoadGen Server figures exist for the "
              "few confirmed, shown beside it); a candidate whose Server runs met the bound at no load sits at 0.", "",
              fmt.markdown_table(["candidate", "est. QPS under the bound [95% CI]", "est. vs fp32", "Server max QPS", "ΔAUC [95% CI]",
                                  "model MB"], front_rows(out)), "",
              "![front](front.png)", "", "## Confirmations (stage 4)", ""]
    if out.confirmations:
        lines.append(fmt.markdown_table(
            ["candidate", "Server max QPS [VALID, INVALID]", "fp32's", "vs fp32", "p99 ms", "records"],
            [[c.label(), f"{v.max_qps:,.4g} [{_num(v.max_qps_lo, ',.4g')}, {_num(v.max_qps_hi, ',.4g')}]", f"{v.fp32_max_qps:,.4g}",
              ratio_text(v.relative, v.relative_lo, v.relative_hi), _num(v.p99_ms, ".1f"), ", ".join(v.records)] for c, v in out.confirmations.items()]))
    else:
        lines.append("None: no candidate reached stage 4.")
    anchored = out.through_ratio
    lines += ["", "## Stage 3 estimates", "", "Ranked by the QPS read through the ratio to fp32 (the ratio and its interval times "
              "fp32's median estimate at that batcher size and threads), the measure stage 3 compares and orders by.", "",
              fmt.markdown_table(
        ["candidate", "QPS through the ratio [95% CI]", "vs fp32", "est. QPS", "fp32 est. QPS"],
        [[c.label(), f"{anchored[c][0]:,.0f} [{anchored[c][1]:,.0f}, {anchored[c][2]:,.0f}]", ratio_text(e.relative, e.relative_lo, e.relative_hi),
          f"{e.qps:,.0f}", f"{e.fp32_qps:,.0f}"]
         for c, e in sorted(out.estimates.items(), key=lambda kv: -anchored[kv[0]][0])]) if out.estimates else "None.", "",
        "## Accuracy and size (stages 1-2)", "", fmt.markdown_table(
        ["backend", "ΔAUC [95% CI]", "ΔNE [95% CI]", "ΔGAUC [95% CI]", "model MB", "embeddings MB"],
        [[b, fmt.delta_ci(f.auc_delta, f.auc_delta_lo, f.auc_delta_hi, 5) if f.skipped is None else f"not run: {f.skipped}",
          fmt.DASH if math.isnan(f.ne_delta) else fmt.delta_ci(f.ne_delta, f.ne_delta_lo, f.ne_delta_hi, 5),
          fmt.DASH if math.isnan(f.gauc_delta) else fmt.delta_ci(f.gauc_delta, f.gauc_delta_lo, f.gauc_delta_hi, 5),
          _num(f.model_mb, ".2f"), _num(f.embedding_mb, ".2f")] for b, f in out.facts.items()]), "",
        "## Rejected", "", fmt.markdown_table(["candidate", "stage", "reason"], [[r.what, r.stage, r.reason] for r in out.rejections])
        if out.rejections else "None.", "", "## What would change the pick", ""]
    lines += [f"- {c}" for c in out.changes] or ["- nothing measured here would: every stopped candidate was stopped by its own figures"]
    lines += ["", "## Cost", "", f"{out.seconds.get('total', 0):.0f} s in all: " + ", ".join(f"{k} {v:.0f} s" for k, v in out.seconds.items() if k != "total")
              + f"; {out.jobs_measured} jobs measured, {out.jobs_resumed} reused from the store; {out.facts_reused} of {len(out.facts)} "
              f"backends' accuracy and size, and {out.served_reused} of {out.served_reused + out.served_timed} served batch times, read back "
              "from the store.", "", HOW, ""]
    return "\n".join(lines)


def plot_front(out: Outcome, path: Path) -> None:
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    front = {p.candidate for p in out.front}
    points = front_points(out)
    if points:
        largest = max(p.model_mb for p in points) or 1.0
        for p in points:
            on = p.candidate in front
            ax.scatter(p.auc_delta, p.qps, s=30 + 200 * p.model_mb / largest, alpha=0.8 if on else 0.3,
                       marker="*" if p.candidate == out.chosen else "o", edgecolors="black" if on else "none")
            if on:
                ax.annotate(p.candidate.label(), (p.auc_delta, p.qps), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axvline(-out.budget, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("ΔAUC against fp32 (the budget dashed)")
    ax.set_ylabel(f"estimated QPS under p99 {out.cfg.slo.p99_ms:g} ms")
    ax.set_title("Candidates: the front outlined, marker area = model MB, the pick a star", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
