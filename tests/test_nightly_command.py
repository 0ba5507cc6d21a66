"""The nightly as CI runs it: `python -m bench +sweep=nightly` in a subprocess, its exit code, its
stderr and the files it leaves, for a clean run, a failing rule, an inconclusive rule, a failing
post-sweep stage, bad input, and the command of `.github/workflows/nightly.yml` itself.

The first run trains the tiny model; the others reuse its records with `resume=true`, so each takes
a few seconds. Nothing here depends on timing: the rules that decide are AUC rules (deterministic for
a fixed seed) and `max_embedding_bytes=1`, which no backend meets. (A speed rule cannot be planted to
fail: on a busy machine two paired rounds can give a speedup interval as wide as 0x .. 1e11x, and the
gate rightly reads `min_speedup=1000000` inconclusive.)
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.store import read_records
from tests.conftest import REPO, run_bench
from tests.support.models import FAST

pytestmark = pytest.mark.slow

# Two backends of the nightly on a model that trains in about a second.
TINY_NIGHTLY = ["backend=fp32,int8_tbe", *FAST]


class Nightly:
    """A working folder where nightlies run, sharing one reports folder, cache and history."""

    def __init__(self, root: Path) -> None:
        self.root, self.reports = root, root / "reports"
        # a +preset=tiny nightly keeps its own history, out of the nightly's history.jsonl (issue 35)
        self.history, self.history_md = self.reports / "history-tiny.jsonl", self.reports / "history-tiny.md"

    def run(self, *extra: str, resume: bool = True) -> subprocess.CompletedProcess:
        args = ["+sweep=nightly", *TINY_NIGHTLY, f"reports_dir={self.reports}", f"cache_dir={self.root / 'cache'}",
                *(["resume=true"] if resume else []), *extra]  # fmt: skip
        return run_bench(*args, cwd=self.root, timeout=600)

    def report_dir(self, result: subprocess.CompletedProcess) -> Path:
        return Path(re.search(r"^gate: \w+ \((.+)/gate\.md\)$", result.stdout, re.M).group(1))

    def stored(self) -> int:
        return len(read_records(self.reports / "records.jsonl"))

    def runs_in_history(self) -> int:
        lines = self.history.read_text().splitlines()
        return len({re.search(r'"run_id": "([^"]+)"', line).group(1) for line in lines})


def no_traceback(result: subprocess.CompletedProcess) -> None:
    for stream in (result.stdout, result.stderr):
        assert "Traceback" not in stream and "raised" not in stream, stream[-3000:]


@pytest.fixture(scope="module")
def nightly(tmp_path_factory) -> Nightly:
    night = Nightly(tmp_path_factory.mktemp("nightly"))
    first = night.run(resume=False)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    night.first = first
    return night


def test_a_clean_nightly_exits_0_and_writes_the_history(nightly):
    result = nightly.first
    no_traceback(result)
    report = nightly.report_dir(result)
    assert "**Gate: PASS**" in (report / "gate.md").read_text()
    assert nightly.history.is_file() and nightly.history_md.is_file()
    assert f"history: {nightly.history} ({nightly.history_md})" in result.stdout
    assert not (nightly.reports / "history.jsonl").exists()  # the nightly's own history holds no tiny run
    assert nightly.stored() == 2


def test_a_failing_rule_exits_1_and_the_verdict_names_the_backend(nightly):
    before = nightly.runs_in_history()
    result = nightly.run("gate.rules.int8_tbe.max_embedding_bytes=1")
    assert result.returncode == 1, result.stderr[-3000:]
    no_traceback(result)
    gate_md = (nightly.report_dir(result) / "gate.md").read_text()
    assert "**Gate: FAIL**" in gate_md and re.search(r"int8_tbe.*max_embedding_bytes", gate_md)
    assert 'failures="1"' in (nightly.report_dir(result) / "gate.xml").read_text()
    assert nightly.runs_in_history() == before + 1  # a failing night is history too
    assert nightly.stored() == 2  # resumed: nothing measured twice


def test_an_inconclusive_rule_passes_unless_it_is_told_to_fail(nightly):
    with open(nightly.report_dir(nightly.first) / "results.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["backend"] == "int8_tbe")
    delta, lo, hi = (float(row[k]) for k in ("auc_delta", "auc_delta_lo", "auc_delta_hi"))
    assert lo < delta < hi
    threshold = (-delta + -lo) / 2  # the drop's point is allowed, its interval reaches past the threshold
    rule = f"gate.rules.int8_tbe.max_auc_drop={threshold:.9f}"
    passed = nightly.run(rule)
    assert passed.returncode == 0, passed.stderr[-3000:]
    rows = (nightly.report_dir(passed) / "gate.md").read_text().splitlines()
    assert any("inconclusive" in r and "int8_tbe" in r and "max_auc_drop" in r and "straddles" in r for r in rows)
    failed = nightly.run(rule, "gate.inconclusive_fails=true")
    assert failed.returncode == 1 and "**Gate: FAIL**" in (nightly.report_dir(failed) / "gate.md").read_text()


def test_a_failing_history_stage_exits_3_with_one_line_after_the_verdict_is_written(nightly):
    blocker = nightly.history_md
    saved = blocker.read_bytes()
    blocker.unlink()
    blocker.mkdir()  # history.md cannot be replaced, for root too
    try:
        result = nightly.run("gate.rules.int8_tbe.max_embedding_bytes=1")
    finally:
        blocker.rmdir()
        blocker.write_bytes(saved)
    assert result.returncode == 3
    no_traceback(result)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: the history stage failed: IsADirectoryError") and "history-tiny.md" in errors[0]
    report = nightly.report_dir(result)
    assert "**Gate: FAIL**" in (report / "gate.md").read_text() and (report / "gate.xml").is_file()
    assert (report / "report.md").is_file() and (report / "error-history.txt").is_file()  # the traceback, kept


def test_a_tiny_nightly_joins_the_default_history_only_when_asked(nightly):
    before = nightly.runs_in_history()
    result = nightly.run("gate.history_name=history.jsonl")
    assert result.returncode == 0, result.stderr[-3000:]
    main = nightly.reports / "history.jsonl"
    assert f"history: {main} ({nightly.reports / 'history.md'})" in result.stdout
    assert main.is_file() and nightly.runs_in_history() == before
    main.unlink()
    (nightly.reports / "history.md").unlink()


def test_a_history_name_that_is_a_path_is_refused_before_any_work(nightly):
    stored = nightly.stored()
    result = nightly.run("gate.history_name=sub/h.jsonl", resume=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: gate.history_name must be a file name ending .jsonl, got 'sub/h.jsonl' "
        "(gate.history_name=history.jsonl; a path elsewhere is gate.history_file=PATH)"]
    assert nightly.stored() == stored


def test_an_unwritable_history_is_refused_before_any_work(nightly, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    stored, folders = nightly.stored(), sorted((nightly.reports / "nightly").iterdir())
    result = nightly.run(f"gate.history_file={a_file}/history.jsonl", resume=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: gate.history_file: cannot write the history {a_file}/history.jsonl: {a_file} is a file, not a folder; "
        "give a folder you can write (gate.history_file=PATH)"]
    assert nightly.stored() == stored and sorted((nightly.reports / "nightly").iterdir()) == folders


def test_bad_input_exits_2_before_any_work_and_stores_nothing(nightly):
    stored, folders = nightly.stored(), sorted((nightly.reports / "nightly").iterdir())
    result = nightly.run("timing.trials=0", resume=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: timing.trials must be at least 1, got 0 (timing.trials=N)"]
    assert nightly.stored() == stored and sorted((nightly.reports / "nightly").iterdir()) == folders


def test_the_workflow_command_itself(nightly):
    """The run line of .github/workflows/nightly.yml, as the runner's shell runs it, with tiny overrides."""
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    [job] = workflow["jobs"].values()
    [step] = [s for s in job["steps"] if "+sweep=nightly" in s.get("run", "")]
    command = step["run"].replace(".venv/bin/python", sys.executable)
    overrides = [*TINY_NIGHTLY, f"reports_dir={nightly.reports}", f"cache_dir={nightly.root / 'cache'}", "resume=true",
                 "gate.rules.int8_tbe.max_embedding_bytes=1"]  # fmt: skip
    env = {**os.environ, "OVERRIDES": " ".join(overrides), "PYTHONPATH": str(REPO)}
    result = subprocess.run(["bash", "-e", "-c", command], cwd=nightly.root, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]  # the failing rule fails the step
    assert "gate: FAILED" in result.stdout


def test_an_internal_error_of_a_single_run_exits_3_and_keeps_the_record(nightly, tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "record.json").mkdir(parents=True)  # the job's record.json cannot be written
    stored = nightly.stored()
    args = [a for a in TINY_NIGHTLY if not a.startswith("backend=")]
    result = run_bench(*args, "backend=fp32", "batch_size=128", f"reports_dir={nightly.reports}", f"cache_dir={nightly.root / 'cache'}",
                       f"hydra.run.dir={run_dir}", cwd=nightly.root, timeout=600)  # fmt: skip
    assert result.returncode == 3
    no_traceback(result)
    [line] = result.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: the harness failed: IsADirectoryError") and f"traceback: {run_dir / 'traceback.txt'}" in line
    assert nightly.stored() == stored + 1  # the store line is written first: the measurement is kept
