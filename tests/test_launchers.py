"""A sweep under a parallel launcher (hydra joblib: jobs in worker processes) writes exactly one
whole record per job into the shared store, and the report still sees every job."""

import json

import pytest

from tests.conftest import TINY, run_bench

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")


@pytest.mark.slow
def test_joblib_launcher_sweep_writes_one_record_per_job(tmp_path):
    result = run_bench(
        "+sweep=quant", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
        "backend=fp32,int8_tbe", "batch_size=256,512", "device=cpu", *[o for o in TINY if not o.startswith("batch_size")],
        f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = (tmp_path / "reports" / "records.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line whole
    jobs = {(r["backend"], r["batch_size"]) for r in records}
    assert len(records) == 4 and jobs == {(b, s) for b in ("fp32", "int8_tbe") for s in (256, 512)}
    assert all(r["status"] == "ok" for r in records)
    assert len(list((tmp_path / "sweep").glob("*/record.json"))) == 4
    assert "4 jobs (4 ok" in result.stdout
