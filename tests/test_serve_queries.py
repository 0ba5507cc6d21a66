"""The query set: the eval split cut into consecutive groups of pairs, every row in exactly one sample."""

import numpy as np
import pytest
import torch

from bench.batch import concat_batches, take_rows
from bench.config import MLPERF_PAIRS, ServeConfig
from bench.serve.queries import QuerySet, group_sizes
from bench.workloads.random_batch import random_batch, tiny_tables


def batches(n=3, size=300):
    return [random_batch(tiny_tables(pooling=2), size, seed=i) for i in range(n)]


def test_sizes_come_from_the_quantiles_and_cover_the_rows_exactly():
    sizes = group_sizes(ServeConfig(), 100_000, seed=0)
    assert sizes.sum() == 100_000
    assert set(sizes[:-1].tolist()) <= set(MLPERF_PAIRS)  # the last group holds what is left
    assert 230 < sizes.mean() < 310  # MLPerf's mean is 270


def test_sizes_follow_the_seed():
    a, b, c = (group_sizes(ServeConfig(), 20_000, seed=s) for s in (0, 0, 1))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_fixed_size_and_max_samples():
    assert group_sizes(ServeConfig(fixed_pairs=256), 1000, 0).tolist() == [256, 256, 256, 232]
    capped = group_sizes(ServeConfig(fixed_pairs=100, max_samples=3), 1000, 0)
    assert capped.tolist() == [100, 100, 100]


def test_concat_then_take_rows_gives_back_each_batch():
    parts = batches()
    whole = concat_batches(parts)
    assert len(whole) == 900
    second = take_rows(whole, torch.arange(300, 600))
    assert torch.equal(second.dense, parts[1].dense) and torch.equal(second.labels, parts[1].labels)
    for key in parts[1].sparse.keys():
        assert torch.equal(second.sparse[key].values(), parts[1].sparse[key].values())
        assert torch.equal(second.sparse[key].lengths(), parts[1].sparse[key].lengths())


def test_samples_are_consecutive_rows_of_the_eval_split():
    parts = batches()
    queries = QuerySet.from_eval(parts, ServeConfig(fixed_pairs=200, max_samples=2), seed=0)
    assert len(queries) == 2 and queries.pairs == 400 and len(queries.batch) == 400
    second = queries.inputs([1])
    assert torch.equal(second.dense, concat_batches(parts).dense[200:400])
    both = queries.inputs([1, 0])  # in the order asked
    assert torch.equal(both.labels[:200], second.labels)


def test_unknown_indices_are_refused():
    queries = QuerySet.from_eval(batches(1), ServeConfig(fixed_pairs=100), seed=0)
    queries.check_indices([0, 1, 2])
    with pytest.raises(IndexError, match="query set of 3"):
        queries.check_indices([3])


def seq_batches(requests=40, candidates=4, longest=24, per_batch=50):
    """synthetic_seq's eval rows, cut into batches that split requests across their edges as the workload's do."""
    from bench.workloads.sequence_batch import batches_of
    from bench.workloads.synthetic_seq import SeqTeacher, SyntheticSeqConfig

    cfg = SyntheticSeqConfig(candidates=candidates, history_length=longest, min_history=2, num_items=100)
    rows = SeqTeacher(cfg, seed=0).requests(np.random.default_rng(1), requests)
    return rows, list(batches_of([rows], per_batch))


def test_a_sequential_workload_is_cut_by_request_one_sample_per_request():
    from bench.workloads.sequence_batch import SEQUENCES

    rows, parts = seq_batches()
    queries = QuerySet.from_eval(parts, ServeConfig(), seed=0, sequences=SEQUENCES)
    assert len(queries) == 40 and queries.sizes.tolist() == [4] * 40 and queries.pairs == 160  # pairs_quantiles do not apply
    for i in (0, 12, 39):  # request 12's rows straddle the first batch edge (50 rows)
        sample = queries.inputs([i])
        assert sample.sparse["request"].values().tolist() == [i] * 4
        assert torch.equal(sample.labels, torch.from_numpy(rows.labels[4 * i:4 * i + 4]))
        assert queries.history[i] == rows.lengths[4 * i] == sample.sparse["history"].lengths()[0]
    described = queries.describe()
    assert described["sizes"] == "requests" and described["samples"] == 40
    assert described["history_min"] == rows.lengths.min() and described["history_max"] == rows.lengths.max()


def test_the_request_query_set_holds_varied_history_lengths_and_max_samples_caps_it():
    from bench.workloads.sequence_batch import SEQUENCES

    _, parts = seq_batches(requests=200)
    queries = QuerySet.from_eval(parts, ServeConfig(max_samples=150), seed=0, sequences=SEQUENCES)
    assert len(queries) == 150 and len(queries.batch) == 600
    assert queries.describe()["history_distinct"] >= 15  # lengths drawn uniformly from 2..24
    assert queries.history.min() <= 4 and queries.history.max() >= 22
