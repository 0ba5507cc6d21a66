"""Sharded inference on torchrec's engine (bench.distributed): the planner's plan in the record, bytes
per rank, AUC exactly equal to the unsharded run, skip reasons where the engine cannot shard, and
real process groups: a one-rank gloo group in this process, and two gloo ranks launched through
torchrun (the launch route a sweep's job takes)."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import registry
from bench.distributed import engine, enter_rank, host
from bench.distributed.launch import failure, rank_pids, wait_gone
from bench.distributed.collect import slice_rows, split_bounds
from bench.distributed.worker import config_from_dict
from bench.errors import UserError
from bench.measure.memory import row_bytes
from bench.runner import Session, run_job
from bench.store import read_records
from bench.report.sharding import plan_text, sharding_section
from bench.results.table import results_table
from bench.stats import median_interval, paired_auc_delta
from bench.workloads.random_batch import random_batch, tiny_tables
from tests.conftest import REPO, run_bench
from tests.support.models import config_maker, train_once
from tests.test_faults import FAST, multirun

# Four small tables (rows 100, 50, 30, 20; dim 16): a job takes about a second.
SMALL = FAST
ROWS = {"t_cat_0": 100, "t_cat_1": 50, "t_cat_2": 30, "t_cat_3": 20}
DIM = 16


@pytest.fixture(scope="module")
def small_models(tmp_path_factory):
    """The SMALL fp32 model, trained once; tests copy its checkpoint cache."""
    return train_once(tmp_path_factory.mktemp("sharding-models"), SMALL)


@pytest.fixture
def small_cfg(tmp_path, small_models):
    return config_maker(tmp_path, small_models, SMALL)


def expected_bytes(dtype: str, rows: int, cols: int = DIM) -> int:
    return rows * row_bytes(dtype, cols)


# ------------------------------------------------------------------ one process: quantized tables


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["table_wise", "row_wise", "column_wise"])
def test_quantized_tables_shard_with_every_score_unchanged(small_cfg, sharding):
    session = Session()
    record, exc = run_job(small_cfg("backend=int8_tbe", f"sharding={sharding}", "world_size=2"), session)
    assert exc is None and record.status == "ok", record.error
    info = record.metrics["sharding"]
    assert info["auc_delta_unsharded"] == 0.0 and info["max_abs_logit_diff"] == 0.0
    assert info["auc_sharded"] == info["auc_unsharded"] == pytest.approx(record.metrics["auc"], abs=1e-12)
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


@pytest.mark.slow
def test_int4_plan_is_half_the_bytes_of_int8(small_cfg):
    session = Session()
    int8 = run_job(small_cfg("backend=int8_tbe", "sharding=table_wise", "world_size=2"), session)[0]
    int4 = run_job(small_cfg("backend=uint4", "sharding=table_wise", "world_size=2"), session)[0]
    assert int4.status == "ok" and int4.metrics["sharding"]["auc_delta_unsharded"] == 0.0, (int4.error, int4.metrics.get("sharding", {}).get("auc_delta_unsharded"))
    assert sum(int4.metrics["sharding"]["bytes_per_rank"]) == sum(expected_bytes("int4", n) for n in ROWS.values())
    assert sum(int4.metrics["sharding"]["bytes_per_rank"]) < sum(int8.metrics["sharding"]["bytes_per_rank"])


@pytest.mark.slow
def test_column_shards_pay_their_own_scale_and_bias(small_cfg):
    """INT2, dim 16 in two column shards of 8: each row of a shard is 8/4 + 4 = 6 bytes (the whole row: 8)."""
    record = run_job(small_cfg("backend=int2_tbe", "sharding=column_wise", "world_size=2"))[0]
    assert record.status == "ok" and record.metrics["sharding"]["auc_delta_unsharded"] == 0.0
    assert record.metrics["sharding"]["bytes_per_rank"] == [sum(n * 6 for n in ROWS.values())] * 2


@pytest.mark.slow
def test_auto_is_the_planners_choice_among_what_the_engine_offers(small_cfg):
    record = run_job(small_cfg("backend=fp16_tbe", "sharding=auto", "world_size=2"))[0]
    assert record.status == "ok" and record.metrics["sharding"]["auc_delta_unsharded"] == 0.0
    tables = record.metrics["sharding"]["plan"]["sparse_arch.embedding_bag_collection"]
    assert {t["sharding_type"] for t in tables.values()} == {"table_wise"}  # float rows: table-wise only
    assert sum(record.metrics["sharding"]["bytes_per_rank"]) == sum(expected_bytes("fp16", n) for n in ROWS.values())


@pytest.mark.slow
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
    (["sharding=table_wise", "world_size=2", "threads=1", "timing.clock=thread_cpu"], "time this job with timing.clock=wall"),
])  # fmt: skip
@pytest.mark.slow
def test_bad_sharding_input_is_an_error_record_naming_the_fix(small_cfg, overrides, message):
    record, exc = run_job(small_cfg(*overrides))
    assert record.status == "error" and message in record.error


@pytest.mark.slow
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


@pytest.mark.slow
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
def test_two_gloo_ranks_launched_through_torchrun_match_the_unsharded_run(small_cfg, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"  # this process's temporary folder: torchrun must leave nothing here
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
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
    assert list(tmp.iterdir()) == []  # no torchelastic_* folders left behind


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


def test_identical_scores_give_exactly_zero_delta_at_any_size():
    """Both AUCs come from one computation: sklearn's AUC and the midrank AUC can differ in the last bit."""
    rng = np.random.default_rng(0)
    labels, scores = (rng.random(200_000) < 0.25).astype(np.float64), rng.standard_normal(200_000).astype(np.float32)
    assert paired_auc_delta(labels, scores, scores.copy()).delta == 0.0


def test_a_failed_launch_names_the_rank_that_died_first(tmp_path):
    (tmp_path / "ranks.log").write_text(
        "Root Cause (first observed failure):\n[0]:\n  time      : x\n  host      : h\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 42)\n  error_file: <N/A>\n  traceback : Signal 9 (SIGKILL) received by PID 42\n"
    )
    (tmp_path / "rank0.error").write_text("RuntimeError: Connection closed by peer\n")
    (tmp_path / "rank1.error").write_text("")
    (tmp_path / "rank0.phase").write_text("measuring")
    (tmp_path / "rank1.phase").write_text("measuring")
    text = failure(tmp_path, 1)
    assert text.startswith("rank 1 died: SIGKILL (Signal 9 (SIGKILL) received by PID 42); rank 0: RuntimeError: Connection closed by peer")
    assert "ranks last seen: rank 0 measuring, rank 1 measuring; torchrun exit 1" in text


def test_median_interval_brackets_the_median():
    point, lo, hi = median_interval([10.0, 11.0, 12.0, 13.0, 50.0])
    assert point == 12.0 and lo <= point <= hi and lo >= 10.0 and hi <= 50.0
    assert tuple(median_interval([5.0])) == (5.0, 5.0, 5.0)


@pytest.mark.slow
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


@pytest.mark.slow
def test_report_shows_plans_bytes_per_rank_and_the_equal_auc(small_cfg):
    session = Session()
    records = [run_job(small_cfg(*o), session)[0] for o in (["backend=int8_tbe"], ["backend=int8_tbe", "sharding=row_wise", "world_size=2"])]
    text = "\n".join(sharding_section(records))
    assert "## Sharding" in text and "### Plans" in text and "0 (equal)" in text
    assert "**int8_tbe@row_wise×2**" in text and "row_wise → ranks 0, 1: t_cat_0, t_cat_1, t_cat_2, t_cat_3 (4 int8 tables, quant kernel)" in text
    mb = f"{sum(expected_bytes('int8', n // 2) for n in ROWS.values()) / 1e6:.3g}"
    assert f"bytes per rank {mb} / {mb} MB" in text
    df = results_table(records)  # sharded and unsharded runs are separate rows; each axis is a column of its own
    assert df[["backend", "sharding", "world_size", "route"]].values.tolist() == [
        ["int8_tbe", "none", 1, "single"], ["int8_tbe", "row_wise", 2, "one_process"]]
    assert plan_text(records[1].metrics["sharding"]).startswith("row_wise")


def test_killed_launch_leaves_no_process(tmp_path):
    """wait_gone/rank_pids: the helpers the fault test relies on."""
    (tmp_path / "rank0.pid").write_text("999999999\n")
    assert rank_pids(tmp_path) == [999999999] and wait_gone([999999999], 0.1) == []


# ------------------------------------------------------------------------------------- faults


def _procs_mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions `text`."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and wait_gone([int(proc.name)], 0) != []:
            out.append(int(proc.name))
    return out


def kill_rank_1_once_measuring(ranks_root: Path, seen: dict, timeout_s: float = 240) -> None:
    """Wait until rank 1 of a launched job is measuring, then SIGKILL it (what the fault test injects)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        phases = list(ranks_root.glob("*/rank1.phase")) if ranks_root.exists() else []
        if phases and phases[0].read_text() == "measuring":
            seen["workdir"] = phases[0].parent
            os.kill(int((seen["workdir"] / "rank1.pid").read_text()), signal.SIGKILL)
            seen["killed_at"] = time.time()
            return
        time.sleep(0.05)


@pytest.mark.slow
def test_a_killed_rank_ends_in_an_error_record_within_the_timeout_and_the_sweep_goes_on(small_models, tmp_path, monkeypatch, capsys):
    shutil.copytree(small_models, tmp_path / "cache" / "models")
    reports, sweep_dir = tmp_path / "reports", tmp_path / "multirun"
    seen: dict = {}
    killer = threading.Thread(target=kill_rank_1_once_measuring, args=(tmp_path / "cache" / "ranks", seen), daemon=True)
    killer.start()
    code = multirun(monkeypatch, [
        "+sweep=sharded", "backend=fp32,int8_tbe", "sharding=table_wise", "world_size=2", *SMALL,
        "timing.trials=2", "timing.min_trial_seconds=1", "sharding.timeout_s=30",
        f"cache_dir={tmp_path / 'cache'}", f"reports_dir={reports}", f"hydra.sweep.dir={sweep_dir}",
    ])  # fmt: skip
    killer.join(timeout=1)
    out = capsys.readouterr().out
    assert code == 1 and "killed_at" in seen, out[-3000:]  # a sweep with an errored job exits 1 (842ee50); the other job still ran
    records = {r.backend: r for r in read_records(reports / "records.jsonl")}
    assert set(records) == {"fp32", "int8_tbe"}  # the sweep went on after the failed job
    failed = records["fp32"]
    assert failed.status == "error" and "rank 1 died: SIGKILL" in failed.error and "ranks last seen" in failed.error
    written = next(p for p in sweep_dir.glob("*/record.json") if json.loads(p.read_text())["backend"] == "fp32")
    assert written.stat().st_mtime - seen["killed_at"] < 30  # within sharding.timeout_s, not a hang
    assert records["int8_tbe"].status == "ok"
    assert "2 jobs (1 ok, 1 error, 0 skipped)" in out and "error: fp32@table_wise×2 cpu bs=256: RankFailure: rank 1 died: SIGKILL" in out
    assert wait_gone(rank_pids(seen["workdir"]), 5) == []  # no rank left behind...
    assert _procs_mentioning(str(seen["workdir"])) == []  # ...nor torchrun


# ------------------------------------------------------------------- a user's own torchrun


@pytest.mark.slow
def test_torchrun_runs_each_ranks_shards_and_rank_0_writes_the_one_record(small_models, tmp_path):
    shutil.copytree(small_models, tmp_path / "cache" / "models")
    reports = tmp_path / "reports"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "bench",
         "backend=fp32", "sharding=row_wise", "world_size=2", *SMALL, f"cache_dir={tmp_path / 'cache'}",
         f"reports_dir={reports}", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_records(reports / "records.jsonl")
    assert len(records) == 1 and records[0].status == "ok"
    info = records[0].metrics["sharding"]
    assert (info["world_size"], info["route"], info["process_group"]) == (2, "process_group", "gloo")
    assert [p["rank"] for p in info["per_rank"]] == [0, 1] and info["auc_delta_unsharded"] == 0.0
    assert info["plan"]["sparse_arch.embedding_bag_collection"]["t_cat_0"]["ranks"] == [0, 1]
    assert json.loads((tmp_path / "run" / "record.json").read_text())["record_id"] == records[0].record_id


def test_a_rank_of_torchrun_refuses_a_sweep(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match="under torchrun, run one job"):
        enter_rank(["+sweep=sharded"])


# ------------------------------------------------------------------------ cluster launcher


@pytest.mark.slow
def test_submitit_local_sweep_writes_one_record_per_job_one_job_at_a_time(small_models, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    shutil.copytree(small_models, tmp_path / "cache" / "models")
    reports, sweep_dir = tmp_path / "reports", tmp_path / "multirun"
    result = run_bench(
        "+sweep=sharded", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
        "backend=fp32,int8_tbe", "sharding=table_wise", "world_size=1", *SMALL,
        f"cache_dir={tmp_path / 'cache'}", f"reports_dir={reports}", f"hydra.sweep.dir={sweep_dir}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_records(reports / "records.jsonl")
    assert sorted(r.backend for r in records) == ["fp32", "int8_tbe"]  # exactly one record per job
    assert all(r.status == "ok" for r in records) and len(list(sweep_dir.glob("*/record.json"))) == 2
    assert len({r.env["hostname"] for r in records}) == 1 and host.overlapping(records) == []  # never two at once
    assert len(list((sweep_dir / ".submitit").glob("*/*_log.out"))) == 2  # one submitit process per job
    assert "2 jobs (2 ok, 0 error, 0 skipped)" in result.stdout


@pytest.mark.slow
def test_submitit_tasks_are_the_ranks_of_one_job(small_models, tmp_path):
    """`hydra.launcher.tasks_per_node=2`: submitit starts the two ranks, its helper sets torch.distributed up."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    shutil.copytree(small_models, tmp_path / "cache" / "models")
    reports = tmp_path / "reports"
    result = run_bench(
        "-m", "hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2", "hydra.launcher.timeout_min=10",
        "backend=fp32", "sharding=table_wise", "world_size=2", *SMALL,
        f"cache_dir={tmp_path / 'cache'}", f"reports_dir={reports}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_records(reports / "records.jsonl")
    assert len(records) == 1 and records[0].status == "ok"  # rank 0 wrote the one record
    info = records[0].metrics["sharding"]
    assert (info["route"], info["world_size"], [p["rank"] for p in info["per_rank"]]) == ("process_group", 2, [0, 1])
    assert info["auc_delta_unsharded"] == 0.0 and not (tmp_path / "cache" / "ranks").exists()  # no torchrun launched


def test_nccl_jobs_are_skipped_cleanly_without_a_gpu(small_cfg):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: tests/test_cuda.py runs the NCCL path")
    record, exc = run_job(small_cfg("device=cuda", "backend=fp32", "sharding=table_wise", "world_size=2"))
    assert exc is None and record.status == "skipped" and record.error == "no CUDA device on this machine"
