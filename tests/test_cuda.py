"""The CUDA paths: CUDA events, memory statistics, device placement. Skipped without a GPU."""

import pytest
import torch

from bench.measure.memory import PeakMemory
from bench.measure.timing import time_module
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def test_cuda_timing_and_peak_memory():
    device = torch.device("cuda")
    tables = tiny_tables()
    model = build_dlrm(tiny_model_config(), tables, 13).to(device).eval()
    inputs = [random_batch(tables, 256, seed=i).to(device).model_inputs() for i in range(2)]
    with PeakMemory(device) as peak:
        timing = time_module(model, inputs, 256, device, warmup_batches=2, trials=3, batches_per_trial=4)
    assert peak.cuda_peak_bytes and peak.cuda_peak_bytes > 0
    assert timing.throughput > 0 and len(timing.latency_ms) == 3


def test_cuda_run_records_gpu(tiny_cfg):
    from bench.runner import run_one

    record = run_one(tiny_cfg("device=cuda"))
    assert record.status == "ok", record.error
    assert record.env["gpu"] and record.metrics["cuda_peak_bytes"] > 0


@pytest.mark.parametrize("overrides", [
    ["backend=fp32", "sharding=row_wise"],  # DistributedModelParallel over a one-rank NCCL group
    ["backend=fp16_tbe", "sharding=table_wise"],  # quantized inference sharding on the GPU
])  # fmt: skip
def test_cuda_sharded_run_matches_the_unsharded_one(tiny_cfg, overrides):
    from bench.runner import run_one

    record = run_one(tiny_cfg("device=cuda", *overrides))
    assert record.status == "ok", record.error
    info = record.metrics["sharding"]
    assert info["auc_delta_unsharded"] == 0.0
    assert info["process_group"] in (None, "nccl")
