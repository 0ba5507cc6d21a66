"""The serving report (`+sweep=serve`): serve.csv, serve.md and a latency-versus-QPS plot per backend,
rendered from the serving table (`bench.results.serving_table`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from bench.config.schema import MAX_STEAL
from bench.io import write_text_atomic
from bench.metrics import LATENCY_MS, MAX_QPS, SAMPLES_PER_S, hi, lo
from bench.record import RunRecord
from bench.report import fmt
from bench.results.key import BASELINE
from bench.results.key import SERVE_KEY
from bench.results.serving_table import PAIRED, latest_serving, serve_table
from bench.serve.paired import LEVELS, NOT_ENOUGH
from bench.results.table import as_records
from bench.serve.qps_search import aside_cause

C = fmt.Column  # a table column: its header and alignment (bench.report.fmt.table)

NOTES = [
    "A **sample** is one LoadGen sample: one user's group of candidate pairs (rows), as in MLPerf's DLRM-v2 "
    "(sizes drawn from its quantiles, 100-700 pairs, mean 270, unless the run fixed them). pairs/s = samples/s "
    "× the pairs per sample the run served.",
    "**Server**: queries of one sample arrive at random (Poisson) at the target QPS; LoadGen judges each run "
    "VALID or INVALID (p99 latency within the bound, with early stopping, and the run's minimum duration and "
    "query count). A target near the bound runs again on fresh schedules until a majority of its runs agree "
    "(evidence: \"VALID 2/3 at 410\" = 2 of 3 runs VALID); a clear first run settles it. A run during which the "
    "hypervisor took over `serve.max_steal` of the CPU time (steal, default 5%) is set aside and its target run again, and so is a run "
    "whose median batch time was over `1 + serve.max_slowdown` times the same serving setup's usual on this machine (pace, from the "
    "runs stored by earlier jobs; a dash: none stored yet). Max QPS is the highest "
    "target judged VALID below every INVALID one; the bracket [highest VALID, lowest INVALID] holds the true limit. "
    "0 means no target met the bound. Latencies are LoadGen's, at the max-QPS step (where none was VALID, at the lowest load tried). "
    "The queue estimate is the rate a simulated queue with the SUT's batcher and its measured batch times holds under the bound "
    "(docs/serving.md); vs Offline is max QPS over the same backend's Offline samples/s.",
    "**Relative to fp32 (paired)**: a Server job's search ran interleaved with fp32's, run by run in ABBA order in one "
    "process, so both met the same host. Then both sides tracked their limits in the same rounds: a staircase from each "
    "search's max, up one step (`serve.track_step`) after a VALID run, down one after an INVALID one; a slow phase fails "
    "both runs of a round and moves both down, so their ratio holds. Tracking runs until the ratio has its evidence "
    "(`serve.min_rounds` joint rounds after both sides' first reversals, `serve.min_reversals` reversals a side), however long "
    "a run lasts on this machine; `serve.max_search_s` is a cap, and a job that reached it first says **not enough runs** "
    "instead of a ratio. vs fp32 is the two sides' limits fitted to their tracking runs' verdicts (`serve.ratio_fit=logistic`: "
    "a logistic function of load with a host state shared by a round's runs), or with `serve.ratio_fit=levels` the geometric "
    "mean of the per-round ratios of the two loads run, over the joint rounds after both first reversals; the interval is where "
    "a re-run's ratio should fall (95%: a jackknife over the rounds' ABBA blocks for the fit, Student's t over them for the "
    "levels, wide when they are few, plus a run-to-run spread for what one job's rounds cannot see: `serve.rerun_spread`, "
    "weighed with the spread between re-runs of paired Server jobs on this machine once there are some, bench.pipeline.reruns). "
    "The two brackets' interval "
    "[backend VALID / fp32 INVALID, backend INVALID / fp32 VALID] stands beside it, and is the ratio's when tracking is off. "
    "The ratio repeats on a host whose speed moves; an absolute max QPS still needs a quiet, dedicated "
    "host. A side that met no load has no ratio (not 0).",
    "**Offline**: every query at once; samples/s as LoadGen measured it.",
    "Short runs (the default) judge fewer queries than MLPerf's 600 s runs, and early stopping tolerates fewer "
    "late queries in a short run, so a short run's max QPS is a conservative estimate, not a compliant result "
    "(docs/serving.md).",
    "Accuracy: a LoadGen AccuracyOnly run sends every sample once; its AUC (from LoadGen's accuracy log) is "
    "checked against the offline AUC of the same backend on the same rows: to 1e-9 where a sample's score does "
    "not depend on its batch, within the stated tolerance where activations are quantized per batch "
    "(batch-dependent); the shift is what dynamic batching moved the AUC by.",
]


def max_steal(rec) -> float | None:
    """The steal share over which the job set a run aside: its `serve.max_steal`; a record from before the
    key was judged with the module constant."""
    return ((rec.config or {}).get("serve") or {}).get("max_steal", MAX_STEAL)



def _bracket(row) -> str:
    lo, hi = row.max_qps_lo, row.max_qps_hi
    return f"[{fmt.DASH if fmt.missing(lo) else f'{lo:g}'}, {fmt.DASH if fmt.missing(hi) else f'{hi:g}'}]"


def _ratio(x: float) -> str:
    return fmt.DASH if fmt.missing(x) else f"{x:.2f}x"


def _vs_fp32(row) -> str:
    """The ratio to fp32, or "not enough runs" where a paired job's cap came before the ratio's evidence."""
    return NOT_ENOUGH if _short(row) else _ratio(row.qps_ratio)


def _short(row) -> bool:
    return isinstance(getattr(row, "ratio_evidence", None), str)


def _where(row) -> str:
    return f"{row.workload} on {row.device}, batcher {row.batch_size} rows / {row.max_wait_ms:g} ms / {row.workers} worker(s)"


def _interval(row) -> str:
    low, high = row.qps_ratio_lo, row.qps_ratio_hi
    return f"[{fmt.DASH if fmt.missing(low) else f'{low:.2f}'}, {fmt.DASH if fmt.missing(high) else f'{high:.2f}'}]"


def _spread_lines(paired: pd.DataFrame) -> list[str]:
    """The run-to-run spread the intervals carry, once per value ('- the intervals carry a run-to-run spread of 0.18
    (SD of the log ratio), from serve.rerun_spread (3 degrees of freedom) and 6 re-runs of 6 jobs on this machine:
    int8_tbe, uint4'); records before it say nothing."""
    spreads: dict[tuple[float, str], list[str]] = {}
    for r in paired.itertuples(index=False):
        source = getattr(r, "rerun_spread_from", None)
        if isinstance(source, str) and not fmt.missing(r.rerun_spread):
            spreads.setdefault((r.rerun_spread, source), []).append(r.backend)
    return [f"- the intervals carry a run-to-run spread of {sd:.3g} (SD of the log ratio), from {source}: {', '.join(backends)}"
            for (sd, source), backends in spreads.items()]


def _paired_lines(server: pd.DataFrame) -> list[str]:
    """The Server jobs searched beside fp32: each one's max QPS over the fp32 max QPS found in the same minutes."""
    paired = server[server["ratio_method"] == PAIRED]
    if paired.empty:
        return []
    table = [[r.backend, f"{fmt.DASH} ({r.paired_no_load})" if isinstance(r.paired_no_load, str) else _vs_fp32(r),
              fmt.DASH if _short(r) else _interval(r), f"{r.max_qps:g} {_bracket(r)}",
              f"{r.fp32_max_qps_paired:g} {r.fp32_bracket_paired}", r.evidence or fmt.DASH, r.fp32_evidence_paired or fmt.DASH,
              _read(r), _fitted(r),
              _tracked(r), fmt.DASH if fmt.missing(r.paired_joint_rounds) else f"{r.paired_joint_rounds:g}",
              r.paired_side_runs or fmt.DASH, r.paired_reversals or fmt.DASH]
             for r in paired.itertuples(index=False)]
    short = [f"- {r.backend}: {r.ratio_evidence}" + (" — the host's doing: `resume=true` measures this job again"
                                                      if isinstance(getattr(r, "measure_again", None), str) else "")
             for r in paired.itertuples(index=False) if _short(r)]
    short += [f"- {r.backend}: {r.still_walking}" for r in paired.itertuples(index=False) if isinstance(getattr(r, "still_walking", None), str)]
    short += _spread_lines(paired)
    return ["### Relative to fp32, paired", "",
            "Each backend's search ran interleaved with an fp32 search, run by run in ABBA order in the job's process: "
            "then both tracked their limits in the same rounds until the ratio had its evidence; the ratio is read as the column "
            "read says (logistic: the fitted limits' ratio; levels: the tracked loads' over the joint rounds after both first "
            "reversals), its interval where a re-run's should fall (the brackets' beside it); fitted: each side's fitted limit "
            "(with the levels' ratio beside it); tracked: each side's tracked level; runs and reversals: backend / fp32.", "",
            fmt.table([C("backend"), C("max QPS / fp32's", align="r"), C("interval (a re-run)", align="r"),
                       C("max QPS [bracket]", align="r"), C("fp32 beside it [bracket]", align="r"), C("evidence"),
                       C("fp32 evidence"), C("read"), C("fitted (levels' ratio)", align="r"), C("tracked", align="r"),
                       C("joint rounds", align="r"), C("runs", align="r"),
                       C("reversals", align="r")], table), "",
            *short, *([""] if short else []), *_made_of_lines(paired)]


def _made_of_lines(paired: pd.DataFrame) -> list[str]:
    """What each paired ratio is made of (bench.results.serving_table.made_of): where a ratio moved between two sweeps,
    these say whether the batch times moved or the load each side carried under the bound."""
    rows = [[r.backend, _vs_fp32(r), _ratio(r.service_ratio), fmt.DASH if fmt.missing(r.busy_at_limit) else f"{r.busy_at_limit:.2f}",
             fmt.DASH if fmt.missing(r.fp32_busy_at_limit_paired) else f"{r.fp32_busy_at_limit_paired:.2f}"]
            for r in paired.itertuples(index=False) if not fmt.missing(r.service_ratio)]
    if not rows:
        return []
    return ["What each ratio is made of, from the tracking runs: fp32's median batch time over the backend's, and each "
            "side's busy share at its limit (batches per second x batch time, median over its VALID runs). The max QPS "
            "ratio is about the first times the backend's busy share over fp32's.", "",
            fmt.table([C("backend"), C("max QPS / fp32's", align="r"), C("fp32's batch time / the backend's", align="r"),
                       C("busy at the limit", align="r"), C("fp32 busy beside it", align="r")], rows), ""]


def _read(row) -> str:
    """How the ratio was read: the record's serve.ratio_fit; a tracked record from before the key, levels; an untracked one, brackets."""
    fit = getattr(row, "ratio_fit", None)
    if isinstance(fit, str):
        return fit
    return "brackets" if fmt.missing(row.paired_joint_rounds) or not row.paired_joint_rounds else LEVELS


def _fitted(row) -> str:
    """'410 / 108 (3.62x)': each side's fitted limit, and the levels' ratio from the same runs; — for a levels record."""
    values = [getattr(row, "fitted_qps", None), getattr(row, "fp32_fitted_qps_paired", None)]
    if all(fmt.missing(v) for v in values):
        return fmt.DASH
    levels = getattr(row, "levels_ratio", None)
    beside = "" if fmt.missing(levels) else f" ({levels:.2f}x)"
    return " / ".join(fmt.DASH if fmt.missing(v) else f"{v:.4g}" for v in values) + beside


def _tracked(row) -> str:
    """'412 / 380': each side's tracked level."""
    values = [getattr(row, "tracked_qps", None), getattr(row, "fp32_tracked_qps_paired", None)]
    return fmt.DASH if all(fmt.missing(v) for v in values) else " / ".join(fmt.DASH if fmt.missing(v) else f"{v:.4g}" for v in values)


def console_lines(records: Iterable[RunRecord | dict[str, Any]], df: pd.DataFrame | None = None) -> list[str]:
    """What a serving sweep prints after its jobs: per backend and scenario, max QPS at the bound with its
    bracket (Server) or samples/s (Offline), and the ratio to fp32's. `df`: the records' serving table, built."""
    df = serve_table(records) if df is None else df
    out = []
    for row in df[df["status"] == "ok"].itertuples(index=False):
        ratio = "" if fmt.missing(row.qps_ratio) else f", {row.qps_ratio:.2f}x {BASELINE}'s"
        if _short(row):
            ratio = f", vs {BASELINE}: {row.ratio_evidence}"
        elif row.ratio_method == PAIRED:
            ratio += f" searched beside it {_interval(row)}"
        if row.scenario == "server":
            evidence = f" ({row.evidence})" if isinstance(row.evidence, str) and row.evidence else ""
            out.append(f"  {row.backend} server (p99 bound {row.bound_ms:g} ms): max QPS {row.max_qps:g} {_bracket(row)}{evidence}{ratio}")
        else:
            out.append(f"  {row.backend} offline: {fmt.count(row.samples_per_s)} samples/s{ratio}")
    return out


def render_serve(df: pd.DataFrame, latest: dict[tuple, RunRecord], plots: list[Path], out_dir: Path, title: str) -> str:
    lines = [f"# {title}: serving through MLPerf LoadGen", "", "How to read this:", "", *[f"- {n}" for n in NOTES], ""]
    ok = df[df["status"] == "ok"]
    server, offline = ok[ok["scenario"] == "server"], ok[ok["scenario"] == "offline"]
    if not server.empty:
        lines += ["## Server: max QPS under the p99 bound", ""]
        for (where, bound), g in server.groupby([server.apply(_where, axis=1), "bound_ms"], sort=False):
            lines += [f"{where}; p99 bound {bound:g} ms:", ""]
            table = [[r.backend, f"{r.max_qps:g}", _bracket(r), r.evidence or fmt.DASH, fmt.count(r.pairs_per_s), fmt.ms(r.latency_p50_ms),
                      fmt.ms(r.latency_p99_ms), _vs_fp32(r), fmt.DASH if fmt.missing(r.queue_qps) else f"{r.queue_qps:.3g}", _ratio(r.queue_ratio),
                      _ratio(r.offline_ratio), r.validity or fmt.DASH] for r in g.itertuples(index=False)]
            lines += [fmt.table([C("backend"), C("max QPS", align="r"), C("bracket [VALID, INVALID]"),
                                 C("evidence (runs agreeing)"), C("pairs/s", align="r"), C("p50 ms", align="r"),
                                 C("p99 ms", align="r"), C("vs fp32", align="r"), C("queue estimate QPS", align="r"),
                                 C("vs queue", align="r"), C("vs Offline", align="r"),
                                 C("targets (QPS: verdict, runs agreeing)")], table), ""]
            for r in g.itertuples(index=False):
                if r.max_qps == 0 or r.monotonic is False:
                    lines.append(f"- {r.backend}: {r.search_stop}")
                if not fmt.missing(r.queue_ratio) and r.queue_ratio < FAR_BELOW:
                    lines.append(f"- **{r.backend}: {r.max_qps:g} QPS is {r.queue_ratio:.2f}x what a queue with its measured service "
                                 f"times holds ({r.queue_qps:g} QPS)**: {_why_below(latest_by_id(latest)[r.record_id])}")
            lines.append("")
        lines += _paired_lines(server)
        lines += ["### Every step", ""]
        steps, by_id = [], {rec.record_id: rec for rec in latest.values()}
        for r in server.itertuples(index=False):
            rec = by_id[r.record_id]
            for i, s in enumerate(rec.metrics.get("steps") or [], 1):
                lat = s.get(LATENCY_MS) or {}
                machine = s.get("machine") or {}
                steal, pace, cause = machine.get("steal_share"), machine.get("pace"), aside_cause(s, max_steal(rec))
                steps.append([r.backend, i, f"{s.get('target_qps'):g}", (s.get("draw") or 0) + 1, s.get("validity"),
                              fmt.number(s.get(SAMPLES_PER_S), 1), fmt.ms(lat.get("p50")), fmt.ms(lat.get("p99")),
                              s.get("queries"), s.get("overlatency_queries"),
                              fmt.DASH if steal is None else f"{steal:.1%}" + (" (set aside)" if cause == "steal" else ""),
                              fmt.DASH if pace is None else f"{pace:.2f}x" + (" (set aside)" if cause == "slow host" else ""),
                              _why_late(s)])
        lines += [fmt.table([C("backend"), C("step", align="r"), C("target QPS", align="r"), C("run", align="r"), C("LoadGen"),
                             C("samples/s", align="r"), C("p50 ms", align="r"), C("p99 ms", align="r"), C("queries", align="r"),
                             C("over bound", align="r"), C("steal", align="r"), C("pace", align="r"), C("why late (the SUT's clock)")], steps), ""]
    if not offline.empty:
        lines += ["## Offline: every query at once", ""]
        table = [[r.backend, fmt.number(r.samples_per_s, 1), fmt.count(r.pairs_per_s), _ratio(r.qps_ratio),
                  r.validity or fmt.DASH] for r in offline.itertuples(index=False)]
        lines += [fmt.table([C("backend"), C("samples/s", align="r"), C("pairs/s", align="r"), C("vs fp32", align="r"),
                             C("LoadGen (target: verdict)")], table), ""]
    checked = ok[ok["auc_check"].notna()]
    if not checked.empty:
        lines += ["## Accuracy mode", ""]
        table = [[r.backend, r.scenario, f"{r.auc_loadgen:.6f}", f"{r.auc_offline:.6f}", f"{r.auc_shift:+.2e}".replace("-", fmt.MINUS),
                  f"{r.auc_tolerance:g}", "yes" if r.batch_dependent else "no", r.auc_check, fmt.number(r.ne_loadgen, 4),
                  fmt.number(r.accuracy_loadgen, 4), fmt.number(r.gauc_loadgen, 4)] for r in checked.itertuples(index=False)]
        lines += [fmt.table([C("backend"), C("scenario"), C("AUC (LoadGen)", align="r"), C("AUC (offline)", align="r"),
                             C("shift", align="r"), C("tolerance", align="r"), C("batch-dependent"), C("check"),
                             C("NE (LoadGen)", align="r"), C("accuracy (LoadGen)", align="r"),
                             C("grouped AUC (LoadGen)", align="r")], table), ""]
    for p in plots:
        lines += [f"![{p.stem}]({Path(p).relative_to(out_dir).as_posix()})", ""]
    lines += _machine_lines(ok)
    lines += _run_lines(ok)
    bad = df[df["status"] != "ok"]
    lines += ["## Errors and skips", ""]
    if bad.empty:
        lines += ["None: every serving job finished.", ""]
    for r in bad.itertuples(index=False):
        lines.append(f"- {r.backend} / {r.scenario} / {r.workload} / {r.device}: **{r.status}**: {fmt.first_line(r.error) or 'no reason recorded'}")
    return "\n".join(lines).rstrip() + "\n"


FAR_BELOW = 0.5  # a Server max QPS under this share of the queue estimate is flagged


def latest_by_id(latest: dict[tuple, RunRecord]) -> dict[str, RunRecord]:
    return {rec.record_id: rec for rec in latest.values()}


def _why_late(step: dict[str, Any]) -> str:
    late = step.get("late") or {}
    if not step.get("overlatency_queries") and not late.get("over_bound"):  # INVALID for another reason: LoadGen's own
        return fmt.DASH if step.get("validity") == "VALID" else fmt.first_line(step.get("invalid_reason") or step.get("early_stopping"), 120)
    return late.get("explanation") or fmt.first_line(step.get("early_stopping"), 120)


def _why_below(rec: RunRecord) -> str:
    """What the runs at the lowest INVALID target said about their late queries, else why the search stopped."""
    m = rec.metrics or {}
    at = [s for s in m.get("steps") or [] if s.get("target_qps") == m.get(hi(MAX_QPS)) and s.get("validity") != "VALID"]
    said = [f"at {s['target_qps']:g} QPS, {s['late']['explanation']}" for s in at if (s.get("late") or {}).get("explanation")]
    return "; ".join(said) or m.get("search_stop") or "no run says why"


MACHINE_MOVED = 0.15  # a reference kernel's time spread over the jobs beyond this share is flagged


def _machine_lines(ok: pd.DataFrame) -> list[str]:
    """The machine's load, steal and reference-kernel times per job; flags when its speed moved between jobs or it was busy."""
    have = ok[ok["ref_gemm_us_start"].notna()]
    if have.empty:
        return []
    table = [[r.backend, r.scenario, f"{r.load_start:.2f} → {r.load_end:.2f}", fmt.DASH if fmt.missing(r.steal_share) else f"{r.steal_share:.1%}",
              f"{r.ref_gemm_us_start:,.0f} → {r.ref_gemm_us_end:,.0f}", f"{r.ref_gather_us_start:,.0f} → {r.ref_gather_us_end:,.0f}"]
             for r in have.itertuples(index=False)]
    lines = ["## The machine during the jobs", "",
             "The same two kernels timed at each job's start and end, on one thread (a fixed fp32 GEMM, and a gather of "
             "random rows from a table larger than the caches): they move only when the machine does. Load is the "
             "1-minute load average at the job's start and end; steal, the share of CPU time the hypervisor took over the job.", "",
             fmt.table([C("backend"), C("scenario"), C("load", align="r"), C("steal", align="r"),
                        C("reference GEMM µs", align="r"), C("reference gather µs", align="r")], table), ""]
    for name, cols in (("GEMM", ("ref_gemm_us_start", "ref_gemm_us_end")), ("gather", ("ref_gather_us_start", "ref_gather_us_end"))):
        times = pd.concat([have[c] for c in cols]).dropna()
        low, high = times.min(), times.max()
        if low > 0 and high / low - 1 > MACHINE_MOVED:
            lines.append(f"- **The machine's speed moved during the sweep**: the reference {name} took {low:,.0f} to {high:,.0f} µs "
                         f"({high / low - 1:.0%} apart): figures of different jobs, and of other runs, differ by the machine as well as the backend.")
    busy = have[(have[["load_start", "load_end"]].max(axis=1) > have["cpus"]) | (have["steal_share"] > MAX_STEAL)]
    if not busy.empty:
        lines.append(f"- **A busy machine**: {', '.join(f'{r.backend} ({r.scenario})' for r in busy.itertuples(index=False))} ran with "
                     f"more runnable work than cores or over {MAX_STEAL:.0%} steal; their figures follow the neighbours' load.")
    return lines + ([""] if lines[-1] else [])


def _run_lines(ok: pd.DataFrame) -> list[str]:
    if ok.empty:
        return []
    durations = sorted({f"{x:g}" for x in ok["min_duration_s"].dropna()})
    counts = sorted({f"{x:g}" for x in ok["min_query_count"].dropna()}) or ["mlperf.conf's"]
    threads = sorted({f"{x:g}" for x in ok["threads"].dropna()}) or ["torch's default"]  # the threads the jobs set
    versions = sorted({str(v) for v in ok["loadgen_version"].dropna()})
    compliant = all(float(d) >= 600 for d in durations)
    used = sorted({t for t in ok["threads_used"].dropna()})
    tells = sorted({t for t in ok["step_tells"].dropna()})
    extra = ([f"Threads (Server): {'; '.join(used)}.", ""] if used else []) + (
        [f"What one Server run can tell: {'; '.join(tells)}.", ""] if tells else [])
    return ["## Run settings", "", *extra,
            f"LoadGen {', '.join(versions)}; each run lasted at least {', '.join(durations)} s and "
            f"{', '.join(counts)} queries (Offline: samples); {', '.join(threads)} torch thread(s). "
            + ("MLPerf's minimum duration (600 s) was met." if compliant else
               "Shorter than MLPerf's 600 s minimum: not a compliant result."), ""]


# ---------------------------------------------------------------------------------------------- plot


def latency_plot(latest: dict[tuple, RunRecord], key: tuple, path: Path) -> Path | None:
    """p50/p90/p99 latency against target QPS over one Server search; VALID filled, INVALID hollow; the bound dashed."""
    rec = latest[key]
    steps = sorted(rec.metrics.get("steps") or [], key=lambda s: s.get("target_qps") or 0)
    if rec.status != "ok" or not steps:
        return None
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    qps = [s["target_qps"] for s in steps]
    for q, style in (("p50", ":"), ("p90", "--"), ("p99", "-")):
        values = [(s.get(LATENCY_MS) or {}).get(q) for s in steps]
        line = ax.plot(qps, values, style, label=q)[0]
        for x, y, s in zip(qps, values, steps):
            valid = s.get("validity") == "VALID"
            ax.plot([x], [y], "o", color=line.get_color(), markerfacecolor=line.get_color() if valid else "none")
    at = dict(zip(SERVE_KEY, key))
    bound = at["bound_ms"]
    if bound is not None:
        ax.axhline(bound, color="red", linewidth=1, linestyle="--", label=f"bound {bound:g} ms")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if str(v)[0] in "25" else ""))
    ax.set_xlabel("target QPS (LoadGen Server scenario)")
    ax.set_ylabel("latency (ms, log)")
    ax.set_title(f"{at['backend']} on {at['workload']}/{at['device']}: filled = VALID, hollow = INVALID", fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def write_serve_report(records: Iterable[RunRecord | dict[str, Any]], out_dir: Path, title: str,
                       df: pd.DataFrame | None = None) -> Path | None:
    """serve.md, serve.csv and the plots into out_dir; None (nothing written) when no record is a serving job.
    `df`: the records' serving table, built."""
    records = as_records(records)
    latest = latest_serving(records)
    if not latest:
        return None
    out_dir = Path(out_dir)
    df = serve_table(records) if df is None else df
    plots = []
    for key in latest:
        at = dict(zip(SERVE_KEY, key))
        if at["scenario"] == "server":
            name = "serve_latency_" + "_".join(str(at[k]) for k in ("backend", "workload", "device", "batch_size") if at[k] is not None)
            p = latency_plot(latest, key, out_dir / f"{''.join(c if c.isalnum() or c in '._-' else '-' for c in name)}.png")
            if p is not None:
                plots.append(p)
    write_text_atomic(out_dir / "serve.csv", df.to_csv(index=False))
    path = out_dir / "serve.md"
    write_text_atomic(path, render_serve(df, latest, plots, out_dir, title))
    return path
