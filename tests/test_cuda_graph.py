"""bench.measure.cuda_graph: the padded fixed-shape call scores every sample as the plain call does (CPU, eagerly),
an overflowing call is caught, and (on CUDA) the recorded graph's replays agree with the plain call."""

from __future__ import annotations

import copy

import pytest
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.backends import tbe
from bench.measure.cuda_graph import ALIGN_IDS, CapacityExceeded, GraphedModule, StaticInputs, capacity_for
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import tiny_model_config, tiny_tables

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=3, rows=50, pooling=3)
BATCH = 16


def varied_batch(seed: int, most: int = 4, batch: int = BATCH, device: torch.device = CPU) -> tuple[torch.Tensor, KeyedJaggedTensor]:
    """Dense features and a KJT whose bags hold 0..`most` ids each (different per sample and feature)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, most + 1, (len(TABLES) * batch,), generator=g)
    values = torch.cat([torch.randint(0, t.num_embeddings, (int(n),), generator=g)
                        for t, n in zip(TABLES, lengths.view(len(TABLES), batch).sum(1))])
    kjt = KeyedJaggedTensor(keys=[t.feature for t in TABLES], values=values.to(device), lengths=lengths.to(device), stride=batch)
    return torch.randn(batch, 13, generator=g).to(device), kjt


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()


def test_capacity_covers_the_batch_s_widest_bag_for_every_sample_and_the_spare_one():
    lengths = torch.tensor([1, 3, 2, 0, 0, 1])  # 3 keys x 2 samples, key-major
    assert capacity_for(lengths, 3, 2) == ALIGN_IDS  # 3 x 2 + 1 ids, rounded up
    assert capacity_for(torch.full((2 * 100,), 1), 2, 100) == 128
    assert capacity_for(torch.zeros(4, dtype=torch.int64), 2, 2) == ALIGN_IDS


def test_static_inputs_lay_each_feature_s_ids_in_its_segment_and_give_the_rest_to_the_spare_sample():
    dense, kjt = varied_batch(1)
    static = StaticInputs(kjt.keys(), BATCH, tuple(dense.shape), dense.dtype, ALIGN_IDS, CPU)
    static.fill(dense, kjt)
    padded = static.kjt()
    assert padded.stride() == BATCH + 1 and padded.length_per_key() == [ALIGN_IDS] * len(TABLES)
    for key in kjt.keys():
        got, want = padded[key], kjt[key]
        assert torch.equal(got.lengths()[:BATCH], want.lengths())
        assert int(got.lengths().sum()) == ALIGN_IDS  # the spare sample takes the segment's rest
        assert torch.equal(got.values()[: want.values().numel()], want.values())
    assert torch.equal(static.dense[:BATCH], dense) and not bool(static.overflow)


@pytest.mark.parametrize("backend", ["fp32", "int8", "int2"])
def test_the_padded_call_scores_every_sample_as_the_plain_call(model, backend):
    prepared = copy.deepcopy(model)
    if backend != "fp32":
        tbe.quantize_tables(prepared, {t.name: backend for t in TABLES}, CPU)
    graphed = GraphedModule(prepared, record=False)
    with torch.inference_mode():
        for seed in range(4):  # later calls reuse the first call's buffers (and a stale KJT would show here)
            dense, kjt = varied_batch(seed, most=3 if seed else 4)
            torch.testing.assert_close(graphed(dense, kjt), prepared(dense, kjt), rtol=1e-5, atol=1e-6)
    graphed.check()


def test_a_call_with_more_ids_than_the_recorded_capacity_is_caught(model):
    graphed = GraphedModule(model, record=False)
    with torch.inference_mode():
        graphed(*varied_batch(0, most=1))
        capacity = graphed.static.capacity
        graphed(*varied_batch(1, most=capacity))  # far more ids per feature than the first batch had
    with pytest.raises(CapacityExceeded, match="capacity"):
        graphed.check()


def test_a_graph_refuses_a_call_of_another_batch_size(model):
    graphed = GraphedModule(model, record=False)
    with torch.inference_mode():
        graphed(*varied_batch(0))
        with pytest.raises(ValueError, match="recorded for 16 samples"):
            graphed(*varied_batch(1, batch=8))


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["fp32", "int8", "int4"])
def test_the_recorded_graph_replays_the_plain_call_on_cuda(model, backend):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from tests.support.backends import make_backend

    cuda = torch.device("cuda")
    name = {"fp32": "fp32", "int8": "int8_tbe", "int4": "uint4"}[backend]
    prepared = make_backend(name).prepare(model, [], cuda) if backend != "fp32" else copy.deepcopy(model).to(cuda)
    graphed = GraphedModule(prepared)
    with torch.inference_mode():
        for seed in range(4):
            dense, kjt = varied_batch(seed, most=3 if seed else 4, device=cuda)
            torch.testing.assert_close(graphed(dense, kjt), prepared(dense, kjt), rtol=1e-3, atol=1e-4)
    assert graphed.graph is not None
    graphed.check()


# ---------------------------------------------------------------------------------- the job's step (timing.cuda_graphs)
def _timing_cfg(tiny_cfg):
    return tiny_cfg("timing.cuda_graphs=true", "timing.trials=2", "timing.max_rounds=2", "timing.batches_per_trial=2",
                    "timing.min_trial_seconds=0", "timing.warmup_batches=1", f"batch_size={BATCH}")


def test_the_job_step_times_the_padded_calls_paired_and_records_both_figures(model, tiny_cfg):
    from bench.metrics import CUDA_GRAPH_NOTE, CUDA_GRAPH_SPEEDUP, CUDA_GRAPH_THROUGHPUT, hi, lo
    from bench.pipeline.job import time_graphed

    cfg = _timing_cfg(tiny_cfg)
    candidate = copy.deepcopy(model)
    tbe.quantize_tables(candidate, {t.name: "int8" for t in TABLES}, CPU)
    inputs = [varied_batch(seed, most=2) for seed in range(3)]
    out = time_graphed(cfg, candidate, model, inputs, CPU, {}, record=False)
    assert CUDA_GRAPH_NOTE not in out and out[CUDA_GRAPH_THROUGHPUT] > 0
    assert 0 < out[lo(CUDA_GRAPH_SPEEDUP)] <= out[CUDA_GRAPH_SPEEDUP] <= out[hi(CUDA_GRAPH_SPEEDUP)]
    alone = time_graphed(cfg, candidate, None, inputs, CPU, {}, record=False)
    assert alone[CUDA_GRAPH_THROUGHPUT] > 0 and CUDA_GRAPH_SPEEDUP not in alone


def test_a_timing_batch_past_the_graph_s_capacity_leaves_a_note_not_a_figure(model, tiny_cfg):
    from bench.metrics import CUDA_GRAPH_NOTE, CUDA_GRAPH_THROUGHPUT
    from bench.pipeline.job import time_graphed

    inputs = [varied_batch(0, most=1), varied_batch(1, most=200)]  # the second holds far more ids than the first
    out = time_graphed(_timing_cfg(tiny_cfg), model, None, inputs, CPU, {}, record=False)
    assert CUDA_GRAPH_THROUGHPUT not in out and out[CUDA_GRAPH_NOTE].startswith("not recorded: a call held more than")


@pytest.mark.slow
def test_a_cpu_job_with_cuda_graphs_records_why_there_is_no_graphed_figure(tiny_cfg):
    from bench.metrics import CUDA_GRAPH_NOTE, CUDA_GRAPH_THROUGHPUT
    from bench.pipeline.job import measure
    from bench.pipeline.shared import SharedWork
    from tests.support.backends import make_backend

    cfg = _timing_cfg(tiny_cfg)
    metrics = measure(cfg, make_backend("int8_tbe"), CPU, SharedWork())
    assert metrics[CUDA_GRAPH_NOTE] == "a cpu job: CUDA graphs replay GPU work only" and CUDA_GRAPH_THROUGHPUT not in metrics


def test_a_job_that_leaves_cuda_graphs_off_keeps_the_identity_of_records_made_before_the_key():
    import dataclasses

    from bench.config.compose import compose
    from bench.runner import job_hash

    resolved = dataclasses.asdict(compose(["+preset=tiny"]))
    stored_before = {**resolved, "timing": {k: v for k, v in resolved["timing"].items() if k != "cuda_graphs"}}
    assert job_hash(resolved) == job_hash(stored_before)
    graphed = dataclasses.asdict(compose(["+preset=tiny", "timing.cuda_graphs=true"]))
    assert job_hash(graphed) != job_hash(resolved)  # a second, graphed timing: a new measurement
