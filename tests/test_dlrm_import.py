"""facebookresearch/dlrm checkpoints -> torchrec DLRM, checked against a reference dlrm forward."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.adapters import batch_to_dlrm_tuple
from bench.errors import UserError
from bench.models.dlrm import build_dlrm
from bench.models.checkpoint import load_checkpoint
from bench.models.dlrm_import import convert_fb_dlrm_state_dict, is_fb_dlrm_state_dict
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables

D = 8


def _mlp(sizes, sigmoid_layer):
    layers = []
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.Sigmoid() if i == sigmoid_layer else nn.ReLU()]
    return nn.Sequential(*layers)


class FbDLRM(nn.Module):
    """The forward of facebookresearch/dlrm (sum EmbeddingBags, dot interaction without self)."""

    def __init__(self, tables):
        super().__init__()
        self.emb_l = nn.ModuleList([nn.EmbeddingBag(t.num_embeddings, D, mode="sum") for t in tables])
        self.n = len(tables) + 1
        self.bot_l = _mlp([13, 16, D], -1)
        self.top_l = _mlp([D + self.n * (self.n - 1) // 2, 16, 1], 1)

    def forward(self, X, lS_o, lS_i):
        x = self.bot_l(X)
        ly = [e(lS_i[k], lS_o[k]) for k, e in enumerate(self.emb_l)]
        T = torch.cat([x] + ly, dim=1).view(X.shape[0], -1, D)
        Z = torch.bmm(T, T.transpose(1, 2))
        li = torch.tensor([i for i in range(self.n) for j in range(i)])
        lj = torch.tensor([j for i in range(self.n) for j in range(i)])
        return self.top_l(torch.cat([x, Z[:, li, lj]], dim=1))


@pytest.fixture
def setup():
    torch.manual_seed(0)
    tables = tiny_tables(4)
    fb = FbDLRM(tables).eval()
    for p in fb.parameters():
        nn.init.normal_(p, std=0.3)
    model = build_dlrm(tiny_model_config(D), tables, 13).eval()
    return tables, fb, model


def test_matches_reference_forward(setup, tmp_path):
    tables, fb, model = setup
    sd = fb.state_dict()
    assert is_fb_dlrm_state_dict(sd) and "top_l.2.weight" in sd and "top_l.1.weight" not in sd
    torch.save({"epoch": 3, "state_dict": sd}, tmp_path / "dlrm.pt")
    load_checkpoint(model, tmp_path / "dlrm.pt")  # the loader of model.checkpoint=PATH maps dlrm's keys
    batch = random_batch(tables, 64, seed=1)
    X, lS_o, lS_i, _ = batch_to_dlrm_tuple(batch)
    with torch.no_grad():
        expected = fb(X, lS_o, lS_i).reshape(-1)
        got = torch.sigmoid(model(batch.dense, batch.sparse)).reshape(-1)
    assert torch.allclose(got, expected, atol=1e-6)
    # without the interaction permutation the outputs differ: the permutation is doing work
    plain = {k: v.clone() for k, v in convert_fb_dlrm_state_dict(sd, model).items()}
    plain["over_arch.model.0._mlp.0._linear.weight"] = sd["top_l.0.weight"]
    model.load_state_dict(plain)
    with torch.no_grad():
        assert not torch.allclose(torch.sigmoid(model(batch.dense, batch.sparse)).reshape(-1), expected, atol=1e-4)


def test_shape_mismatch_is_one_line_user_error(setup):
    tables, fb, model = setup
    sd = dict(fb.state_dict())
    sd["emb_l.2.weight"] = torch.zeros(5, D)
    with pytest.raises(UserError) as err:
        convert_fb_dlrm_state_dict(sd, model)
    assert "table t_cat_2 has 5 rows, the workload gives 114" in str(err.value) and "\n" not in str(err.value)
    assert "workload.categorical=first_seen" in str(err.value)  # how to number raw rows as dlrm did
    sd = dict(fb.state_dict())
    sd["emb_l.2.weight"] = torch.zeros(114, D + 1)
    with pytest.raises(UserError, match=r"t_cat_2.weight has shape \(114, 9\)"):
        convert_fb_dlrm_state_dict(sd, model)
    sd = dict(fb.state_dict())
    sd["emb_l.9.weight"] = torch.zeros(5, D)
    with pytest.raises(UserError, match="5 embedding tables"):
        convert_fb_dlrm_state_dict(sd, model)
    sd = dict(fb.state_dict())
    sd["bot_l.1.weight"] = torch.zeros(1)
    with pytest.raises(UserError, match="even indices"):
        convert_fb_dlrm_state_dict(sd, model)
