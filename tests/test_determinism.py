"""The same config and seed give the same record, timings aside: two `python -m bench` processes,
each with its own fresh cache (so each trains the model), run at the same time and append to one
shared reports folder, as parallel launchers do."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.store import read_records
from tests.test_faults import FAST

REPO = Path(__file__).resolve().parents[1]

# What may differ between two runs of the same job: timings, memory peaks, when and which record,
# where the caches were, and whether the model was trained or loaded.
TIMING_METRICS = {"throughput", "throughput_lo", "throughput_hi", "throughput_trials", "latency_calls", "latency_p99_calls",
                  "speedup_round_se", "latency_ms", "latency_samples_ms", "peak_rss_bytes", "peak_rss_scope", "cuda_peak_bytes",
                  "speedup", "speedup_lo", "speedup_hi", "speedup_rounds", "reference_throughput", "reference_throughput_trials",
                  "noise", "stable", "unstable_reason", "timing_calls", "timing_calls_per_batch",
                  "rss_start_bytes", "page_faults_per_call", "prepare_seconds", "timing_pool", "roofline", "job_window",
                  "machine", "lookups"}  # fmt: skip
VOLATILE = {"created_at", "record_id"}
PATHS = {"cache_dir"}


def comparable(record: dict) -> dict:
    out = {k: v for k, v in record.items() if k not in VOLATILE}
    out["metrics"] = {k: v for k, v in record["metrics"].items() if k not in TIMING_METRICS}
    out["config"] = {k: v for k, v in record["config"].items() if k not in PATHS}
    return out


@pytest.mark.slow
def test_same_config_twice_in_parallel_processes_gives_identical_records(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = []
    for name in ("a", "b"):
        args = [*FAST, "backend=uint4", f"cache_dir={tmp_path / name / 'cache'}", f"reports_dir={tmp_path / 'reports'}", f"hydra.run.dir={tmp_path / name / 'run'}"]
        procs.append(subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    a, b = (json.loads((tmp_path / n / "run" / "record.json").read_text()) for n in ("a", "b"))
    assert a["status"] == b["status"] == "ok"
    assert a["metrics"]["model_source"] == b["metrics"]["model_source"] == "trained"  # trained twice
    assert a["metrics"]["auc"] == b["metrics"]["auc"] and a["metrics"]["auc_delta"] == b["metrics"]["auc_delta"]
    assert a["metrics"]["fidelity_gap"] == b["metrics"]["fidelity_gap"]
    assert comparable(a) == comparable(b)
    assert a["metrics"]["throughput"] > 0 and b["metrics"]["throughput"] > 0
    # Both appended to the shared store: two whole records.
    stored = read_records(tmp_path / "reports" / "records.jsonl")
    assert sorted(r.record_id for r in stored) == sorted([a["record_id"], b["record_id"]])
