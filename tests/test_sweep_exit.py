"""A sweep that lost jobs says so in its exit code: any errored job makes it exit 1, with a sweep config
(report written, no gate) or a bare multirun; skipped jobs are not errors."""

import pytest

from tests.conftest import run_bench

TOO_BIG = "100000"  # larger than the tiny eval split (8192): the job errors while measuring, after the sweep started


@pytest.mark.slow
def test_a_sweep_without_a_gate_exits_1_when_a_job_errored_and_still_writes_its_report(tmp_path):
    result = run_bench("+sweep=quant", "+preset=tiny", "backend=fp32", f"batch_size=256,{TOO_BIG}", "device=cpu,cuda",
                       f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "4 jobs (1 ok, 1 error, 2 skipped" in result.stdout  # cuda: skipped here, not an error
    assert "exit 1: 1 of 4 jobs errored" in result.stderr
    report = next(line.split(": ", 1)[1] for line in result.stdout.splitlines() if line.startswith("report: "))
    text = open(report).read()
    assert report.startswith(str(tmp_path / "reports" / "quant")) and "larger than the eval split" in text  # the report names the error


@pytest.mark.slow
def test_a_bare_multirun_exits_1_when_a_job_errored_and_0_when_jobs_were_only_skipped(tmp_path):
    common = [f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    errored = run_bench("-m", "+preset=tiny", f"batch_size={TOO_BIG}", *common)
    assert errored.returncode == 1 and "error: 1 jobs errored (fp32 cpu bs=100000)" in errored.stderr, errored.stderr[-2000:]
    skipped = run_bench("-m", "+preset=tiny", "device=cuda", "model.weights=random", *common)
    assert skipped.returncode == 0 and "skipped" in skipped.stderr + skipped.stdout, skipped.stderr[-2000:]
