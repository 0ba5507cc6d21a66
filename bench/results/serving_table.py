"""The serving table (`+sweep=serve`): one row per serving job, the newest record winning for each
`SERVE_KEY` (bench.results.key: the results key's axes, threads among them, and scenario, bound, batcher).

Every figure is read from the record, which holds what LoadGen's logs said: the Server scenario's
bracket (highest VALID and lowest INVALID target QPS) with each step's verdict and percentiles, the
Offline scenario's samples/s, and the accuracy-mode AUC against the offline AUC. Ratios are against
the fp32 row with the same scenario, bound and batcher. The gate judges this table; the serving
report (`bench.report.serve`) renders it.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

from bench.metrics import LATENCY_MS, MAX_QPS, MEASURE_AGAIN, PAIRS_PER_S, SAMPLES_PER_S, hi, lo
from bench.record import RunRecord, is_serving
from bench.results.key import BASELINE, SERVE_KEY, backend_rank, in_context, serve_key_of
from bench.results.table import as_records, created
from bench.serve.pace import service_ms

COLUMNS = [
    *SERVE_KEY, "status", MAX_QPS, lo(MAX_QPS), hi(MAX_QPS), "monotonic", "search_stop", "steps", "validity",
    "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", SAMPLES_PER_S, PAIRS_PER_S, "qps_ratio",
    "service_p99_ms", "pairs_mean", "auc_loadgen", "auc_offline", "auc_shift", "auc_tolerance", "auc_check",
    "ne_loadgen", "accuracy_loadgen", "gauc_loadgen", "response_layout", "batch_dependent", "min_duration_s", "min_query_count", "loadgen_version", "evidence", "queue_qps",
    "queue_ratio", "offline_ratio", "step_queries", "step_tells", "threads_used", "load_start", "load_end", "steal_share", "cpus",
    "ref_gemm_us_start", "ref_gemm_us_end", "ref_gather_us_start", "ref_gather_us_end", "error", "config_hash",
    "fingerprint", "created_at", "record_id",
    # Server jobs paired with fp32 (serve.paired): qps_ratio is then the paired ratio from both sides' tracking
    # (bench.serve.paired), qps_ratio_lo/hi where a re-run's ratio should fall, the brackets' interval beside it
    "ratio_method", "qps_ratio_lo", "qps_ratio_hi", "qps_ratio_bracket_lo", "qps_ratio_bracket_hi", "fp32_max_qps_paired",
    "fp32_bracket_paired", "fp32_evidence_paired", "tracked_qps", "fp32_tracked_qps_paired", "paired_track", "paired_joint_rounds",
    "paired_runs", "paired_no_load",
    # how the ratio was read (serve.ratio_fit: logistic or levels; empty in records before it: levels), each side's
    # fitted limit, and the levels' ratio beside a fitted one
    "ratio_fit", "fitted_qps", "fp32_fitted_qps_paired", "levels_ratio",
    # the evidence behind the paired ratio: each side's runs and staircase reversals ("backend / fp32"), and
    # "not enough runs: ..." where the cap came before it (qps_ratio then empty)
    "paired_side_runs", "paired_reversals", "ratio_evidence",
    # where a side's level ended six or more steps one way in a row: its limit still moving when tracking stopped
    "still_walking",
    # the run-to-run spread (SD of the log ratio) the interval carries and where it came from: serve.rerun_spread alone
    # (records before it: rerun_spread_from empty), or weighed with this machine's re-runs of paired Server jobs
    "rerun_spread", "rerun_spread_from",
    # why the host withheld the answer (a resumed sweep measures the job again), and the record measured again after
    "measure_again", "measured_again_after",
    # what the paired ratio is made of (`made_of`): fp32's batch time over the backend's, and each side's busy share at
    # its VALID tracking loads; the ratio is about the first times the backend's busy share over fp32's
    "service_ratio", "busy_at_limit", "fp32_busy_at_limit_paired",
]
PAIRED, UNPAIRED = "paired", "separate jobs"
OPEN = "\u2014"  # an open end of a bracket


def serving_records(records: Iterable[RunRecord | dict[str, Any]]) -> list[RunRecord]:
    return [r for r in as_records(records) if is_serving(r)]


def latest_serving(records: Iterable[RunRecord | dict[str, Any]]) -> dict[tuple, RunRecord]:
    latest: dict[tuple, RunRecord] = {}
    served = serving_records(records)
    for r, k in zip(served, in_context([serve_key_of(r) for r in served], SERVE_KEY)):
        if k not in latest or created(r) >= created(latest[k]):
            latest[k] = r
    return latest


def _num(x: Any) -> float:
    return math.nan if x is None or isinstance(x, bool) else float(x)


def _row(key: tuple, r: RunRecord) -> dict[str, Any]:
    m, serve = r.metrics or {}, (r.config or {}).get("serve") or {}
    lat = m.get(LATENCY_MS) or {}
    row: dict[str, Any] = dict(zip(SERVE_KEY, key))  # `threads` among them: the torch threads the job set
    server = row["scenario"] == "server"
    row.update(
        status=r.status, error=r.error, config_hash=r.config_hash, created_at=r.created_at, record_id=r.record_id,
        fingerprint=(r.env or {}).get("fingerprint"),
        max_qps=_num(m.get(MAX_QPS)) if server else math.nan,
        max_qps_lo=_num(m.get(lo(MAX_QPS))), max_qps_hi=_num(m.get(hi(MAX_QPS))),
        monotonic=m.get("monotonic"), search_stop=m.get("search_stop"),
        steps=len(m.get("steps") or []) or math.nan,
        validity=_validity(m),
        latency_p50_ms=_num(lat.get("p50")) if server else math.nan,
        latency_p90_ms=_num(lat.get("p90")) if server else math.nan,
        latency_p99_ms=_num(lat.get("p99")) if server else math.nan,
        samples_per_s=_num(m.get(SAMPLES_PER_S) if server else m.get("offline_samples_per_s")),
        pairs_per_s=_num(_at_max(m).get(PAIRS_PER_S) if server else m.get("offline_pairs_per_s")),
        service_p99_ms=_num(m.get("service_p99_ms")),
        pairs_mean=_num((m.get("query_set") or {}).get("pairs_mean")),
        auc_loadgen=_num(m.get("auc_loadgen")), auc_offline=_num(m.get("auc_offline")), auc_shift=_num(m.get("auc_shift")),
        auc_tolerance=_num(m.get("auc_tolerance")), auc_check=m.get("auc_check"), batch_dependent=m.get("batch_dependent"),
        ne_loadgen=_num(m.get("ne_loadgen")), accuracy_loadgen=_num(m.get("accuracy_loadgen")), gauc_loadgen=_num(m.get("gauc_loadgen")),
        response_layout=(m.get("query_set") or {}).get("response_layout"),
        min_duration_s=_num(serve.get("min_duration_s")), min_query_count=_num(serve.get("min_query_count")),
        loadgen_version=m.get("loadgen_version"),
        evidence=m.get("evidence"), queue_qps=_num((m.get("queue_estimate") or {}).get("qps")),
        step_queries=_num(m.get("step_queries")), step_tells=m.get("step_tells"), threads_used=_threads(m.get("threads_used")),
    )
    row["queue_ratio"] = row["max_qps"] / row["queue_qps"] if server and row["queue_qps"] and row["queue_qps"] > 0 else math.nan
    row.update(_paired(m) if server else {})
    machine = m.get("machine") or {}
    row.update(load_start=_num(machine.get("load_start")), load_end=_num(machine.get("load_end")), steal_share=_num(machine.get("steal_share")),
               cpus=_num(machine.get("cpus")))
    for end in ("start", "end"):  # the reference kernels' wall times (bench.measure.noise.reference_speed)
        ref = machine.get(f"reference_{end}") or {}
        row[f"ref_gemm_us_{end}"], row[f"ref_gather_us_{end}"] = _num(ref.get("gemm_wall_us")), _num(ref.get("gather_wall_us"))
    return row


def _paired(m: dict[str, Any]) -> dict[str, Any]:
    """A paired Server job's ratio to the fp32 search run beside it, and that search's bracket and evidence."""
    p = m.get("paired")
    if not p:
        return {"ratio_method": UNPAIRED}
    ref = p.get("reference") or {}
    low, high = ref.get(lo(MAX_QPS)), ref.get(hi(MAX_QPS))
    track = "; ".join(f"{side}: {p[f'track_{side}']}" for side in ("candidate", "reference") if p.get(f"track_{side}"))
    return {"ratio_method": PAIRED, "paired_ratio": _num(p.get("qps_ratio")), "qps_ratio_lo": _num(p.get("qps_ratio_lo")),
            "qps_ratio_hi": _num(p.get("qps_ratio_hi")), "fp32_max_qps_paired": _num(p.get("reference_max_qps")),
            "fp32_bracket_paired": f"[{OPEN if low is None else f'{low:g}'}, {OPEN if high is None else f'{high:g}'}]",
            "qps_ratio_bracket_lo": _num(p.get("qps_ratio_bracket_lo")), "qps_ratio_bracket_hi": _num(p.get("qps_ratio_bracket_hi")),
            "fp32_evidence_paired": ref.get("evidence"), "tracked_qps": _num(p.get("tracked_qps")),
            "fp32_tracked_qps_paired": _num(p.get("reference_tracked_qps")), "paired_track": track or None,
            "paired_joint_rounds": _num(p.get("joint_rounds")),
            "ratio_fit": p.get("ratio_fit"), "fitted_qps": _num((p.get("fitted_qps") or {}).get("candidate")),
            "fp32_fitted_qps_paired": _num((p.get("fitted_qps") or {}).get("reference")), "levels_ratio": _num(p.get("qps_ratio_levels")),
            "paired_runs": len(p.get("runs") or []) or math.nan, "paired_no_load": p.get("no_load"),
            "paired_side_runs": _per_side(p.get("side_runs")), "paired_reversals": _per_side(p.get("reversals")),
            "ratio_evidence": p.get("not_enough_runs"), "still_walking": p.get("still_walking"), "measure_again": m.get(MEASURE_AGAIN),
            "rerun_spread": _num(p.get("rerun_spread")), "rerun_spread_from": p.get("rerun_spread_from"),
            "measured_again_after": m.get("measured_again_after"), **made_of(p.get("track_steps") or {})}


def made_of(track_steps: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """What a paired ratio is made of, from both sides' tracking runs: `service_ratio`, fp32's median batch time over
    the backend's (the SUT's clock: how much faster the backend serves a batch), and each side's busy share at its
    limit, the median over its VALID runs of batches per second x the batch time (how close to saturation the p99 bound
    let that side run). The max QPS ratio is about service_ratio x busy_at_limit / fp32_busy_at_limit_paired, so a
    ratio that moved between runs says which moved: the batch times or the load each side could carry under the bound
    (the side with fewer batch times within the bound loses more of its load to a host's jitter)."""
    def busy(step: dict[str, Any]) -> float | None:
        per_batch, ms = (step.get("batching") or {}).get("samples_per_batch"), service_ms(step)
        return step["target_qps"] / per_batch * ms / 1000 if per_batch and ms and step.get("target_qps") else None

    def median(values: Iterable[float | None]) -> float:
        kept = [v for v in values if v is not None]
        return float(np.median(kept)) if kept else math.nan

    sides = {side: track_steps.get(side) or [] for side in ("candidate", "reference")}
    svc = {side: median(service_ms(s) for s in steps) for side, steps in sides.items()}
    load = {side: median(busy(s) for s in steps if s.get("validity") == "VALID") for side, steps in sides.items()}
    return {"service_ratio": svc["reference"] / svc["candidate"] if svc["candidate"] > 0 else math.nan,
            "busy_at_limit": load["candidate"], "fp32_busy_at_limit_paired": load["reference"]}


def _per_side(counts: dict[str, int] | None) -> str | None:
    """'15 / 14': the backend's count, then fp32's (a side that did not track: —)."""
    if not counts:
        return None
    return " / ".join(OPEN if counts.get(side) is None else str(counts[side]) for side in ("candidate", "reference"))


def _validity(m: dict[str, Any]) -> str | None:
    """Each target's verdict: with its runs where the target was judged ('410:VALID 3/3'), else each run's."""
    if m.get("judgments"):  # a verdict that paired confirmation runs overturned (records made with them) reads with its evidence
        return " ".join(f"{j['target_qps']:g}:{j['verdict']} ({j['evidence']})" if j.get("overturned") else
                        f"{j['target_qps']:g}:{j['verdict']} {j['valid_runs'] if j['verdict'] == 'VALID' else j['runs'] - j['valid_runs']}/{j['runs']}"
                        for j in m["judgments"])
    return " ".join(f"{s.get('target_qps'):g}:{s.get('validity')}" for s in m.get("steps") or []) or None


def _threads(t: dict[str, Any] | None) -> str | None:
    """'1 worker x 1 torch thread + 1 LoadGen issue thread on 2 cores: no core shared'."""
    if not t:
        return None
    shared = "they share a core" if t["share_a_core"] else "one core each at most"
    return (f"{t['workers']} worker(s) x {t['torch_threads_per_worker']} torch thread(s) + {t['loadgen_issue_threads']} "
            f"LoadGen issue thread(s) on {t['cores']} cores: {shared}")  # the process's CPU per second stays in the record


def _at_max(m: dict[str, Any]) -> dict[str, Any]:
    """The step at the highest VALID target (none: {})."""
    best = m.get(lo(MAX_QPS))
    return ([s for s in m.get("steps") or [] if s.get("validity") == "VALID" and s.get("target_qps") == best] or [{}])[-1]


def serve_table(records: Iterable[RunRecord | dict[str, Any]]) -> pd.DataFrame:
    """One row per serving job (newest per key), fp32 first, with the ratio to fp32's max QPS (Server) or samples/s (Offline)."""
    latest = latest_serving(records)
    if not latest:
        return pd.DataFrame(columns=COLUMNS)
    rows = [_row(k, r) for k, r in latest.items()]
    by_key = {tuple(row[c] for c in SERVE_KEY): row for row in rows}
    for row in rows:
        if row["scenario"] == "server":  # Server max QPS against the same backend's Offline samples/s
            off = by_key.get(tuple("offline" if c == "scenario" else None if c == "bound_ms" else row[c] for c in SERVE_KEY))
            good = off is not None and off["status"] == "ok" and row["status"] == "ok" and off[SAMPLES_PER_S] > 0
            row["offline_ratio"] = row[MAX_QPS] / off[SAMPLES_PER_S] if good else math.nan
        else:
            row["offline_ratio"] = math.nan
        base = by_key.get(tuple(BASELINE if c == "backend" else row[c] for c in SERVE_KEY))
        measure = MAX_QPS if row["scenario"] == "server" else SAMPLES_PER_S
        ok = base is not None and base["status"] == "ok" and row["status"] == "ok" and base[measure] > 0
        row["qps_ratio"] = row[measure] / base[measure] if ok else math.nan
        if row.get("ratio_method") == PAIRED:  # against the fp32 search run beside it, not fp32's own job
            row["qps_ratio"] = row.pop("paired_ratio")
        elif row["scenario"] == "server" and row["backend"] == BASELINE and row["status"] == "ok":
            row["ratio_method"] = "reference"
    df = pd.DataFrame(rows)
    df["_rank"] = df["backend"].map(backend_rank)
    df["_scenario"] = df["scenario"].map(lambda s: 0 if s == "server" else 1)
    df = df.sort_values(["workload", "device", "_scenario", "_rank"], kind="mergesort").drop(columns=["_rank", "_scenario"])
    return df.reset_index(drop=True).reindex(columns=COLUMNS)


# ---------------------------------------------------------------------------------------------- markdown
