"""The `ps_redis` backend end to end, against real redis-servers on loopback (never a mock): scores
equal to the in-memory backend of the same row precision (exactly), the record's PS metrics, and the
faults: an unreachable server, a server killed mid-job, and no server outliving its job (Ctrl-C and
SIGKILL of the job's process group included)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import registry
from bench.backends.ps_redis import PsRedisBackend
from bench.models.dlrm import build_dlrm
from bench.backends.paramserver import server as ps_server
from bench.backends.paramserver.server import free_port
from bench.runner import run_job
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.conftest import REPO
from tests.redis_procs import gone, redis_children, wait_until
from tests.support.signals import sigint_at_default
from tests.test_faults import FAST, fast_cfg, fast_models, multirun  # noqa: F401 - fixtures

CPU = torch.device("cpu")


def backend(name, **fields):
    entry = registry.get("backend", name)
    cfg = entry.config()
    for key, value in fields.items():
        setattr(cfg, key, value)
    return entry.factory(cfg)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    tables = tiny_tables(pooling=3, rows=200)
    model = build_dlrm(tiny_model_config(8), tables, num_dense=13).eval()
    return tables, model, [random_batch(tables, 64, seed=1)]


@pytest.mark.parametrize(
    "precision,twin,policy",
    [("fp32", "fp32", "lru"), ("int4", "uint4", "lru"), ("int8", "int8_tbe", "lfu"), ("int4", "uint4", "lfu")],
)
@pytest.mark.slow
def test_scores_equal_the_in_memory_backend_bit_for_bit(tiny, precision, twin, policy):
    """A cache of 5 rows per table: every batch evicts, stages rows past the cache and grows the slot tables."""
    tables, model, calibration = tiny
    reference = backend(twin, **({"row_range": "minmax"} if twin != "fp32" else {})).prepare(model, calibration, CPU)  # Redis holds min-max rows
    ps = backend("ps_redis", precision=precision, cache_rows=5, cache_policy=policy)
    prepared = ps.prepare(model, calibration, CPU)
    try:
        with torch.inference_mode():
            for seed in (10, 11, 10, 12):  # a repeated batch hits the cache
                batch = random_batch(tables, 97, seed=seed)
                assert torch.equal(prepared(batch.dense, batch.sparse), reference(batch.dense, batch.sparse))
        stats = prepared.calls
        assert any(c.staged for c in stats) and any(c.hits for c in stats)
    finally:
        ps.close()
    assert prepared.server is None and gone(ps_server.started_pids)


@pytest.mark.slow
def test_a_run_is_ok_with_the_auc_of_fp32_exactly_and_ps_metrics(fast_cfg):
    base = run_job(fast_cfg())[0]
    record, exc = run_job(fast_cfg("backend=ps_redis", "backend.cache_fraction=0.1"))
    assert exc is None and record.status == "ok", record.error
    m = record.metrics
    assert record.backend == "ps_redis[fp32 10%]"
    assert m["auc"] == base.metrics["auc"] and m["auc_delta"] == 0.0  # identical scores, not close ones
    assert m["ps_twin"] == "fp32" and m["ps_private_server"] is True
    assert 0 <= m["ps_hit_rate_warmup"] <= m["ps_hit_rate_steady"] <= 1
    assert m["ps_calls_warmup"] == 1 and m["ps_calls_steady"] >= 4  # FAST: 1 warm-up batch, 2 trials x 2
    assert m["ps_rows_stored"] == 200 and m["ps_redis_used_memory_bytes"] > m["ps_bytes_stored"] > 0
    assert m["ps_pull_rows_per_s"] > 0 and 0 < m["ps_pull_share"] < 1
    assert len(m["ps_samples"]["hit_rate"]) == m["ps_calls_warmup"] + m["ps_calls_steady"]
    assert gone(ps_server.started_pids), "a private redis-server outlived its job"


@pytest.mark.slow
def test_int4_rows_score_as_uint4(fast_cfg):
    uint4 = run_job(fast_cfg("backend=uint4", "backend.row_range=minmax"))[0]  # Redis holds FBGEMM's min-max rows
    record = run_job(fast_cfg("backend=ps_redis", "backend.precision=int4", "backend.cache_fraction=0.01"))[0]
    assert record.status == "ok", record.error
    assert record.metrics["auc"] == uint4.metrics["auc"] and record.metrics["ps_twin"] == "uint4"
    assert record.metrics["fidelity_gap"] == uint4.metrics["fidelity_gap"]  # the same fake_quant twin
    assert gone(ps_server.started_pids)


@pytest.mark.slow
def test_an_unreachable_server_is_one_line_exit_2_and_an_error_record(fast_cfg, monkeypatch, tmp_path, capsys):
    url = f"redis://127.0.0.1:{free_port()}/0?prefix=m"
    record, exc = run_job(fast_cfg("backend=ps_redis", f"backend.url='{url}'"))
    assert record.status == "error" and "cannot reach the Redis server at" in record.error and "\n" not in record.error
    code = multirun(monkeypatch, ["backend=ps_redis", f"backend.url='{url}'", *FAST, f"cache_dir={tmp_path / 'cache'}",
                                  f"reports_dir={tmp_path / 'r'}", f"hydra.run.dir={tmp_path / 'run'}"])  # fmt: skip
    assert code == 2 and "error: cannot reach the Redis server" in capsys.readouterr().err


@pytest.mark.slow
def test_a_server_killed_mid_job_is_an_error_record_and_the_sweep_goes_on(fast_cfg, monkeypatch, tmp_path, capsys):
    fast_cfg()  # the trained model, copied into tmp_path/cache
    original = PsRedisBackend.before_timing
    killed = []

    def kill_first_server(self, prepared, warmup_calls):
        original(self, prepared, warmup_calls)
        if not killed:
            killed.append(prepared.server.pid)
            os.kill(prepared.server.pid, signal.SIGKILL)

    monkeypatch.setattr(PsRedisBackend, "before_timing", kill_first_server)
    sweep_dir = tmp_path / "multirun"
    code = multirun(
        monkeypatch,
        ["+sweep=ps", "+ps_case=fp32_rows_1pct,fp32_rows_100pct", *FAST, "batch_size=256", f"cache_dir={tmp_path / 'cache'}",
         f"reports_dir={tmp_path / 'reports'}", f"hydra.sweep.dir={sweep_dir}"],  # fmt: skip
    )
    assert code == 1  # a sweep with an errored job exits 1 (issue 32), and still writes its report
    records = {r["backend"]: r for r in (json.loads(p.read_text()) for p in sweep_dir.glob("*/record.json"))}
    assert {b: r["status"] for b, r in records.items()} == {"ps_redis[fp32 1%]": "error", "ps_redis[fp32 100%]": "ok"}
    assert records["ps_redis[fp32 1%]"]["error"].startswith("ConnectionError: ")
    out = capsys.readouterr().out
    assert "2 jobs (1 ok, 1 error, 0 skipped)" in out
    assert gone(killed) and gone(ps_server.started_pids), "no redis-server may outlive the sweep"
    latest = Path(re.search(r"^report: (.+)$", out, re.M).group(1)).parent  # latest-<overrides>: the cases were chosen
    report = (latest / "report.md").read_text()
    assert "Parameter server (`ps_redis`)" in report and "ps_redis[fp32 100%]" in report
    assert "ConnectionError" in report and (latest / "ps_cache_synthetic_cpu.png").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigkill-group"])
def test_no_server_outlives_a_job_stopped_by_ctrl_c_or_sigkill(fast_cfg, tmp_path, how):
    """A real `python -m bench` run in its own process group, stopped while it times with a live server."""
    fast_cfg()
    args = [sys.executable, "-m", "bench", "backend=ps_redis", *FAST, f"cache_dir={tmp_path / 'cache'}",
            f"reports_dir={tmp_path / 'r'}", f"hydra.run.dir={tmp_path / 'run'}",
            "timing.trials=1000", "timing.min_trial_seconds=5"]  # fmt: skip  # times for minutes unless stopped
    with sigint_at_default():
        job = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert wait_until(lambda: redis_children(job.pid), timeout=120), "the job never started its server"
        servers = redis_children(job.pid)
        os.killpg(job.pid, signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
        job.wait(timeout=60)
        assert wait_until(lambda: gone(servers), timeout=10), f"redis-server outlived its job ({how})"
        if how == "ctrl-c":
            assert job.returncode == 130 and "interrupted" in job.stderr.read()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


def test_keys_of_other_collections_pass_through_untouched():
    """A KJT key this collection does not serve keeps its values (a model with several collections)."""
    from bench.models.dlrm import embedding_bag_collection
    from bench.backends.paramserver.module import CacheSpec, PsEmbeddingBagCollection, PsModel

    torch.manual_seed(0)
    tables = tiny_tables(num_tables=3, rows=40, pooling=2)
    ebc = embedding_bag_collection(tables[:2], 8).eval()
    batch = random_batch(tables, 33, seed=3)  # carries cat_2, which `ebc` does not serve
    ps = PsEmbeddingBagCollection(ebc, "fp32", CacheSpec(rows=4), CPU)
    weights = {n: b.weight for n, b in ebc.embedding_bags.items()}
    holder = PsModel(ps, [ps], weights, url=None, timeout_s=5)
    try:
        with torch.inference_mode():
            got, want = holder(batch.sparse), ebc(batch.sparse)
        assert got.keys() == want.keys() and torch.equal(got.values(), want.values())
    finally:
        holder.close()
