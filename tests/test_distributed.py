"""Sharded inference on torchrec's engine (bench.distributed): the planner's plan in the record, bytes
per rank, AUC exactly equal to the unsharded run, skip reasons where the engine cannot shard, and
real process groups: a one-rank gloo group in this process, and two gloo ranks launched through
torchrun (the launch route a sweep's job takes)."""

import dataclasses
import json
import shutil
import threading
import time

import pytest
import torch

from bench import registry
from bench.distributed import engine, host
from bench.distributed.launch import rank_pids, wait_gone
from bench.distributed.measure import slice_rows, split_bounds
from bench.distributed.worker import config_from_dict
from bench.measure.memory import row_bytes
from bench.pipeline import Session, run_job
from bench.record import RunRecord
from bench.report.sharding import plan_text, sharding_section
from bench.report.table import results_table
from bench.stats import median_interval
from bench.testing import random_batch, tiny_tables
from tests.conftest import TINY, compose_config

# Four small tables (rows 100, 50, 30, 20; dim 16): a job takes about a second.
SMALL = [
    *TINY,
    "workload.cardinalities=[100,50,30,20]",
    "workload.train_samples=4096",
    "workload.eval_samples=2048",
    "workload.calibration_samples=1024",
    "model.train.samples=4096",
    "model.train.batch_size=1024",
    "eval_batch_size=1024",
    "batch_size=256",
]
ROWS = {"t_cat_0": 100, "t_cat_1": 50, "t_cat_2": 30, "t_cat_3": 20}
DIM = 16


@pytest.fixture(scope="module")
def small_models(tmp_path_factory):
    """The SMALL fp32 model, trained once; tests copy its checkpoint cache."""
    root = tmp_path_factory.mktemp("sharding-models")
    cfg = compose_config([*SMALL, f"cache_dir={root}"])
    work = Session().work
    work.model(cfg, work.workload(cfg))
    return root / "models"


@pytest.fixture
def small_cfg(tmp_path, small_models):
    shutil.copytree(small_models, tmp_path / "cache" / "models")

    def make(*overrides):
        return compose_config([*SMALL, f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", *overrides])

    return make


def expected_bytes(dtype: str, rows: int, cols: int = DIM) -> int:
    return rows * row_bytes(dtype, cols)


# ------------------------------------------------------------------ one process: quantized tables


@pytest.mark.parametrize("sharding", ["table_wise", "row_wise", "column_wise"])
def test_quantized_tables_shard_with_every_score_unchanged(small_cfg, sharding):
    session = Session()
    record, exc = run_job(small_cfg("backend=int8_tbe", f"sharding={sharding}", "world_size=2"), session)
    assert exc is None and record.status == "ok", record.error
    info = record.metrics["sharding"]
    assert info["auc_delta_unsharded"] == 0.0 and info["max_abs_logit_diff"] == 0.0
    assert record.metrics["auc"] == info["auc_unsharded"]
    assert (info["route"], info["world_size"], info["process_group"]) == ("one_process", 2, None)
    tables = info["plan"]["sparse_arch.embedding_bag_collection"]
    assert set(tables) == set(ROWS) and {t["sharding_type"] for t in tables.values()} == {sharding}
    if sharding == "table_wise":  # whole tables, balanced by the planner
        assert all(len(t["ranks"]) == 1 for t in tables.values())
        per_table = {name: t["ranks"][0] for name, t in tables.items()}
        want = [sum(expected_bytes("int8", ROWS[n]) for n, r in per_table.items() if r == rank) for rank in (0, 1)]
    elif sharding == "row_wise":  # half the rows on each rank
        want = [sum(expected_bytes("int8", n // 2) for n in ROWS.values())] * 2
    else:  # half the columns on each rank, each shard with its own scale and bias
        want = [sum(expected_bytes("int8", n, DIM // 2) for n in ROWS.values())] * 2
        assert all(t["ranks"] == [0, 1] for t in tables.values())
    assert info["bytes_per_rank"] == want and [p["embedding_bytes"] for p in info["per_rank"]] == want
    assert record.metrics["embedding_bytes"] == sum(want)
    assert info["throughput_lo"] <= record.metrics["throughput"] <= info["throughput_hi"]


def test_int4_plan_is_half_the_bytes_of_int8(small_cfg):
    session = Session()
    int8 = run_job(small_cfg("backend=int8_tbe", "sharding=table_wise", "world_size=2"), session)[0]
    int4 = run_job(small_cfg("backend=uint4", "sharding=table_wise", "world_size=2"), session)[0]
    assert int4.status == "ok" and int4.metrics["sharding"]["auc_delta_unsharded"] == 0.0
    assert sum(int4.metrics["sharding"]["bytes_per_rank"]) == sum(expected_bytes("int4", n) for n in ROWS.values())
    assert sum(int4.metrics["sharding"]["bytes_per_rank"]) < sum(int8.metrics["sharding"]["bytes_per_rank"])


def test_auto_is_the_planners_choice_among_what_the_engine_offers(small_cfg):
    record = run_job(small_cfg("backend=fp16_tbe", "sharding=auto", "world_size=2"))[0]
    assert record.status == "ok" and record.metrics["sharding"]["auc_delta_unsharded"] == 0.0
    tables = record.metrics["sharding"]["plan"]["sparse_arch.embedding_bag_collection"]
    assert {t["sharding_type"] for t in tables.values()} == {"table_wise"}  # float rows: table-wise only
    assert sum(record.metrics["sharding"]["bytes_per_rank"]) == sum(expected_bytes("fp16", n) for n in ROWS.values())


@pytest.mark.parametrize("sharding", ["row_wise", "column_wise"])
def test_float_quantized_tables_beyond_table_wise_are_skipped_with_the_reason(small_cfg, sharding):
    record, exc = run_job(small_cfg("backend=fp16_tbe", f"sharding={sharding}", "world_size=2"))
    assert exc is None and record.status == "skipped" and record.metrics == {}
    assert "table-wise only" in record.error and "split scale/bias" in record.error and "sharding=table_wise or auto" in record.error


def test_sharding_none_at_world_size_2_is_skipped(small_cfg):
    record = run_job(small_cfg("sharding=none", "world_size=2"))[0]
    assert record.status == "skipped" and "world_size=2 needs a sharding" in record.error


@pytest.mark.parametrize("overrides,message", [
    (["world_size=0"], "world_size must be a positive integer"),
    (["sharding=table_wise", "world_size=2", "batch_size=255"], "must split evenly over world_size=2"),
    (["sharding.name=diagonal"], "unknown sharding 'diagonal'"),
])  # fmt: skip
def test_bad_sharding_input_is_an_error_record_naming_the_fix(small_cfg, overrides, message):
    record, exc = run_job(small_cfg(*overrides))
    assert record.status == "error" and message in record.error


def test_a_changed_score_is_an_error_record_that_keeps_its_metrics(small_cfg, monkeypatch):
    real = engine.shard_one_process

    class Flipped(torch.nn.Module):  # a sharding bug: some scores change sign
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, dense, sparse):
            out = self.module(dense, sparse)
            return torch.where(torch.arange(out.shape[0]).reshape(out.shape) % 7 == 0, -out, out)

    monkeypatch.setattr(engine, "shard_one_process", lambda *a, **k: (lambda m, p: (Flipped(m), p))(*real(*a, **k)))
    record, exc = run_job(small_cfg("backend=int8_tbe", "sharding=table_wise", "world_size=2"))
    assert record.status == "error" and exc is None
    assert "differs from the unsharded run" in record.error and record.metrics["sharding"]["auc_delta_unsharded"] != 0
    assert record.metrics["throughput"] > 0  # what was measured stays in the record


# ---------------------------------------------------------------- process groups: eager tables


def test_one_rank_gloo_group_row_wise_on_cpu(small_cfg):
    """Row-wise on CPU needs the harness's sharder (torchrec offers it for CUDA only)."""
    record = run_job(small_cfg("backend=fp32", "sharding=row_wise"))[0]
    assert record.status == "ok", record.error
    info = record.metrics["sharding"]
    assert (info["route"], info["process_group"], info["world_size"]) == ("process_group", "gloo", 1)
    assert info["auc_delta_unsharded"] == 0.0 and info["max_abs_logit_diff"] == 0.0
    assert info["bytes_per_rank"] == [sum(expected_bytes("fp32", n) for n in ROWS.values())]
    assert not torch.distributed.is_initialized()  # the private group is torn down after the job


@pytest.mark.slow
def test_two_gloo_ranks_launched_through_torchrun_match_the_unsharded_run(small_cfg, tmp_path):
    cfg = small_cfg("backend=fp32", "sharding=column_wise", "world_size=2")
    record, exc = run_job(cfg)
    assert exc is None and record.status == "ok", record.error
    info = record.metrics["sharding"]
    assert (info["route"], info["process_group"], info["world_size"]) == ("process_group", "gloo", 2)
    assert info["auc_delta_unsharded"] == 0.0 and info["max_abs_logit_diff"] == 0.0
    half = sum(expected_bytes("fp32", n, DIM // 2) for n in ROWS.values())
    assert info["bytes_per_rank"] == [half, half]
    ranks = info["per_rank"]
    assert [p["rank"] for p in ranks] == [0, 1] and all(p["peak_rss_bytes"] > 0 and p["rows_per_call"] == 128 for p in ranks)
    assert all(len(p["latency_samples_ms"]) == cfg.timing.trials for p in ranks)
    assert list((tmp_path / "cache" / "ranks").iterdir()) == []  # the launch folder is removed after success


# ------------------------------------------------------------------------------- small pieces


def test_slice_rows_cuts_every_key_and_split_bounds_cover_the_batch():
    tables = tiny_tables(3, pooling=2)
    batch = random_batch(tables, 10)
    dense, sparse = slice_rows(batch.dense, batch.sparse, 3, 7)
    assert torch.equal(dense, batch.dense[3:7])
    full, part = batch.sparse.to_dict(), sparse.to_dict()
    for key in sparse.keys():
        assert [t.tolist() for t in full[key].to_dense()[3:7]] == [t.tolist() for t in part[key].to_dense()]
    assert [split_bounds(10, r, 3) for r in range(3)] == [(0, 3), (3, 6), (6, 10)]


def test_config_round_trips_through_the_launch_file(small_cfg):
    cfg = small_cfg("backend=uint4", "+backend.per_table={t_cat_3: int8}", "sharding=row_wise", "world_size=2")
    assert config_from_dict(json.loads(json.dumps(dataclasses.asdict(cfg)))) == cfg
    assert type(config_from_dict(dataclasses.asdict(cfg)).backend) is registry.get("backend", "uint4").config


def test_median_interval_brackets_the_median():
    point, lo, hi = median_interval([10.0, 11.0, 12.0, 13.0, 50.0])
    assert point == 12.0 and lo <= point <= hi and lo >= 10.0 and hi <= 50.0
    assert tuple(median_interval([5.0])) == (5.0, 5.0, 5.0)


def test_the_host_lock_runs_one_job_at_a_time(small_cfg):
    cfg = small_cfg()
    windows = []

    def job():
        with host.one_job_per_host(cfg) as window:
            time.sleep(0.2)
        windows.append(window.span())

    threads = [threading.Thread(target=job) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = sorted(windows)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_report_shows_plans_bytes_per_rank_and_the_equal_auc(small_cfg):
    session = Session()
    records = [run_job(small_cfg(*o), session)[0] for o in (["backend=int8_tbe"], ["backend=int8_tbe", "sharding=row_wise", "world_size=2"])]
    text = "\n".join(sharding_section(records))
    assert "## Sharding" in text and "### Plans" in text and "0 (equal)" in text
    assert "**int8_tbe@row_wise×2**" in text and "row_wise → ranks 0, 1: t_cat_0, t_cat_1, t_cat_2, t_cat_3 (4 int8 tables, quant kernel)" in text
    mb = f"{sum(expected_bytes('int8', n // 2) for n in ROWS.values()) / 1e6:.3g}"
    assert f"bytes per rank {mb} / {mb} MB" in text
    df = results_table(records)  # sharded and unsharded runs are separate rows
    assert list(df["backend"]) == ["int8_tbe", "int8_tbe@row_wise×2"]
    assert plan_text(records[1].metrics["sharding"]).startswith("row_wise")


def test_killed_launch_leaves_no_process(tmp_path):
    """wait_gone/rank_pids: the helpers the fault test relies on."""
    (tmp_path / "rank0.pid").write_text("999999999\n")
    assert rank_pids(tmp_path) == [999999999] and wait_gone([999999999], 0.1) == []
