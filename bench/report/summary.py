"""A record as the lines `python -m bench` prints after a job: what it measured, in a few lines."""

from __future__ import annotations

from bench.metrics import (
    AUC,
    AUC_DELTA,
    EMBEDDING_BYTES,
    LATENCY_CALLS,
    LATENCY_MS,
    LATENCY_P99_CALLS,
    LOGLOSS,
    MAX_QPS,
    MODEL_BYTES,
    NE,
    N_EVAL,
    ORACLE_AUC,
    POPULARITY_AUC,
    PAIRS_PER_S,
    PEAK_RSS_BYTES,
    PREPARE_SECONDS,
    SAMPLES_PER_S,
    SPEEDUP,
    SPEEDUP_PROCESS_SD,
    THREADS,
    THROUGHPUT,
    hi,
    lo,
)
from bench.record import RunRecord, is_serving
from bench.results.readable import UNREADABLE_SPAN, too_short, unreadable
from bench.registry import BASELINE_BACKEND
from bench.report.kernels import summary_line as kernel_summary_line


def summary(record: RunRecord) -> str:
    if is_serving(record):
        return serving_summary(record)
    head = f"{record.backend} on {record.workload}, {record.device}, batch {record.batch_size}: {record.status}"
    if record.status != "ok":
        return f"{head} ({record.error})"
    m = record.metrics
    lines = [head]
    if AUC in m:
        auc = f"  AUC {m[AUC]:.4f}"
        if m.get(ORACLE_AUC) is not None:
            auc += f" (oracle {m[ORACLE_AUC]:.4f}, gap {m[ORACLE_AUC] - m[AUC]:.4f})"
        if m.get(POPULARITY_AUC) is not None:
            auc += f" (popularity-only baseline {m[POPULARITY_AUC]:.4f})"
        if record.backend != BASELINE_BACKEND:
            auc += f"; ΔAUC vs {BASELINE_BACKEND} {m[AUC_DELTA]:+.4f} [{m[lo(AUC_DELTA)]:+.4f}, {m[hi(AUC_DELTA)]:+.4f}]"
        lines.append(auc + f"; log loss {m[LOGLOSS]:.4f}, NE {m[NE]:.4f}, {m[N_EVAL]} eval samples")
    else:
        lines.append(f"  {m.get('accuracy', 'no accuracy measured')}")
    lat = m[LATENCY_MS]
    tput = f"{m[THROUGHPUT]:,.0f} samples/s"
    calls = m.get(LATENCY_CALLS)
    if unreadable(m[THROUGHPUT], m.get(lo(THROUGHPUT)), m.get(hi(THROUGHPUT))):
        tput += f", {too_short(calls)}"
    elif m.get(lo(THROUGHPUT)) is not None:
        tput += f" [{m[lo(THROUGHPUT)]:,.0f}, {m[hi(THROUGHPUT)]:,.0f}]"
    tail = f" (slowest {m[LATENCY_P99_CALLS]} of {m[LATENCY_CALLS]} calls)" if m.get(LATENCY_P99_CALLS) is not None else ""
    lines.append(f"  throughput {tput}; latency p50 {lat['p50']:.2f} ms, p90 {lat['p90']:.2f} ms, p99 {lat['p99']:.2f} ms{tail}; "
                 f"{m['threads']} thread{'' if m['threads'] == 1 else 's'}")
    setting = m.get("timing_setting") or {}
    if setting.get("threads") is not None:
        n = setting["threads"]
        lines.append(f"  timed with {n} thread{'' if n == 1 else 's'} on the {setting['clock']} clock: {setting.get('how', '')}")
    if m.get(SPEEDUP) is not None and unreadable(m[SPEEDUP], m.get(lo(SPEEDUP)), m.get(hi(SPEEDUP))):
        lines.append(f"  speedup vs fp32 {too_short(calls)} ({m['speedup_method']}; its interval spans more than {UNREADABLE_SPAN:g}x)")
    elif m.get(SPEEDUP) is not None:
        covers = "rounds and processes" if m.get(SPEEDUP_PROCESS_SD) else "rounds of this process"
        lines.append(f"  speedup vs fp32 {m[SPEEDUP]:.2f}x [{m[lo(SPEEDUP)]:.2f}, {m[hi(SPEEDUP)]:.2f}] "
                     f"({m['speedup_method']}; the interval covers {covers})")
    kernel_note = kernel_summary_line(record)
    if kernel_note:
        lines.append(f"  {kernel_note}")
    if m.get("stable") is False:
        lines.append(f"  absolute throughput unsteady: {m['unstable_reason']} (the paired speedup is judged on its own interval)")
    if m.get("throughput_all_threads"):
        alone = m["throughput_all_threads"]
        lines.append(f"  alone at {alone[THREADS]} thread{'' if alone[THREADS] == 1 else 's'}: {alone[THROUGHPUT]:,.0f} samples/s")
    lines.append(
        f"  embeddings {m[EMBEDDING_BYTES] / 1e6:.2f} MB; model {m[MODEL_BYTES] / 1e6:.2f} MB; peak RSS {m[PEAK_RSS_BYTES] / 1e6:.0f} MB"
        + (f"; built in {m[PREPARE_SECONDS]:.1f} s" if m.get(PREPARE_SECONDS) is not None else "")
    )
    if m.get("ps_twin"):
        from bench.backends.paramserver.module import summary_line

        lines.append(summary_line(m))
    roof = m.get("roofline")
    if roof:
        lines.append(
            f"  embedding traffic {roof['embedding_bytes_per_s'] / 1e9:.2f} GB/s = {100 * roof['embedding_share']:.0f}% of the gather "
            f"roofline; matrix products at {100 * roof['dense_share']:.0f}% of the GEMM roofline"
        )
    return "\n".join(lines)


def serving_summary(record: RunRecord) -> str:
    m = record.metrics or {}
    serve = (record.config or {}).get("serve") or {}
    head = f"{record.backend} served on {record.workload}, {record.device}, {serve.get('scenario')}"
    if serve.get("scenario") == "server":
        head += f" (p99 bound {serve.get('bound_ms'):g} ms)"
    head += f", batcher {record.batch_size} rows: {record.status}"
    if record.status != "ok":
        return f"{head} ({record.error})"
    lines = [head]
    for s in m.get("steps") or []:
        lat = s.get(LATENCY_MS) or {}
        run = f" (run {s['draw'] + 1})" if s.get("draw") else ""
        why = (s.get("late") or {}).get("explanation") if s.get("validity") == "INVALID" else None
        lines.append(f"  {s.get('target_qps'):g} QPS target{run}: {s.get('validity')}; {s.get(SAMPLES_PER_S) or 0:,.1f} samples/s, "
                     f"{s.get(PAIRS_PER_S) or 0:,.0f} pairs/s; p50 {lat.get('p50') or 0:.1f} ms, p99 {lat.get('p99') or 0:.1f} ms"
                     + (f"; {why}" if why else ""))
    if serve.get("scenario") == "server":
        low, high = m.get(lo(MAX_QPS)), m.get(hi(MAX_QPS))
        lines.append(f"  max QPS at the bound {m.get(MAX_QPS):g}, bracket [{'-' if low is None else f'{low:g}'}, "
                     f"{'-' if high is None else f'{high:g}'}]" + (f", {m['evidence']}" if m.get("evidence") else "")
                     + f" ({m.get('search_stop')})")
        paired = m.get("paired")
        if paired:  # the fp32 search run beside this one, interleaved run by run (bench.serve.paired)
            ref, ratio = paired.get("reference") or {}, paired.get("qps_ratio")
            ends = [("-" if x is None else f"{x:.2f}") for x in (paired.get("qps_ratio_lo"), paired.get("qps_ratio_hi"))]
            lines.append(f"  fp32 searched beside it: max QPS {paired.get('reference_max_qps'):g}" + (f", {ref['evidence']}" if ref.get("evidence") else "")
                         + f"; ratio {'-' if ratio is None else f'{ratio:.2f}x'} [{ends[0]}, {ends[1]}] over {len(paired.get('runs') or [])} "
                         f"interleaved runs" + (f", {paired['joint_rounds']} rounds tracked jointly" if paired.get("joint_rounds") else "")
                         + (f"; {paired['not_enough_runs']}" if paired.get("not_enough_runs") else ""))
    if "auc_loadgen" in m:
        lines.append(f"  accuracy mode: AUC {m['auc_loadgen']:.6f} vs offline {m['auc_offline']:.6f} (shift {m['auc_shift']:+.2e}, "
                     f"allowed {m['auc_tolerance']:g}): {m['auc_check']}"
                     + (f"; NE {m['ne_loadgen']:.4f}, accuracy {m['accuracy_loadgen']:.4f}" if m.get("ne_loadgen") is not None else "")
                     + (f", grouped AUC {m['gauc_loadgen']:.4f}" if m.get("gauc_loadgen") is not None else ""))
    lines.append(f"  LoadGen logs: {m.get('log_root')}")
    return "\n".join(lines)
