"""A backend whose output is constant or at chance fails its job with that reason (bench.pipeline.job.output_fault),
while a valid fp32 reference ranks: an error record, not a ΔAUC to tolerate."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.pipeline.job import output_fault
from tests.conftest import REPO

RANKS = {"auc_fp32": 0.71, "n_eval": 8192}


def test_constant_output_is_a_fault():
    reason = output_fault({**RANKS, "auc": 0.5, "distinct_scores": 1}, "int8_tbe")
    assert reason is not None and "constant" in reason and "8192" in reason


def test_output_at_chance_is_a_fault_and_a_poor_one_is_not():
    reason = output_fault({**RANKS, "auc": 0.503, "distinct_scores": 8000}, "int8_tbe")
    assert reason is not None and "at chance" in reason and "0.5030" in reason
    assert output_fault({**RANKS, "auc": 0.62, "distinct_scores": 8000}, "int8_tbe") is None  # worse, not broken: a ΔAUC


def test_the_reference_and_a_reference_at_chance_are_left_to_reference_fault():
    assert output_fault({**RANKS, "auc": 0.5, "distinct_scores": 1}, "fp32") is None
    assert output_fault({"auc_fp32": 0.501, "auc": 0.5, "distinct_scores": 1}, "int8_tbe") is None
    assert output_fault({"accuracy": "performance only"}, "int8_tbe") is None  # random weights: no accuracy to judge


@pytest.mark.slow
def test_a_planted_constant_output_backend_ends_in_an_error_record(tmp_path):
    # the real command, with the test plug-in imported first (tests/support/constant_backend.py)
    args = ["backend=test_constant", "+preset=tiny", f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}",
            f"hydra.run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "tests.support.constant_backend", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "reports" / "records.jsonl").read_text().splitlines()]
    assert [r["backend"] for r in records] == ["test_constant"]
    record = records[0]
    assert record["status"] == "error" and "the quantized output is constant" in record["error"], record["error"]
    assert record["metrics"]["distinct_scores"] == 1 and record["metrics"]["auc_fp32"] > 0.6
