"""The one code path from config to record, end to end on a tiny config."""

import math

import pytest
import torch

from bench.runner import Session, run_job, run_one

REQUIRED_METRICS = ("auc", "logloss", "ne", "n_eval", "oracle_auc", "throughput", "latency_ms", "embedding_bytes", "model_bytes", "peak_rss_bytes")


@pytest.mark.slow
def test_tiny_run_end_to_end(tiny_cfg):
    record = run_one(tiny_cfg())
    assert record.status == "ok", record.error
    m = record.metrics
    for key in REQUIRED_METRICS:
        assert key in m, key
    assert m["n_eval"] == 8192 and 0.5 < m["auc"] <= 1 and 0.5 < m["oracle_auc"] <= 1
    assert m["auc_delta"] == 0 and m["auc_fp32"] == m["auc"]  # fp32 against itself
    assert len(m["throughput_trials"]) == 2 and len(m["latency_samples_ms"][0]) == 2
    assert m["embedding_bytes"] > 0 and m["model_bytes"] >= m["embedding_bytes"] and m["peak_rss_bytes"] > 0
    assert record.config["batch_size"] == 512 and len(record.config_hash) == 16
    for key in ("python", "torch", "torchrec", "fbgemm_gpu", "cpu", "threads", "git_sha", "git_dirty"):
        assert key in record.env
    assert all(math.isfinite(x) for x in m["throughput_trials"])


@pytest.mark.slow
def test_same_config_same_record_apart_from_timings(tiny_cfg, tmp_path):
    a = run_one(tiny_cfg())
    b = run_one(tiny_cfg())
    assert a.config_hash == b.config_hash and a.metrics["auc"] == b.metrics["auc"]
    assert a.metrics["logloss"] == b.metrics["logloss"]


@pytest.mark.slow
def test_a_backends_jobs_at_other_batch_sizes_share_the_figures_of_its_eval_scores(tiny_cfg):
    """Its ΔAUC and the intervals read nothing but its eval scores, which no batch size changes: a sweep's
    later jobs of the backend take them from its first (one entry held), the same numbers a process of its own finds."""
    session = Session()
    first = run_one(tiny_cfg("backend=int8_tbe", "batch_size=256"), session)
    later = run_one(tiny_cfg("backend=int8_tbe", "batch_size=512"), session)
    alone = run_one(tiny_cfg("backend=int8_tbe", "batch_size=512"))
    assert first.status == later.status == alone.status == "ok"
    assert session.work.built().count("scored figures") == 1
    for key in ("auc", "auc_fp32", "auc_delta", "auc_delta_lo", "auc_delta_hi", "auc_delta_p", "ne_delta", "acc_delta",
                "fidelity_gap", "auc_delta_embeddings", "auc_delta_mlp_hi"):
        assert first.metrics[key] == later.metrics[key] == alone.metrics[key], key
    later.metrics["auc"] = 0.0  # a record's figures are its own: changing one leaves the next job's untouched
    assert run_one(tiny_cfg("backend=int8_tbe", "batch_size=128"), session).metrics["auc"] == first.metrics["auc"]


@pytest.mark.slow
def test_threads_are_set_and_recorded(tiny_cfg):
    before = torch.get_num_threads()
    try:
        record = run_one(tiny_cfg("threads=1"))
        assert record.metrics["threads"] == 1 and record.env["threads"] == 1
    finally:
        torch.set_num_threads(before)


def test_absent_device_is_a_skipped_record(tiny_cfg):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    record = run_one(tiny_cfg("device=cuda"))
    assert record.status == "skipped" and "no CUDA device" in record.error


@pytest.mark.slow
def test_failures_become_error_records(tiny_cfg):
    record, exc = run_job(tiny_cfg("batch_size=100000"))
    assert record.status == "error" and "larger than the eval split" in record.error and exc is not None
    assert record.user_error and record.error_kind == "user"  # bad input found while running, not a failed measurement
    record, _ = run_job(tiny_cfg("model.checkpoint=/does/not/exist.pt"))
    assert record.status == "error" and "checkpoint not found" in record.error
    assert record.env["torch"]  # the environment is recorded even for failures
