"""The report says what it measured: the model, the timing protocol, what the fidelity gap compares;
a device absent here is one line; `latest` follows the sweep as configured."""

from __future__ import annotations

import copy
import os

import pytest

from bench.record import RunRecord
from bench.report import publish_report, write_report
from bench.report.protocol import timing_lines
from bench.sweep import sweep_variant


def record(backend: str, batch: int, device: str = "cpu", status: str = "ok", error: str | None = None, **metrics) -> RunRecord:
    cfg = {
        "model": {"name": "dlrm_kaggle", "arch": "dlrm", "embedding_dim": 16, "dense_arch_layer_sizes": [512, 256, 64, 16],
                  "over_arch_layer_sizes": [512, 256, 1], "checkpoint": None, "train": {"samples": 8572}},
        "timing": {"warmup_batches": 5, "trials": 5, "batches_per_trial": 10, "min_trial_seconds": 0.25},
        "backend": {"name": backend, **({"bits": 8, "mlp": "int8", "activations": "static", "per_table": {}} if backend == "fake_quant" else {})},
    }  # fmt: skip
    base = {
        "auc": 0.75, "auc_delta": 0.0, "auc_delta_lo": -0.001, "auc_delta_hi": 0.001, "throughput": 1000.0, "n_eval": 714,
        "throughput_trials": [1000.0] * 5, "latency_samples_ms": [1.0] * 5 * (40 if batch == 256 else 12), "latency_ms": {"p50": 1, "p90": 1, "p99": 1},
        "embedding_bytes": 1e6, "model_bytes": 2e6, "peak_rss_bytes": 5e8, "table_rows": [1460, 583, 10131227, 3], "timing_distinct_batches": 10,
        "model_source": "trained",
    }  # fmt: skip
    return RunRecord(
        status=status, workload="criteo_kaggle", backend=backend, device=device, batch_size=batch, config=cfg, config_hash=f"{backend}{batch}{device}",
        env={"fingerprint": "f"}, error=error, metrics={**base, **metrics} if status == "ok" else {},
    )


TWIN = {"name": "fake_quant", "bits": 8, "per_table": {}, "mlp": "int8", "activations": "dynamic"}
NO_GPU = "device cuda: no CUDA device on this machine (torch.cuda.is_available() is False)"


def sweep() -> list[RunRecord]:
    cpu = [record(b, bs, fidelity_twin=TWIN, fidelity_gap=0.0001) if b == "int8_tbe" else record(b, bs) for b in ("fp32", "fake_quant", "int8_tbe") for bs in (256, 1024)]
    cuda = [record(b, bs, device="cuda", status="skipped", error=NO_GPU) for b in ("fp32", "fake_quant", "int8_tbe") for bs in (256, 1024)]
    return cpu + cuda


@pytest.mark.slow
def test_the_report_names_the_model_the_timing_protocol_and_the_fidelity_twin(tmp_path):
    text = write_report(sweep(), tmp_path).read_text()
    assert "## What was measured" in text
    assert ("Model: `dlrm_kaggle` on `criteo_kaggle`: dlrm, embedding dim 16, bottom MLP 512-256-64-16, top MLP 512-256-1; "
            "4 tables, 10,133,273 rows in all (rows per table 1,460, 583, 10,131,227, 3); trained by the harness on 8,572 samples.") in text  # fmt: skip
    assert ("5 warm-up calls, then 5 trials per job; each trial makes at least 10 calls and lasts at least 0.25 s (12-40 calls per "
            "trial here), walking on through 10 distinct eval batches") in text
    assert "**fidelity gap** = AUC(backend) − AUC(its fake_quant twin)" in text
    assert ("`int8_tbe` against fake_quant bits=8 mlp=int8 activations=dynamic (differs from this report's `fake_quant` row: "
            "bits=8 mlp=int8 activations=static)") in text  # fmt: skip


@pytest.mark.slow
def test_a_device_absent_here_is_one_line_not_a_row_per_job(tmp_path):
    text = write_report(sweep(), tmp_path).read_text()
    cuda = text.split("## criteo_kaggle on cuda")[1].split("##")[0]
    assert cuda.strip() == f"All 6 jobs skipped (3 backends, batch sizes 256, 1024): {NO_GPU}"
    problems = text.split("## Errors and skips")[1].split("##")[0]
    assert problems.count(NO_GPU) == 1 and "- criteo_kaggle / cuda: **skipped**, all 6 jobs" in problems


@pytest.mark.slow
def test_a_mixed_group_keeps_its_rows(tmp_path):
    records = sweep()[:6] + [record("uint4", 256, status="error", error="RuntimeError: boom")]
    text = write_report(records, tmp_path).read_text()
    assert "criteo_kaggle / cpu / uint4 / batch 256: **error**: RuntimeError: boom" in text


@pytest.mark.slow
def test_latest_follows_the_sweep_as_configured_and_variants_keep_their_own(tmp_path):
    full = publish_report(sweep(), tmp_path, "quant", variant=sweep_variant(["+sweep=quant", "reports_dir=/x", "resume=true"]))
    partial_variant = sweep_variant(["+sweep=quant", "batch_size=2048", "device=cpu", "hydra.launcher.n_jobs=2"])
    assert partial_variant == "batch_size=2048 device=cpu"
    partial = publish_report(copy.deepcopy(sweep()[:2]), tmp_path, "quant", variant=partial_variant)
    folder = tmp_path / "quant"
    assert os.readlink(folder / "latest") == full.name != partial.name  # a variant leaves `latest` to the sweep as configured
    assert os.readlink(folder / "latest-batch_size=2048,device=cpu") == partial.name
    assert sorted(p.name for p in folder.glob("latest*")) == ["latest", "latest-batch_size=2048,device=cpu"]  # output-only overrides make no variant
    assert (partial / "report.md").read_text().startswith("# Sweep quant with batch_size=2048 device=cpu")


def test_timing_line_says_how_many_paired_rounds_the_interval_needed():
    recs = [record("int8_tbe", 1024, speedup_method="paired: 8 ABBA rounds", speedup_rounds=[1.1] * 8),
            record("int8_tbe", 256, speedup_method="paired: 30 ABBA rounds", speedup_rounds=[1.1] * 30)]
    for r in recs:
        r.config = copy.deepcopy(r.config)
        r.config["timing"].update(trials=7, max_rounds=48, target_spread=0.05)
    [line, covers] = timing_lines(recs)
    assert "then 7 to 48 rounds per job" in line and "decides its verdict (and any speed threshold)" in line
    assert "at most 5% of it, or more rounds could not narrow it much (8-30 rounds here)" in line
    assert "covers the rounds in the job's own process only" in covers  # older records carry no between-process part


def test_timing_line_names_the_picked_setting_and_what_the_interval_covers():
    setting = {"threads": 1, "clock": "thread_cpu", "how": "picked by measurement on this machine", "process_sd": 0.012,
               "calibration": {"path": "/c/timing/m.json", "processes": 4, "rounds": 12}}
    recs = [record("int8_tbe", 1024, speedup_method="paired: 8 ABBA rounds", speedup_rounds=[1.1] * 8,
                   timing_setting=setting, speedup_process_sd=0.012)]
    [line, covers] = timing_lines(recs)
    assert line.startswith("- Timing: 1 thread on the thread_cpu clock (picked by measurement on this machine), ")
    assert "spread between processes measured on this machine (4 processes x 12 rounds, /c/timing/m.json)" in covers
    assert "a standard deviation of 1.2% of the speedup" in covers


def test_the_interval_words_say_where_the_spread_came_from_once_with_the_range():
    """18 jobs' phrases differ only in their re-run counts: the report says the calibration once and the range."""
    calibration = {"path": "/c/timing/m.json", "processes": 4, "rounds": 4}
    cal = "the timing calibration (6 degrees of freedom)"
    recs = [record("int8_tbe", bs, speedup_method="paired: 4 ABBA rounds", speedup_rounds=[1.1] * 4, speedup_process_sd=sd,
                   timing_setting={"threads": 1, "clock": "thread_cpu", "how": "picked", "process_sd": sd,
                                   "process_sd_from": learned, "calibration": calibration})
            for bs, sd, learned in ((256, 0.031, f"{cal} and 12 re-runs of 6 jobs on this machine"),
                                    (1024, 0.035, f"{cal} and 36 re-runs of 18 jobs on this machine"), (4096, 0.042, cal))]
    [_, covers] = timing_lines(recs)
    assert (f"a standard deviation of 3.1% to 4.2% of the speedup, estimated from {cal}, refined for 2 of 3 jobs by 12-36 re-runs "
            "of identical jobs on this machine") in covers
    assert covers.count("timing calibration") == 1 and "Student's t" in covers


def test_calls_per_trial_count_the_calls_of_a_trial():
    """latency_samples_ms is [trial][call]: 4 trials of 10 calls are 10 calls per trial, not 1."""
    recs = [record("int8_tbe", 1024, latency_samples_ms=[[1.0] * 10] * 4, throughput_trials=[1.0] * 4)]
    [line, *_] = timing_lines(recs)
    assert "(10 calls per trial here)" in line


def test_distinct_batch_counts_read_as_a_list_not_a_range():
    from bench.report.protocol import distinct_words

    assert distinct_words([48, 195, 781]) == "48, 195 and 781 distinct eval batches (one count per batch size)"
    assert distinct_words([781]) == "781 distinct eval batches" and distinct_words([]) == "distinct eval batches"

