"""A record as the lines `python -m bench` prints after a job: what it measured, in a few lines."""

from __future__ import annotations

from bench.record import RunRecord, is_serving
from bench.registry import BASELINE_BACKEND


def summary(record: RunRecord) -> str:
    if is_serving(record):
        return serving_summary(record)
    head = f"{record.backend} on {record.workload}, {record.device}, batch {record.batch_size}: {record.status}"
    if record.status != "ok":
        return f"{head} ({record.error})"
    m = record.metrics
    lines = [head]
    if "auc" in m:
        auc = f"  AUC {m['auc']:.4f}"
        if m.get("oracle_auc") is not None:
            auc += f" (oracle {m['oracle_auc']:.4f}, gap {m['oracle_auc'] - m['auc']:.4f})"
        if record.backend != BASELINE_BACKEND:
            auc += f"; ΔAUC vs {BASELINE_BACKEND} {m['auc_delta']:+.4f} [{m['auc_delta_lo']:+.4f}, {m['auc_delta_hi']:+.4f}]"
        lines.append(auc + f"; log loss {m['logloss']:.4f}, NE {m['ne']:.4f}, {m['n_eval']} eval samples")
    else:
        lines.append(f"  {m.get('accuracy', 'no accuracy measured')}")
    lat = m["latency_ms"]
    lines.append(
        f"  throughput {m['throughput']:,.0f} samples/s; latency p50 {lat['p50']:.2f} ms, p90 {lat['p90']:.2f} ms, p99 {lat['p99']:.2f} ms; {m['threads']} threads"
    )
    if m.get("speedup") is not None:
        lines.append(f"  speedup vs fp32 {m['speedup']:.2f}x [{m['speedup_lo']:.2f}, {m['speedup_hi']:.2f}] ({m['speedup_method']})")
    if m.get("stable") is False:
        lines.append(f"  UNSTABLE timing: {m['unstable_reason']}")
    lines.append(
        f"  embeddings {m['embedding_bytes'] / 1e6:.2f} MB; model {m['model_bytes'] / 1e6:.2f} MB; peak RSS {m['peak_rss_bytes'] / 1e6:.0f} MB"
        + (f"; built in {m['prepare_seconds']:.1f} s" if m.get("prepare_seconds") is not None else "")
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
        lat = s.get("latency_ms") or {}
        lines.append(f"  {s.get('target_qps'):g} QPS target: {s.get('validity')}; {s.get('samples_per_s') or 0:,.1f} samples/s, "
                     f"{s.get('pairs_per_s') or 0:,.0f} pairs/s; p50 {lat.get('p50') or 0:.1f} ms, p99 {lat.get('p99') or 0:.1f} ms")
    if serve.get("scenario") == "server":
        lo, hi = m.get("max_qps_lo"), m.get("max_qps_hi")
        lines.append(f"  max QPS at the bound {m.get('max_qps'):g}, bracket [{'-' if lo is None else f'{lo:g}'}, "
                     f"{'-' if hi is None else f'{hi:g}'}] ({m.get('search_stop')})")
    if "auc_loadgen" in m:
        lines.append(f"  accuracy mode: AUC {m['auc_loadgen']:.6f} vs offline {m['auc_offline']:.6f} (shift {m['auc_shift']:+.2e}, "
                     f"allowed {m['auc_tolerance']:g}): {m['auc_check']}")
    lines.append(f"  LoadGen logs: {m.get('log_root')}")
    return "\n".join(lines)
