"""One LoadGen run, and what LoadGen wrote about it.

Settings start from mlperf.conf's entry for "dlrm-v2" (LoadGen looks settings up by model NAME: its
60 ms Server bound, 600 s runs, 204,800 performance samples, the official seeds); the harness then
sets the scenario, the mode, the target QPS, the bound, the run length and the seeds it was asked
for. Every figure in a step (validity, percentiles, rates, early stopping) is read back from
LoadGen's own detail log (`mlperf_log_detail.txt`, one `:::MLLOG {json}` line per entry), never
recomputed; `mlperf_log_summary.txt` is its human-readable twin and is kept beside it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlperf_loadgen as lg
import numpy as np

from bench.config import ServeConfig
from bench.measure.noise import LoadWatch
from bench.metrics import LATENCY_MS, SAMPLES_PER_S
from bench.serve import timeline
from bench.serve.queries import QuerySet
from bench.serve.sut import ServingSystem

MODEL = "dlrm-v2"  # mlperf.conf's entry
SCENARIOS = {"server": ("Server", lg.TestScenario.Server), "offline": ("Offline", lg.TestScenario.Offline)}
MODES = {"performance": lg.TestMode.PerformanceOnly, "accuracy": lg.TestMode.AccuracyOnly}
DETAIL, SUMMARY, ACCURACY = "mlperf_log_detail.txt", "mlperf_log_summary.txt", "mlperf_log_accuracy.json"
PERCENTILES = {"p50": "50.00", "p90": "90.00", "p95": "95.00", "p97": "97.00", "p99": "99.00", "p99.9": "99.90"}


class LogError(RuntimeError):
    """LoadGen's log is missing or lacks what every run writes."""


def settings(cfg: ServeConfig, mode: str, target_qps: float, n_samples: int, seed: int, draw: int = 0,
             min_queries: int | None = None) -> lg.TestSettings:
    """`draw` numbers the runs at one target: 0 takes the seeds from `seed` alone, each later one fresh
    seeds from (seed, draw); `min_queries` (the step's size) replaces serve.min_query_count."""
    name, scenario = SCENARIOS[cfg.scenario]
    s = lg.TestSettings()
    # conf_type 0: mlperf.conf alone. A user.conf (conf_type 1) counts process-wide, and every run after
    # the first would log "Multiple conf files are used" as an error; the harness's own settings are
    # set below instead, and LoadGen's detail log records each (requested_* and effective_*).
    if s.FromConfig("", MODEL, name, 0) != 0:
        raise RuntimeError(f"LoadGen could not read its settings for {MODEL} {name} from its mlperf.conf")
    s.scenario = scenario
    s.mode = MODES[mode]
    s.server_target_qps = float(target_qps)
    s.offline_expected_qps = float(target_qps)
    s.server_target_latency_ns = int(round(cfg.bound_ms * 1e6))
    s.min_duration_ms = int(round(cfg.min_duration_s * 1000))
    if min_queries is not None or cfg.min_query_count is not None:
        s.min_query_count = int(min_queries if min_queries is not None else cfg.min_query_count)
    s.performance_sample_count_override = n_samples  # the whole query set stays resident
    if cfg.loadgen_seeds == "harness":
        entropy = seed if draw == 0 else [seed, draw]
        qsl, index, schedule = np.random.SeedSequence(entropy).generate_state(3, np.uint64)
        s.qsl_rng_seed, s.sample_index_rng_seed, s.schedule_rng_seed = int(qsl), int(index), int(schedule)
    return s


def run(system: ServingSystem, queries: QuerySet, test: lg.TestSettings, log_dir: Path) -> dict[str, Any]:
    """Run one LoadGen test over `system`; the step as its detail log tells it (`read_step`)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = lg.LogSettings()
    log.log_output.outdir = str(log_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    sut = lg.ConstructSUT(system.issue, system.flush)
    qsl = lg.ConstructQSL(len(queries), len(queries), queries.check_indices, queries.check_indices)
    system.start()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        with LoadWatch() as machine:  # steal over the run: a disturbed run does not count (bench.serve.qps_search)
            lg.StartTestWithLogSettings(sut, qsl, test, log)
    finally:
        batching = system.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    # the whole process's CPU time per second of the run: the worker's share plus LoadGen's threads and Python's
    process_cpu = (time.process_time() - cpu) / max(time.perf_counter() - wall, 1e-9)
    system.timeline.write(log_dir / timeline.FILE)  # the SUT's own times per query, beside LoadGen's logs
    return {**read_step(log_dir), "batching": batching, "threads": {**system.threads_used(), "process_cpu_per_s": round(process_cpu, 3)},
            "timeline": str(log_dir / timeline.FILE), "machine": machine.figures}


def read_detail(path: Path) -> dict[str, Any]:
    """Key -> value of every `:::MLLOG` entry of a detail log (the last one where a key repeats), and
    the messages LoadGen flagged as errors or warnings under `errors` and `warnings`."""
    if not path.is_file():
        raise LogError(f"LoadGen wrote no {path.name} in {path.parent}")
    entries: dict[str, Any] = {"errors": [], "warnings": []}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        entry = json.loads(line[len(":::MLLOG "):])
        meta = entry.get("metadata") or {}
        if meta.get("is_error"):
            entries["errors"].append(str(entry.get("value")))
        elif meta.get("is_warning"):
            entries["warnings"].append(str(entry.get("value")))
        entries[entry["key"]] = entry.get("value")
    return entries


def read_step(log_dir: Path) -> dict[str, Any]:
    """What one run's detail log says: the mode, LoadGen's verdict, its rates and latency percentiles (ms)."""
    d = read_detail(Path(log_dir) / DETAIL)
    missing = [k for k in ("effective_scenario", "effective_test_mode") if k not in d]
    if missing:
        raise LogError(f"{Path(log_dir) / DETAIL} lacks {missing}: the run did not finish")
    step: dict[str, Any] = {
        "scenario": d["effective_scenario"],
        "mode": d["effective_test_mode"],
        "target_qps": d.get("effective_target_qps"),
        "bound_ms": _ms(d.get("effective_target_latency_ns")),
        "validity": d.get("result_validity"),  # VALID | INVALID; absent in accuracy mode
        "invalid_reason": (d.get("result_invalid_reason") or "").strip() or None,
        "perf_constraints_met": d.get("result_perf_constraints_met"),
        "min_duration_met": d.get("result_min_duration_met"),
        "min_queries_met": d.get("result_min_queries_met"),
        "early_stopping_met": d.get("early_stopping_met"),
        "early_stopping": " ".join((d.get("early_stopping_result") or "").split()) or None,
        "queries": d.get("result_query_count"),
        "overlatency_queries": d.get("result_overlatency_query_count"),
        # Server: completed samples per second; Offline: samples per second
        SAMPLES_PER_S: d.get("result_completed_samples_per_sec", d.get("result_samples_per_second")),
        "scheduled_samples_per_s": d.get("result_scheduled_samples_per_sec"),
        "min_duration_s": _s(d.get("effective_min_duration_ms")),
        "min_query_count": d.get("effective_min_query_count"),
        "min_sample_count": d.get("effective_min_sample_count"),  # Offline: its one query's samples at least
        "samples_per_query": d.get("effective_samples_per_query"),
        "performance_sample_count": d.get("effective_performance_sample_count"),
        "seeds": [d.get(f"effective_{k}_rng_seed") for k in ("qsl", "sample_index", "schedule")],
        LATENCY_MS: {q: _ms(d.get(f"result_{p}_percentile_latency_ns")) for q, p in PERCENTILES.items()},
        "latency_mean_ms": _ms(d.get("result_mean_latency_ns")),
        "latency_max_ms": _ms(d.get("result_max_latency_ns")),
        "loadgen_version": d.get("loadgen_version"),
        "errors": d["errors"],
        "warnings": d["warnings"],
        "log_dir": str(log_dir),
    }
    return step


def _ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


def _s(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000
