"""`+sweep=scale model=hstu +preset=dlrmv3`: the sequential model's scale sweep (conf/sweep/sequential/scale.yaml), in a
tiny form: the item table at a small size and at one no machine holds, through the real command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import preflight

ROOT = Path(__file__).resolve().parents[1]


def test_the_scale_sweep_on_a_sequential_model_takes_its_own_axes():
    assert preflight.sequential_sweep(["+sweep=scale", "model=hstu", "+preset=dlrmv3"]) == ["+sweep/sequential=scale", "model=hstu", "+preset=dlrmv3"]
    assert preflight.sequential_sweep(["+sweep=scale", "+preset=dlrmv3", "workload.table_rows=1000,2000"])[0] == "+sweep/sequential=scale"
    assert preflight.sequential_sweep(["+sweep=scale"]) == ["+sweep=scale"]  # the DLRM scale sweep as it was
    # a flag's value is not an override: `--cfg job` shows the sequential sweep's job
    assert preflight.sequential_sweep(["+sweep=scale", "model=hstu", "--cfg", "job"]) == ["+sweep/sequential=scale", "model=hstu", "--cfg", "job"]
    assert preflight.sequential_sweep(["+sweep=scale", "model=dlrm_v2"]) == ["+sweep=scale", "model=dlrm_v2"]
    assert preflight.sequential_sweep(["+sweep=serve", "+preset=dlrmv3"]) == ["+sweep=serve", "+preset=dlrmv3"]


@pytest.mark.slow
def test_tiny_scale_sweep_measures_what_fits_and_refuses_what_does_not(tmp_path):
    """4,000 rows: INT4 and FP32 ok, each with its lookups timed alone; 1e12 rows (2 PB in FP32, 260 TB in INT4):
    both skipped by the memory guard before any work, the bytes they would need in the line."""
    rows = [4000, 10**12]
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "+sweep=scale", "model=hstu", "+preset=dlrmv3", f"workload.table_rows={rows[0]},{rows[1]}",
         "backend=uint4,fp32_tbe", "workload.history_length=8", "workload.candidates=4", "workload.num_users=50",
         "workload.eval_samples=256", "workload.train_samples=256", "workload.calibration_samples=64", "threads=1",
         "timing.trials=2", "timing.max_rounds=2", "timing.warmup_batches=1", "timing.batches_per_trial=2", "timing.min_trial_seconds=0",
         "timing.calibrate=false", "kernel_health=false", "timing.pool_samples=256",
         f"reports_dir={tmp_path / 'reports'}", f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "reports" / "records.jsonl").read_text().splitlines()]
    by = {(r["backend"], r["config"]["workload"]["table_rows"]): r for r in records}
    assert set(by) == {(b, n) for b in ("uint4", "fp32_tbe") for n in rows} and {r["config"]["sweep_name"] for r in records} == {"scale"}
    for backend, row_bytes in (("uint4", 512 // 2 + 4), ("fp32_tbe", 512 * 4)):
        small, huge = by[(backend, rows[0])], by[(backend, rows[1])]
        assert small["status"] == "ok" and small["config"]["model"]["weights"] == "random"
        m = small["metrics"]
        assert m["table_rows"] == [50, rows[0]] and m["embedding_bytes"] == (50 + rows[0]) * row_bytes
        assert m["lookups"]["ns_per_distinct_row"] > m["lookups"]["ns_per_id"] > 0  # each history read once per candidate
        assert m["lookups"]["output_bytes_per_random_row"] == 512 * 4  # every row comes back in fp32, whatever it stores
        assert m["roofline"]["limits"]["write_bytes_per_s"] > 0
        # device.huge_pages, the sweep's: the whole 2 MiB pages inside the tables (FP32's 8 MB item table holds some), and what the kernel gave
        assert small["config"]["device"]["huge_pages"] and m["huge_pages"]["bytes"] >= (rows[0] * row_bytes // 2**21 - 1) * 2**21
        assert m["huge_pages"]["error"] or m["huge_pages"]["huge_bytes"] >= m["huge_pages"]["bytes"] > 0 or backend == "uint4"
        assert huge["status"] == "skipped" and huge["metrics"] == {}
        need_gb = (50 + rows[1]) * row_bytes / 1e9
        assert "not enough host memory" in huge["error"] and f"backend tables {need_gb:,.2f} GB".replace(",", "") in huge["error"].replace(",", "")
    # the figures and the paper, from these records
    paper = subprocess.run([sys.executable, "benchmarks/scripts/dlrmv3_paper.py", str(tmp_path / "reports" / "records.jsonl")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert paper.returncode == 0, paper.stderr[-3000:]
    out = paper.stdout
    assert "| 4,000 | INT4 | ok | " in out and "| 4,000 | FP32 | ok | " in out and "| 260 | " in out and "| 2,048 | " in out
    assert "| 1,000,000,000,000 | FP32 | skipped: not enough host memory" in out
    assert "| INT4 | 260 | 260.00 GB | 10.1 |" in out and "| FP32 | 2,048 | 2,048.00 GB | 79.5 |" in out  # 1e9 rows on paper
    assert "Where the item table leaves the last-level cache" in out and "- INT4: " in out
    assert "MLPerf (16,384 events, 2,048 candidates)" in out
