"""The lines `python -m bench` prints for a serving job's record."""

from __future__ import annotations

from bench.record import RunRecord


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
