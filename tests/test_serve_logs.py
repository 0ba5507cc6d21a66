"""Reading LoadGen's logs: real files this harness's runs made with mlcommons-loadgen 6.0.17
(tests/fixtures/serve/), so a change in what LoadGen writes shows up here."""

import json
import re
import shutil

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from bench.serve.accuracy_log import AccuracyLogError, read_accuracy_log
from bench.serve.loadgen import DETAIL, SUMMARY, LogError, read_detail, read_step
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "serve"


def summary(name):
    """(verdict, samples/s) as LoadGen's own summary file states them."""
    text = (FIXTURES / name / SUMMARY).read_text()
    rate = re.search(r"(?:Completed samples per second\s*|Samples per second): ([\d.]+)", text).group(1)
    return re.search(r"Result is : (\w+)", text).group(1), float(rate)


@pytest.mark.parametrize("name", ["server_valid", "server_invalid", "offline_short", "offline_valid"])
def test_a_step_reads_as_loadgen_s_summary_states_it(name):
    step = read_step(FIXTURES / name)
    verdict, rate = summary(name)
    assert step["validity"] == verdict and step["samples_per_s"] == pytest.approx(rate, rel=1e-4)
    assert step["mode"] == "PerformanceOnly" and step["loadgen_version"].startswith("6.0.17")
    text = (FIXTURES / name / SUMMARY).read_text()
    p99_ns = int(re.search(r"99.00 percentile latency \(ns\)\s*: (\d+)", text).group(1))
    assert step["latency_ms"]["p99"] == pytest.approx(p99_ns / 1e6)
    assert step["errors"] == [] and step["log_dir"] == str(FIXTURES / name)


def test_server_steps_carry_the_bound_and_early_stopping():
    valid, invalid = read_step(FIXTURES / "server_valid"), read_step(FIXTURES / "server_invalid")
    assert (valid["scenario"], valid["target_qps"], valid["bound_ms"]) == ("Server", 288, 60)
    assert valid["early_stopping_met"] is True and valid["early_stopping"] == "* Run successful."
    assert (valid["min_duration_s"], valid["min_query_count"], valid["performance_sample_count"]) == (4.0, 500, 721)
    # p99 under the bound, yet INVALID: 11 late queries of 1185 are too many for early stopping to vouch for it
    assert invalid["latency_ms"]["p99"] < 60 and invalid["perf_constraints_met"] is True
    assert invalid["early_stopping_met"] is False and (invalid["queries"], invalid["overlatency_queries"]) == (1185, 11)
    assert "Would need to run at least 959 more queries" in invalid["early_stopping"]


def test_offline_steps_carry_the_query_size_and_the_duration_verdict():
    short, valid = read_step(FIXTURES / "offline_short"), read_step(FIXTURES / "offline_valid")
    assert short["scenario"] == "Offline" and short["bound_ms"] == 0 and short["queries"] == 1
    assert short["min_duration_met"] is False and "Increase expected QPS" in short["invalid_reason"]
    assert valid["min_duration_met"] is True and valid["samples_per_query"] == valid["min_sample_count"] == 1630


def test_an_unfinished_or_missing_log_is_named(tmp_path):
    with pytest.raises(LogError, match="no mlperf_log_detail.txt"):
        read_step(tmp_path)
    lines = (FIXTURES / "server_valid" / DETAIL).read_text().splitlines()
    (tmp_path / DETAIL).write_text("\n".join(line for line in lines if "effective_test_mode" not in line))
    with pytest.raises(LogError, match="did not finish"):
        read_step(tmp_path)


def test_error_entries_are_collected(tmp_path):
    shutil.copy(FIXTURES / "server_valid" / DETAIL, tmp_path / DETAIL)
    entry = {"key": "error_invalid_config", "value": "a planted error", "metadata": {"is_error": True, "is_warning": False}}
    with open(tmp_path / DETAIL, "a") as f:
        f.write(":::MLLOG " + json.dumps(entry) + "\n")
    assert read_detail(tmp_path / DETAIL)["errors"] == ["a planted error"]


def test_the_accuracy_log_reads_as_mlperf_s_accuracy_script_reads_it():
    responses = read_accuracy_log(FIXTURES / "offline_accuracy" / "mlperf_log_accuracy.json")
    assert sorted(responses) == list(range(40)) and all(r.shape == (16, 2) for r in responses.values())
    data = np.concatenate([responses[i] for i in sorted(responses)])
    # mlcommons/inference recommendation/dlrm_v2/pytorch/tools/accuracy-dlrm.py, run on this file,
    # reports AUC=75.339% (0.7533907496012759 at full precision) over 640 pairs of 40 queries.
    assert roc_auc_score(data[:, 1], data[:, 0]) == 0.7533907496012759


def test_a_broken_accuracy_log_is_named(tmp_path):
    (tmp_path / "mlperf_log_accuracy.json").write_text('[{"seq_id": 0, "qsl_idx": 0, "data": "00')
    with pytest.raises(AccuracyLogError, match="cannot read LoadGen's accuracy log"):
        read_accuracy_log(tmp_path / "mlperf_log_accuracy.json")
