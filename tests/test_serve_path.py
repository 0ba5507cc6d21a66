"""bench.serve.path: the serving function's batch times, the candidate's beside fp32's, with an injected clock."""

import numpy as np
import pytest
import torch

from bench.config import ServeConfig
from bench.serve.path import ServedTimes, packed, paired_served_times
from bench.serve.queries import QuerySet
from bench.workloads.random_batch import random_batch, tiny_tables


def queries_of(rows: int = 1200, pairs: int = 100) -> QuerySet:
    return QuerySet.from_eval([random_batch(tiny_tables(), rows, seed=1)], ServeConfig(fixed_pairs=pairs), seed=0)


def test_batches_are_packed_up_to_the_batchers_rows():
    queries = queries_of()
    rng = np.random.default_rng(0)
    for _ in range(20):
        taken = packed(queries, 350, rng)
        assert len(taken) == 3 and int(queries.sizes[taken].sum()) == 300
    assert len(packed(queries, 50, rng)) == 1  # a sample larger than the batcher still forms a batch alone


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_both_modules_serve_the_same_samples_in_alternating_order_and_each_gets_its_own_median():
    queries, clock = queries_of(), Clock()
    model = torch.nn.Linear(13, 1)
    calls = []

    def module_of(name: str, ms_per_row: float):
        def module(dense, sparse):  # predict hands (dense, kjt), as the SUT's workers do
            calls.append((name, tuple(dense[:, 0].tolist())))
            clock.now += ms_per_row * len(dense) / 1000
            return model(dense)
        return module

    t = paired_served_times(module_of("cand", 0.01), module_of("fp32", 0.03), queries, torch.device("cpu"), 350,
                            batches=4, clock=clock)
    assert (t.pairs, t.ms, t.fp32_ms) == pytest.approx((300.0, 3.0, 9.0))
    assert [n for n, _ in calls] == ["cand", "fp32", "fp32", "cand", "cand", "fp32", "fp32", "cand", "cand", "fp32"]
    assert all(calls[2 * k][1] == calls[2 * k + 1][1] for k in range(5))  # the same rows through both
    assert t.ms_after_other == pytest.approx(3.0) and t.residue() == pytest.approx(1.0)
    assert ServedTimes(300.0, 3.0, 9.0, 3.5, 9.0).as_metrics() == {"pairs": 300.0, "ms": 3.0, "fp32_ms": 9.0,
                                                                 "ms_after_other": 3.5, "fp32_ms_after_other": 9.0}


def test_a_module_slowed_by_the_others_leftover_work_is_timed_after_its_own_and_the_residue_shows_it():
    # the candidate leaves threads spinning: the next call (fp32's, right after it) takes 2x; fp32 leaves nothing
    queries, clock = queries_of(), Clock()
    model = torch.nn.Linear(13, 1)
    last = []

    def module_of(name: str, ms_per_row: float):
        def module(dense, sparse):
            slowed = 2.0 if name == "fp32" and last and last[-1] == "cand" else 1.0
            clock.now += slowed * ms_per_row * len(dense) / 1000
            last.append(name)
            return model(dense)
        return module

    t = paired_served_times(module_of("cand", 0.01), module_of("fp32", 0.03), queries, torch.device("cpu"), 350,
                            batches=6, clock=clock)
    assert (t.ms, t.fp32_ms) == pytest.approx((3.0, 9.0))  # each after its own: the ratio stays 3x, not 6x
    assert (t.ms_after_other, t.fp32_ms_after_other) == pytest.approx((3.0, 18.0))
    assert t.residue() == pytest.approx(2.0)
