"""The scale pieces: the timing pool and its cursor, what the timed batches touch, the operators a
backend runs, the roofline, access patterns, the full DLRM-v2 shape's memory estimates, and the
peak RSS of a job apart from what earlier jobs left."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench import hardware, registry
from bench.config.compose import compose
from bench.measure.working_set import access_profile, working_set_bytes
from bench.measure.operators import operators
from bench.config import DeviceConfig
from bench.devices import get as get_device
from bench.devices.cpu import VERSION
from bench.devices.roofline import roofline_metrics
from bench.measure.timing import time_module
from bench.models.dlrm import build_dlrm
from bench.runner import Session, run_one
from bench.pipeline.guard import memory_estimate
from bench.pipeline.job import backend_config
from bench.pipeline.shared import SharedWork
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from bench.workloads.access_patterns import (
    ZipfIds,
    expected_unique,
    feature_alphas,
    fit_alpha,
    zipf_probabilities,
)
from bench.workloads.workload import TableSpec
from bench.workloads.criteo_multihot import MLPERF_NUM_EMBEDDINGS

CPU = torch.device("cpu")


class Records(nn.Module):
    """Remembers which batch each call got."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, dense, sparse):
        self.seen.append(int(dense[0, 0]))
        return dense[:, :1]


def test_timing_cursor_runs_on_through_warmup_and_trials():
    batches = [(torch.full((4, 13), float(i)), None) for i in range(7)]
    module = Records()
    time_module(module, batches, 4, CPU, warmup_batches=2, trials=3, batches_per_trial=4)
    assert module.seen == [i % 7 for i in range(2 + 3 * 4)]  # every batch once before any repeats


@pytest.mark.slow
def test_timing_pool_holds_pool_samples_in_distinct_batches(tiny_cfg):
    work = SharedWork()
    cfg = tiny_cfg("timing.pool_samples=2048", "batch_size=512")
    workload = work.workload(cfg)
    pool = work.timing_inputs(cfg, workload, CPU)
    assert len(pool) == 4
    values = [kjt.values() for _, kjt in pool]
    assert not any(torch.equal(values[0], v) for v in values[1:])
    assert len(work.timing_inputs(tiny_cfg("timing.pool_samples=0", "batch_size=512"), workload, CPU)) == 2  # batches_per_trial
    assert len(work.timing_inputs(tiny_cfg("timing.pool_samples=1000000", "batch_size=512"), workload, CPU)) == 8192 // 512


def kjt(feature_ids: dict[str, list[int]], batch: int) -> KeyedJaggedTensor:
    keys = list(feature_ids)
    lengths = torch.tensor([len(feature_ids[k]) // batch for k in keys for _ in range(batch)])
    return KeyedJaggedTensor(keys=keys, values=torch.tensor([i for k in keys for i in feature_ids[k]]), lengths=lengths)


def test_access_profile_counts_what_the_pool_touches():
    tables = [TableSpec("t_a", "a", 100), TableSpec("t_b", "b", 10, pooling=2)]
    dense = torch.zeros(2, 13)
    pool = [
        (dense, kjt({"a": [1, 1], "b": [0, 1, 2, 2]}, 2)),
        (dense, kjt({"a": [1, 5], "b": [3, 3, 3, 3]}, 2)),
    ]
    p = access_profile(pool, tables)
    assert (p["pool_batches"], p["pool_samples"]) == (2, 4)
    a, b = p["tables"]["t_a"], p["tables"]["t_b"]
    assert a == {"lookups_per_sample": 1.0, "unique_ids_per_batch": 1.5, "distinct_rows": 2, "rows_touched_fraction": 0.02}
    assert b == {"lookups_per_sample": 2.0, "unique_ids_per_batch": 2.0, "distinct_rows": 4, "rows_touched_fraction": 0.4}
    assert working_set_bytes(p, {"t_a": 36, "t_b": 256}) == 2 * 36 + 4 * 256


def test_access_profile_counts_each_batchs_distinct_ids_as_one_unique_per_batch_would():
    """The profile sorts (batch, id) pairs once per table; what it counts is each batch's own distinct ids."""
    g = torch.Generator().manual_seed(0)
    tables = [TableSpec("t_a", "a", 50), TableSpec("t_b", "b", 7, pooling=3)]
    pool = []
    for n in (5, 3, 5, 1):  # batches of several sizes, repeated ids within and across them
        ids = {"a": torch.randint(-2, 50, (n,), generator=g).tolist(), "side": list(range(2 * n)),  # a key no table reads
               "b": torch.randint(0, 7, (3 * n,), generator=g).tolist()}
        pool.append((torch.zeros(n, 13), kjt(ids, n)))
    p = access_profile(pool, tables)
    for t in tables:
        per_batch = [k[t.feature].values() for _, k in pool]
        assert p["tables"][t.name]["unique_ids_per_batch"] == sum(int(torch.unique(i).numel()) for i in per_batch) / len(pool)
        assert p["tables"][t.name]["distinct_rows"] == int(torch.unique(torch.cat(per_batch)).numel())


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), tiny_tables(4, 1000), 13).eval()


def test_operators_name_the_kernels_and_count_the_flops(tiny_model):
    batch = random_batch(tiny_tables(4, 1000), 64)
    # bottom 13-16-16, over (16 + 4*5/2=10 pairs) 26-16-1, interaction bmm 5x16 @ 16x5 per sample
    flops = 2 * (13 * 16 + 16 * 16 + 26 * 16 + 16 * 1) + 2 * 5 * 16 * 5
    fp32 = operators(tiny_model, batch.model_inputs())
    assert fp32.embedding == {"aten::embedding_bag.padding_idx"} and "aten::linear" in fp32.gemm
    assert fp32.as_metrics(64)["dense_flops_per_sample"] == flops
    uint4 = registry.get("backend", "uint4").factory(backend_config({"name": "uint4"})).prepare(tiny_model, [batch], CPU)
    ops = operators(uint4, batch.model_inputs())
    assert ops.embedding == {"fbgemm::int_nbit_split_embedding_codegen_lookup_function"}
    # the hidden layers in int8; the 16 -> 1 output layer stays fp32 (backend.mlp_output's default)
    assert "quantized::linear_relu_dynamic" in ops.gemm and "aten::linear" in ops.gemm
    m = ops.as_metrics(64)
    assert m["dense_flops_per_sample"] == flops and m["dense_int8_fraction"] == pytest.approx(1 - (2 * 5 * 16 * 5 + 2 * 16) / flops)


def Limits(cache_dir, fingerprint):
    """The CPU's limits (bench.devices.cpu), as a CPU job reads them."""
    return get_device(DeviceConfig(type="cpu")).limits(cache_dir, fingerprint, torch.device("cpu"))


@pytest.mark.slow
def test_roofline_limits_are_measured_once_per_fingerprint(tmp_path):
    limits = Limits(tmp_path, "fp-test").ensure([8, 12], total_bytes=8 << 20)
    path = tmp_path / "roofline" / "fp-test.json"
    stamp = path.stat().st_mtime_ns
    again = Limits(tmp_path, "fp-test").ensure([12, 8])  # nothing missing: nothing measured or written
    assert path.stat().st_mtime_ns == stamp and again.gather(8) == limits.gather(8) > 0
    assert again.gemm("fp32") > 0 and again.gemm("int8") > 0 and again.write() > 0


def test_a_limits_file_from_before_the_write_limit_gets_it_and_keeps_its_gathers(tmp_path):
    path = tmp_path / "roofline" / "fp.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"version": VERSION, "fingerprint": "fp", "gather_bytes_per_s": {"8": 123.0},
                                "gemm_flops": {"fp32": 1e11, "int8": 4e11}}))  # fmt: skip
    limits = Limits(tmp_path, "fp").ensure([8], total_bytes=8 << 20)  # only the write is missing: only it is measured
    stored = json.loads(path.read_text())
    assert stored["write_bytes_per_s"] == limits.write() > 0
    assert stored["gather_bytes_per_s"] == {"8": 123.0} and stored["gemm_flops"] == {"fp32": 1e11, "int8": 4e11}


def test_roofline_shares(tmp_path):
    path = tmp_path / "roofline" / "fp.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"version": VERSION, "fingerprint": "fp", "gather_bytes_per_s": {"36": 1e9, "256": 4e9},
                                "write_bytes_per_s": 2e9, "gemm_flops": {"fp32": 1e11, "int8": 4e11}}))  # fmt: skip
    limits = Limits(tmp_path, "fp")
    # an unpooled lookup's floor: its 36 stored bytes gathered (36 ns at 1 GB/s) and a 2,048-byte row written (1,024 ns at 2 GB/s)
    assert limits.lookup_ns_per_row(36, 2048) == pytest.approx(36 + 1024) and limits.lookup_ns_per_row(36) == pytest.approx(36)
    m = roofline_metrics(1000.0, {"a": 2.0, "b": 1.0}, {"a": 36, "b": 256}, dense_flops=1e6, int8_fraction=0.5, limits=limits)
    assert m["embedding_bytes_per_sample"] == 2 * 36 + 256
    assert m["embedding_share"] == pytest.approx(1000 * (72 / 1e9 + 256 / 4e9))
    assert m["dense_share"] == pytest.approx(1000 * 1e6 * (0.5 / 1e11 + 0.5 / 4e11))
    assert m["limits"]["write_bytes_per_s"] == 2e9


@pytest.mark.slow
def test_a_gemm_limit_measured_too_low_is_raised_and_never_lowered(tmp_path):
    path = tmp_path / "roofline" / "fp.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"version": VERSION, "fingerprint": "fp", "gather_bytes_per_s": {},
                                "gemm_flops": {"fp32": 1.0, "int8": 1e30}}))  # fmt: skip  # one far too low, one out of reach
    raised = Limits(tmp_path, "fp").raise_gemm()
    assert 1.0 < raised.gemm("fp32") < 1e30 and raised.gemm("int8") == 1e30
    assert json.loads(path.read_text())["gemm_flops"] == raised.data["gemm_flops"]  # stored for the next job


# ------------------------------------------------------------------------------------ access


def test_expected_unique_agrees_with_draws():
    rng = np.random.default_rng(0)
    for rows, alpha in ((50_000, 1.1), (200_000, 0.6), (300_000, 0.0)):
        draws = [len(np.unique(rng.choice(rows, 4096, p=zipf_probabilities(rows, alpha)))) for _ in range(5)]
        assert expected_unique(alpha, rows, 4096) == pytest.approx(np.mean(draws), rel=0.03)


def test_fit_recovers_an_exponent():
    rows = 300_000
    target = {str(b): expected_unique(1.25, rows, b) for b in (256, 1024, 4096)}
    assert fit_alpha(target, rows) == pytest.approx(1.25, abs=0.01)


@pytest.mark.slow
def test_access_patterns_give_exponents():
    rows = [300_000] * 26
    assert feature_alphas("zipf", 1.1, rows) == [1.1] * 26
    assert feature_alphas("uniform", 1.1, rows) == [0.0] * 26
    criteo = feature_alphas("criteo", 1.1, rows)
    assert len(criteo) == 26 and len(set(criteo)) > 10 and all(0 <= a <= 4 for a in criteo)


def test_zipf_ids_without_per_row_arrays():
    ids = ZipfIds(40_000_000, 1.1, [0, 1])
    sample = ids.sample(np.random.default_rng(0), (100_000,))
    assert sample.min() >= 0 and sample.max() < 40_000_000
    values, counts = np.unique(sample, return_counts=True)
    assert values[counts.argmax()] == ids.offset  # rank 0 lands wherever the scramble puts it
    assert counts.max() > 5000  # about 8% of draws at alpha 1.1 over 40M rows
    uniform = ZipfIds(1000, 0.0, [0, 2]).sample(np.random.default_rng(1), (100_000,))
    assert len(np.unique(uniform)) == 1000 and np.bincount(uniform).max() < 160


@pytest.mark.slow
def test_uniform_access_in_the_synthetic_workload(tiny_cfg):
    cfg = tiny_cfg("workload=synthetic_scale", "model=scale", "workload.table_rows=5000", "workload.access=uniform")
    assert cfg.workload.tag is None  # the access and the table rows are axes of the row key (bench.results.key), not in the name
    batch = next(SharedWork().workload(cfg).batches("eval", 2048))
    unique = len(torch.unique(batch.sparse["cat_0"].values()))
    assert unique == pytest.approx(expected_unique(0.0, 5000, 2048), rel=0.03)


# --------------------------------------------------------------------------- DLRM-v2 at full size


def test_dlrm_v2_full_composes_untrained_with_the_mlperf_tables():
    cfg = compose(["model=dlrm_v2_full"])
    assert cfg.workload.name == "synthetic_ids" and list(cfg.workload.cardinalities) == MLPERF_NUM_EMBEDDINGS
    assert cfg.model.weights == "random" and cfg.model.embedding_dim == 128 and cfg.model.arch == "dlrm_dcn"
    assert list(cfg.model.over_arch_layer_sizes) == [1024, 1024, 512, 256, 1]


@pytest.mark.slow
@pytest.mark.parametrize("backend, tables_gb", [("uint4", 13.88), ("int2_tbe", 7.35), ("uint4_mixed", 14.15), ("int8_tbe", 27.0), ("fp32", 104.4)])
def test_dlrm_v2_full_memory_estimates(backend, tables_gb):
    cfg = compose(["model=dlrm_v2_full", f"backend={backend}"])
    work = SharedWork()
    estimate = memory_estimate(cfg, registry.get("backend", backend).factory(cfg.backend), work.workload(cfg), False, CPU)
    assert estimate.backend_tables_bytes / 1e9 == pytest.approx(tables_gb, rel=0.01)
    assert estimate.fp32_model_bytes < 0.2e9  # untrained: the model holds no tables
    if backend == "uint4":
        assert estimate.backend_tables_bytes == sum(MLPERF_NUM_EMBEDDINGS) * 68


@pytest.mark.slow
def test_dlrm_v2_full_fp32_is_skipped_with_its_estimate(tmp_path):
    available = hardware.mem_available_bytes()
    if available is None or available > 120e9:
        pytest.skip("this machine could hold the fp32 tables")
    record = run_one(compose(["model=dlrm_v2_full", "backend=fp32", "timing.calibrate=false", f"cache_dir={tmp_path}", f"reports_dir={tmp_path}"]))
    assert record.status == "skipped"
    assert "not enough host memory" in record.error and "104" in record.error


# ------------------------------------------------------------------------------ peak RSS per job


@pytest.mark.slow
def test_peak_rss_of_a_job_leaves_out_what_earlier_jobs_left(tiny_cfg):
    tables = 4 * 600_000 * 16 * 4  # 154 MB of fp32 tables
    big = ["workload.cardinalities=[600000,600000,600000,600000]", "workload.eval_samples=4096", "eval_batch_size=4096"]
    fresh = run_one(tiny_cfg(*big, "backend=fp32"), Session())
    if fresh.metrics["peak_rss_scope"] != "job":
        pytest.skip("the RSS high-water mark cannot be reset here")
    session = Session()
    first = run_one(tiny_cfg(*big, "backend=fp32_tbe"), session)  # its module (154 MB of TBE tables) stays held...
    after = run_one(tiny_cfg(*big, "backend=fp32"), session)  # ...until this job frees it before measuring
    assert first.status == after.status == "ok"
    assert after.metrics["peak_rss_bytes"] < fresh.metrics["peak_rss_bytes"] + tables / 2
    assert after.metrics["rss_start_bytes"] < first.metrics["peak_rss_bytes"] - tables


class Sleeps(nn.Module):
    """Waits without using the CPU, as a thread that is off its core does."""

    def forward(self, dense, sparse):
        import time

        time.sleep(0.003)
        return dense[:, :1]


def test_thread_cpu_clock_leaves_out_waiting():
    batch = [(torch.zeros(4, 13), None)]
    wall = time_module(Sleeps(), batch, 4, CPU, warmup_batches=1, trials=1, batches_per_trial=3)
    cpu = time_module(Sleeps(), batch, 4, CPU, warmup_batches=1, trials=1, batches_per_trial=3, clock="thread_cpu")
    assert min(wall.latency_ms[0]) >= 3.0 and max(cpu.latency_ms[0]) < 1.0


@pytest.mark.slow
def test_thread_cpu_clock_needs_one_thread(tiny_cfg):
    from bench.errors import UserError
    from bench.config.validation import check_values as validate

    validate(tiny_cfg("timing.clock=thread_cpu", "threads=1"))
    validate(tiny_cfg("timing.clock=thread_cpu"))  # no thread count given: the timing runs on one thread
    with pytest.raises(UserError, match="needs one thread, not threads=2"):
        validate(tiny_cfg("timing.clock=thread_cpu", "threads=2"))
    with pytest.raises(UserError, match="not timing.threads=2"):
        validate(tiny_cfg("timing.clock=thread_cpu", "timing.threads=2"))
    with pytest.raises(UserError, match="not a clock"):
        validate(tiny_cfg("timing.clock=sundial"))


def test_cli_summary_of_a_performance_only_record():
    from bench.report.summary import summary
    from bench.record import RunRecord

    metrics = {"accuracy": "performance only, no accuracy (untrained weights)", "throughput": 1819.0, "threads": 1,
               "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0}, "embedding_bytes": 13.9e9, "model_bytes": 13.9e9,
               "peak_rss_bytes": 15.1e9, "prepare_seconds": 232.6,
               "roofline": {"embedding_bytes_per_s": 2.6e7, "embedding_share": 0.011, "dense_share": 0.49}}  # fmt: skip
    text = summary(RunRecord("ok", "synthetic_ids", "uint4", "cpu", 2048, {}, "h", {}, metrics))
    assert "performance only, no accuracy" in text and "AUC" not in text
    assert "built in 232.6 s" in text and "1% of the gather roofline" in text and "49% of the GEMM roofline" in text
