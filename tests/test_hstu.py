"""model=hstu: its attention against generative-recommenders' PyTorch reference, M-FALCON, and the model's contract."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.batch import take_rows
from bench.config import HstuConfig, ModelConfig
from bench.errors import UserError
from bench.models.build import build_model
from bench.models.hstu import attention_mask, hstu_attention
from bench.workloads.synthetic_seq import SyntheticSeqConfig, SyntheticSeqWorkload

FIXTURE = Path(__file__).parent / "fixtures" / "hstu_attention.pt"  # benchmarks/scripts/hstu_reference_fixture.py


def _padded(values: torch.Tensor, offsets: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros(len(offsets) - 1, n, *values.shape[1:], dtype=values.dtype)
    for g in range(len(offsets) - 1):
        out[g, : offsets[g + 1] - offsets[g]] = values[offsets[g]: offsets[g + 1]]
    return out


@pytest.mark.parametrize("case", ["targets", "causal"])
def test_attention_equals_the_reference(case):
    """The reference's own outputs (pytorch_hstu_mha, run on these inputs by the fixture script) to 1e-5."""
    f = torch.load(FIXTURE, weights_only=True)
    offsets, n = f["seq_offsets"], f["max_seq_len"]
    lengths = offsets[1:] - offsets[:-1]
    targets = f["cases"][case]["num_targets"]
    targets = torch.zeros_like(lengths) if targets is None else targets
    out = hstu_attention(_padded(f["q"], offsets, n), _padded(f["k"], offsets, n), _padded(f["v"], offsets, n), lengths, targets,
                         f["alpha"], n)
    jagged = torch.cat([out[g, : lengths[g]] for g in range(len(lengths))])
    expected = f["cases"][case]["output"]
    assert jagged.shape == expected.shape
    torch.testing.assert_close(jagged, expected, atol=1e-5, rtol=1e-5)
    assert expected.abs().max() > 1e-3  # not a trivially zero output


def test_m_falcon_mask():
    """Two history positions and three candidates: each candidate reads the history and itself only."""
    mask = attention_mask(torch.tensor([5]), torch.tensor([3]), 6)[0].int()
    assert mask[:5, :5].tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 0, 1]]


def _tiny():
    workload = SyntheticSeqWorkload(SyntheticSeqConfig(train_samples=512, eval_samples=256, history_length=6, candidates=4,
                                                       num_items=40, num_categories=4, num_users=30), 0, "/tmp")
    cfg = ModelConfig(name="hstu", arch="hstu", embedding_dim=8, hstu=HstuConfig(num_layers=2, num_heads=2, attention_dim=4, linear_dim=4))
    torch.manual_seed(0)
    return workload, build_model(cfg, workload.tables, workload.num_dense, sequences=workload.sequences).eval()


def test_a_rows_score_does_not_depend_on_the_other_candidates():
    workload, model = _tiny()
    batch = next(iter(workload.batches("eval", 32)))
    with torch.no_grad():
        full = model(*batch.model_inputs())
        rows = torch.tensor([1, 2, 9, 30])  # some candidates of requests 0, 2 and 7, the others left out
        part = model(*take_rows(batch, rows).model_inputs())
    torch.testing.assert_close(part, full[rows], atol=1e-6, rtol=1e-5)
    assert full.shape == (32,) and full.std() > 0


def test_history_and_timestamps_reach_the_score():
    workload, model = _tiny()
    batch = next(iter(workload.batches("eval", 8)))
    kjt = batch.sparse
    with torch.no_grad():
        base = model(batch.dense, kjt)
        older = dict(kjt.to_dict())
        ages = older["history_age"]
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        shifted = KeyedJaggedTensor.from_jt_dict({**older, "history_age": type(ages)(values=ages.values() * 50, lengths=ages.lengths())})
        assert not torch.allclose(model(batch.dense, shifted), base)


def test_hstu_needs_a_sequential_workload():
    cfg = ModelConfig(name="hstu", arch="hstu", hstu=HstuConfig())
    workload, _ = _tiny()
    with pytest.raises(UserError, match="sequential workload"):
        build_model(cfg, workload.tables, workload.num_dense, sequences=None)
    with pytest.raises(UserError, match="model.hstu.num_heads"):
        build_model(ModelConfig(name="hstu", arch="hstu", hstu=HstuConfig(num_heads=0)), workload.tables, 2, sequences=workload.sequences)


def test_a_dlrm_refuses_sequence_features():
    workload, _ = _tiny()
    with pytest.raises(UserError, match="are sequences: use model=hstu"):
        build_model(ModelConfig(name="small", embedding_dim=16), workload.tables, workload.num_dense)
