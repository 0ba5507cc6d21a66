"""Report views of scale runs: the speedup-against-table-bytes section, its plots, the roofline
column, what the timed batches touched, and performance-only rows (untrained models)."""

from __future__ import annotations

import pytest

from bench.record import RunRecord
from bench.report import write_report
from bench.results.table import results_table


def record(backend, batch, rows, access="zipf", throughput=1000.0, performance_only=False, emb_bytes=None):
    workload = f"synthetic_scale:{access}-{rows}rows"
    metrics = {
        "throughput": throughput,
        "throughput_trials": [throughput * f for f in (0.99, 1.0, 1.01)],
        "latency_ms": {"p50": 1.0, "p90": 1.1, "p99": 1.2},
        "embedding_bytes": emb_bytes or rows * 26 * {"fp32": 256, "int8_tbe": 68, "uint4": 36}[backend],
        "model_bytes": 1e6,
        "peak_rss_bytes": 2e9,
        "prepare_seconds": 3.5,
        "page_faults_per_call": 2.0,
        "timing_pool": {"batches": 256, "samples": 256 * batch, "calls_timed": 50, "passes": 0.2},
        "access": {"unique_ids_per_batch_mean": 900.0, "rows_touched_fraction_mean": 0.25, "working_set_bytes": 4e8,
                   "llc_bytes": 32 << 20, "distinct_rows": 1000, "tables": {}},
        "kernels": {"embedding": ["aten::embedding_bag.padding_idx"], "gemm": ["aten::linear"]},
        "roofline": {"embedding_share": 0.4, "embedding_bytes_per_s": 3.2e9, "dense_share": 0.3},
    }
    if performance_only:
        metrics["accuracy"] = "performance only, no accuracy (untrained weights)"
    else:
        metrics.update(auc=0.78, auc_delta=0.0 if backend == "fp32" else -0.001, auc_delta_lo=-0.002, auc_delta_hi=0.0, n_eval=1000)
    return RunRecord(status="ok", workload=workload, backend=backend, device="cpu", batch_size=batch,
                     config={"workload": {"name": "synthetic_scale", "access": access, "table_rows": rows}},
                     config_hash=f"{workload}{backend}{batch}", env={"fingerprint": "fp"}, metrics=metrics)  # fmt: skip


def scale_records():
    out = []
    for rows in (10_000, 300_000):
        for batch in (256, 2048):
            out.append(record("fp32", batch, rows, throughput=1000.0))
            out.append(record("int8_tbe", batch, rows, throughput=1500.0))
            out.append(record("uint4", batch, rows, throughput=2000.0 if rows > 10_000 else 900.0))
    return out


def test_results_table_carries_the_machine_columns():
    df = results_table(scale_records())
    r = df[(df.backend == "uint4") & (df.batch_size == 2048) & (df.workload == "synthetic_scale:zipf-300000rows")].iloc[0]
    assert r.access == "zipf" and r.embedding_share == 0.4 and r.embedding_gbps == 3.2
    assert r.fp32_embedding_bytes == 300_000 * 26 * 256 and r.speedup == 2.0 and r.prepare_seconds == 3.5
    assert r.embedding_kernel == "aten::embedding_bag.padding_idx" and not r.performance_only


@pytest.mark.slow
def test_scale_section_and_plots(tmp_path):
    report = write_report(scale_records(), tmp_path, title="scale").read_text()
    assert "## Scale: speedup against table bytes and batch size" in report
    assert "| zipf | 1,997 | 2048 | 1,000 (40%) | 1.50× [1.47, 1.53] (40%) | 2.00× [" in report  # speedups with roofline shares
    assert "**uint4** on the largest tables (1,997 MB fp32), batch ≥ 1024: 1 of 1 speedup intervals lie above 1" in report
    assert (tmp_path / "scale_zipf.png").stat().st_size > 10_000 and "![scale_zipf](scale_zipf.png)" in report
    assert "3.20 (40%)" in report  # emb GB/s (roofline) column
    assert "256 × 2048 = 524,288" in report and "LLC MB" in report  # the timing pool and what it touched


def test_performance_only_rows_say_so_and_print_no_delta(tmp_path):
    records = [record(b, 2048, 40_000_000, access="zipf", performance_only=True, emb_bytes=13.9e9) for b in ("uint4", "int8_tbe")]
    report = write_report(records, tmp_path, title="full").read_text()
    assert "Performance only, no accuracy: the weights are untrained" in report
    section = report.split("## synthetic_scale")[1]
    assert "| backend | table_rows | batch | samples/s |" in section and "| build s |" in section  # no AUC columns; build time shown; the swept axis a column
    assert "Reading the deltas" not in report


@pytest.mark.slow
def test_one_table_size_over_batch_sizes_is_a_sweep_too(tmp_path):
    # a reduced `+sweep=scale workload.table_rows=300000`: one table size, two batch sizes
    records = [r for r in scale_records() if r.workload.endswith("-300000rows")]
    report = write_report(records, tmp_path, title="scale").read_text()
    assert "## Scale: speedup against table bytes and batch size" in report
    assert (tmp_path / "scale_zipf.png").stat().st_size > 10_000 and "![scale_zipf](scale_zipf.png)" in report


def test_performance_only_rows_without_fp32_have_no_verdicts(tmp_path):
    from bench.results.table import results_table

    df = results_table([record("uint4", 2048, 40_000_000, performance_only=True, emb_bytes=13.9e9)])
    assert df.iloc[0].speed_verdict is None and df.iloc[0].auc_verdict is None  # unpaired, untrained: nothing to judge
    report = write_report([record("uint4", 2048, 40_000_000, performance_only=True, emb_bytes=13.9e9)], tmp_path).read_text()
    assert "timed alone (unpaired)" in report and "inconclusive" not in report.split("## synthetic_scale")[1].split("##")[0]
