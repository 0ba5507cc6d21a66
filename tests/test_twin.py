"""The exported twin (bench.backends.twin) scores as the model does, on the workload's eval batches and on
variable-length multi-hot bags, for the built-in DLRMs and a user's model (examples/two_tower.py); what it
cannot express is NotApplicable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench import registry
from bench.backends.backend import NotApplicable
from bench.backends.twin import build_twin
from bench.batch import Batch
from bench.config.compose import compose
from bench.models.dlrm import build_dlrm, embedding_bag_collection
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from examples.two_tower import build as two_tower


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    cfg = compose(["+preset=tiny", "workload.eval_samples=2048"])
    return registry.get("workload", cfg.workload.name).factory(cfg.workload, cfg.seed, Path(tmp_path_factory.mktemp("cache")))


def ragged_batch(tables, batch_size: int, seed: int) -> Batch:
    """Bags of 0 to 4 ids: the twin pads them to the longest with its zero row."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 5, (len(tables) * batch_size,), generator=g)
    values = torch.cat([torch.randint(0, t.num_embeddings, (int(n),), generator=g)
                        for t, n in zip(tables, lengths.view(len(tables), batch_size).sum(1))])
    sparse = KeyedJaggedTensor.from_lengths_sync(keys=[t.feature for t in tables], values=values, lengths=lengths)
    return Batch(dense=torch.randn(batch_size, 13, generator=g), sparse=sparse, labels=torch.zeros(batch_size))


def assert_same_scores(model, batches) -> None:
    twin = build_twin(model, batches[0])
    with torch.inference_mode():
        for batch in batches:
            want = model(batch.dense, batch.sparse)
            got = twin(*twin.inputs(batch.dense, batch.sparse))
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["dlrm", "dlrm_dcn"])
def test_dlrm_twin_scores_as_the_model(arch, workload):
    torch.manual_seed(0)
    model_cfg = compose(["+preset=tiny", f"model.arch={arch}"]).model
    model = build_dlrm(model_cfg, workload.tables, workload.num_dense).eval()
    batches = list(workload.batches("eval", 512))
    assert len(batches) == 4
    assert_same_scores(model, batches)
    assert_same_scores(model, [ragged_batch(workload.tables, 64, seed) for seed in range(3)])


def test_two_tower_twin_scores_as_the_model(workload):
    torch.manual_seed(0)
    model = two_tower(embedding_bag_collection(workload.tables, 8), workload.num_dense,
                      item_features=[t.feature for t in workload.tables[:2]]).eval()
    assert_same_scores(model, list(workload.batches("eval", 512)))
    assert_same_scores(model, [ragged_batch(workload.tables, 64, seed) for seed in range(3)])


def test_twin_keeps_the_model_and_pads_with_a_zero_row():
    tables = tiny_tables()
    model = build_dlrm(tiny_model_config(8), tables, num_dense=13).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = ragged_batch(tables, 16, seed=1)
    twin = build_twin(model, batch)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    dense, *ids = twin.inputs(batch.dense, batch.sparse)
    assert twin.input_names() == ["dense", *(t.feature for t in tables)]
    for t, m in zip(tables, ids):
        assert m.dtype == torch.int64 and m.is_contiguous()
        pad = twin.pads[t.feature]
        assert pad == t.num_embeddings
        assert m.shape[1] == int(batch.sparse[t.feature].lengths().max())
        assert int((m != pad).sum()) == int(batch.sparse[t.feature].lengths().sum())


class ReadsTheKjt(nn.Module):
    """A forward that reads the KJT's lengths itself: the twin cannot stand in for that."""

    def __init__(self, ebc):
        super().__init__()
        self.ebc = ebc
        self.out = nn.Linear(8 * len(ebc.embedding_bag_configs()) + 1, 1)

    def forward(self, dense, sparse):
        pooled = self.ebc(sparse).values()
        count = sparse.lengths().view(-1, dense.shape[0]).sum(0, keepdim=True).T.float()
        return self.out(torch.cat([pooled, count], dim=1))


def test_what_the_twin_cannot_express_is_not_applicable():
    tables = tiny_tables()
    batch = random_batch(tables, 8)
    with pytest.raises(NotApplicable, match="cannot run ReadsTheKjt's forward on dense ids"):
        build_twin(ReadsTheKjt(embedding_bag_collection(tables, 8)), batch)
    weighted = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name="t", embedding_dim=8, num_embeddings=10, feature_names=["cat_0"])],
                                      is_weighted=True)
    with pytest.raises(NotApplicable, match="no per-id weights"):
        build_twin(two_tower(weighted, 13, item_features=["cat_0"]), batch)
