"""bench.serve.path: the served batch's extra over the offline-form call, timed with an injected clock."""

import numpy as np
import pytest
import torch

from bench.config import ServeConfig
from bench.serve.path import PathCost, packed, path_cost, path_times
from bench.serve.queries import QuerySet
from bench.workloads.random_batch import random_batch, tiny_tables


def queries_of(rows: int = 1200, pairs: int = 100) -> QuerySet:
    return QuerySet.from_eval([random_batch(tiny_tables(), rows, seed=1)], ServeConfig(fixed_pairs=pairs), seed=0)


def test_the_line_goes_through_each_sizes_median_and_clips_noise_below_zero():
    pairs = np.asarray([100, 100, 100, 400, 400, 400], dtype=float)
    extra = np.asarray([1.0, 1.2, 50.0, 2.5, 2.7, -3.0])  # one stall and one negative reading: neither moves a median
    cost = PathCost.fit(pairs, extra)
    assert cost.ms(100) == pytest.approx(1.2) and cost.ms(400) == pytest.approx(2.5)
    assert cost.ms_per_pair == pytest.approx(1.3 / 300) and cost.as_metrics()["ms_per_1000_pairs"] == pytest.approx(4.333, abs=1e-3)
    assert PathCost.fit(np.asarray([200.0]), np.asarray([2.0])) == PathCost(0.0, 0.01)  # one size: through the origin
    assert PathCost.fit(np.asarray([100.0, 400.0]), np.asarray([-1.0, -2.0])) == PathCost(0.0, 0.0)


def test_batches_are_packed_up_to_the_batchers_rows():
    queries = queries_of()
    rng = np.random.default_rng(0)
    for _ in range(20):
        taken = packed(queries, 350, rng)
        assert 1 <= len(taken) <= 3 and int(queries.sizes[taken].sum()) <= 350
    assert len(packed(queries, 50, rng)) == 1  # a sample larger than the batcher still forms a batch alone


class Clock:
    """Advances only when the module runs: `serve_ms` per call on a KJT (the served path), `offline_ms` per call on
    the offline form, so the measured extra is known exactly."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_extra_is_the_served_time_less_the_offline_forms_on_the_same_rows():
    queries, clock = queries_of(), Clock()
    model = torch.nn.Linear(13, 1)
    seen = []

    def module(dense, sparse=None):
        served = sparse is not None  # predict hands (dense, kjt); the offline form below hands dense alone
        seen.append((served, len(dense)))
        clock.now += (0.002 if served else 0.0005) + 1e-6 * len(dense) * (2 if served else 1)
        return model(dense)

    pairs, served, offline = path_times(module, lambda batch: (batch.dense,), queries, torch.device("cpu"), 350, batches=5, clock=clock)
    assert len(pairs) == 5 and all(p in (100, 200, 300) for p in pairs)
    np.testing.assert_allclose(served, 2.0 + 2e-3 * pairs)
    np.testing.assert_allclose(offline, 0.5 + 1e-3 * pairs)
    assert [s for s, _ in seen] == [True, False] * 6  # each batch served, then the same rows in the offline form
    assert all(seen[2 * k][1] == seen[2 * k + 1][1] for k in range(6))
    cost = path_cost(module, lambda batch: (batch.dense,), queries, torch.device("cpu"), [150, 350], batches=5, clock=clock)
    assert cost.intercept_ms == pytest.approx(1.5, abs=1e-6)  # one size of 100 pairs, the other's median of its batches
    assert cost.ms(100) == pytest.approx(1.5 + 1e-3 * 100, abs=1e-6)
