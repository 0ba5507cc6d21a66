import numpy as np
import pytest
import torch

from bench.errors import UserError
from bench.workloads.synthetic import SyntheticConfig, SyntheticWorkload


def workload(seed=0, **kw):
    kw.setdefault("train_samples", 20_000)
    kw.setdefault("eval_samples", 50_000)
    kw.setdefault("chunk_size", 8192)
    return SyntheticWorkload(SyntheticConfig(**kw), seed, "/nonexistent")


@pytest.mark.slow
def test_criteo_shape():
    w = workload()
    batch = next(w.batches("eval", 256))
    assert batch.dense.shape == (256, 13) and batch.dense.dtype == torch.float32
    assert batch.sparse.keys() == [f"cat_{i}" for i in range(26)]
    assert len(w.tables) == 26 and batch.labels.shape == (256,)
    for t, jt in zip(w.tables, batch.sparse.to_dict().values()):
        assert int(jt.values().max()) < t.num_embeddings and int(jt.values().min()) >= 0


@pytest.mark.slow
def test_every_sample_exactly_once_across_chunk_boundaries():
    w = workload(eval_samples=20_000, chunk_size=3000)
    sizes = [len(b) for b in w.batches("eval", 2048)]
    assert sum(sizes) == 20_000 and sizes[:-1] == [2048] * (len(sizes) - 1) and sizes[-1] == 20_000 % 2048
    joined = torch.cat([b.dense for b in w.batches("eval", 2048)])
    direct = np.concatenate([c.dense for c in w.chunks("eval")])
    assert np.array_equal(joined.numpy(), direct)


@pytest.mark.slow
def test_deterministic_from_the_seed_and_chunks_independent():
    a, b, c = workload(seed=3), workload(seed=3), workload(seed=4)
    first_a, first_b, first_c = (next(w.batches("train", 512)) for w in (a, b, c))
    assert torch.equal(first_a.dense, first_b.dense) and torch.equal(first_a.sparse.values(), first_b.sparse.values())
    assert not torch.equal(first_a.dense, first_c.dense)
    # Chunk 2 is the same whether or not chunks 0 and 1 were generated first.
    assert np.array_equal(workload(seed=3).chunk("eval", 2).labels, a.chunk("eval", 2).labels)


@pytest.mark.slow
def test_splits_differ_and_calibration_is_the_head_of_train():
    w = workload()
    assert not torch.equal(next(w.batches("train", 256)).dense, next(w.batches("eval", 256)).dense)
    assert torch.equal(next(w.batches("train", 256)).dense, next(w.batches("calibration", 256)).dense)
    assert w.num_samples("calibration") == 16384


@pytest.mark.slow
def test_positive_rate_and_oracle_auc():
    w = workload(eval_samples=100_000)
    labels = np.concatenate([c.labels for c in w.chunks("eval")])
    assert abs(labels.mean() - 0.25) < 0.01
    assert 0.79 < w.oracle_auc() < 0.86


@pytest.mark.slow
def test_positive_rate_is_configurable():
    w = workload(positive_rate=0.1)
    labels = np.concatenate([c.labels for c in w.chunks("eval")])
    assert abs(labels.mean() - 0.1) < 0.01


@pytest.mark.slow
def test_zipf_ids_are_skewed():
    w = workload(eval_samples=50_000)
    ids = np.concatenate([c.ids[2][:, 0] for c in w.chunks("eval")])
    counts = np.sort(np.bincount(ids))[::-1]
    assert counts[:10].sum() > 0.15 * len(ids)  # a heavy head, as in click logs
    assert (counts > 0).sum() > 1000  # and a long tail


@pytest.mark.slow
def test_multi_hot_pooling():
    pooling = [1] * 24 + [3, 5]
    w = workload(pooling=pooling)
    batch = next(w.batches("eval", 64))
    lengths = batch.sparse.length_per_key()
    assert lengths[-2:] == [64 * 3, 64 * 5] and lengths[0] == 64
    assert [t.pooling for t in w.tables] == pooling


def test_bad_pooling_length_is_a_user_error():
    with pytest.raises(UserError, match="one per feature"):
        workload(pooling=[1, 2])
