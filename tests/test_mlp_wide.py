"""A Linear whose input holds a wide column beside narrow ones (`backend.mlp_wide`): found on the calibration batches,
kept fp32 or smoothed alike in the int8 backends and their fake-quant twin, named in the record, and the key keeps the
identity of the jobs it does not change."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys

import pytest
import torch
import torch.ao.nn.intrinsic as nni
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from bench.backends import linear
from bench.config.compose import compose
from bench.errors import UserError
from bench.runner import job_hash
from bench.workloads.random_batch import random_batch, tiny_tables
from tests.support.backends import make_backend as make

CPU = torch.device("cpu")
TABLES = tiny_tables(num_tables=4, rows=60, pooling=3)
DIM = 8


class Planted(nn.Module):
    """Pooled rows beside two dense columns times `gain`, through an MLP: with a large gain, `top.0`'s input holds a
    wide group beside narrow columns, as DIN's interest sum beside its target row."""

    def __init__(self, gain: float) -> None:
        super().__init__()
        self.ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=t.name, embedding_dim=DIM, num_embeddings=t.num_embeddings,
                                                                     feature_names=[t.feature]) for t in TABLES])
        for w in self.ebc.parameters():
            nn.init.normal_(w)  # pooled columns about as wide as the dense ones
        self.gain = gain
        self.top = nn.Sequential(nn.Linear(2 + DIM * len(TABLES), 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
        with torch.no_grad():  # as a trained model would: the wide columns' weights small, so every column counts in the score
            self.top[0].weight[:, :2] /= gain

    def forward(self, dense, sparse):
        pooled = self.ebc(sparse).values()
        return self.top(torch.cat([dense[:, :2] * self.gain, pooled], dim=1)).squeeze(1)


def planted(gain: float) -> nn.Module:
    torch.manual_seed(0)
    return Planted(gain).eval()


CALIBRATION = [random_batch(TABLES, 256, seed=s) for s in (1, 2)]
EVAL = random_batch(TABLES, 512, seed=3)


def scores(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(*EVAL.model_inputs())


def quantized(model: nn.Module, wide: str, mode: str = "dynamic") -> nn.Module:
    model = copy.deepcopy(model)
    linear.quantize_int8(model, mode, CALIBRATION, CPU, output="fp32", wide=wide)
    return model


def test_the_ratio_is_the_tensor_range_over_the_median_column_range():
    lo, hi = torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([1.0, 2.0, 100.0])  # columns 2, 2 and 100 wide (0 included)
    assert linear.column_ratio(lo, hi) == pytest.approx(101 / 2)
    dead = torch.zeros(5)  # columns that never leave 0 cost nothing on one grid: not the median
    assert linear.column_ratio(torch.cat([lo, dead]), torch.cat([hi, dead])) == pytest.approx(101 / 2)
    assert linear.column_ratio(dead, dead) == 1.0


@pytest.mark.parametrize("wide", ["smooth", "fp32"])
def test_the_rule_fires_on_a_planted_wide_column_and_not_without_it(wide):
    touched = quantized(planted(200.0), wide)
    assert list(linear.wide_record(touched)) == [linear.WIDE_RECORD[wide]]
    why = linear.wide_record(touched)[linear.WIDE_RECORD[wide]]
    assert list(why) == ["top.0"] and "median column" in why["top.0"]
    if wide == "fp32":
        assert type(touched.top[0]) is nni.LinearReLU and type(touched.top[0][0]) is nn.Linear  # fused, but float
    else:
        assert isinstance(touched.top[0][0], linear.ColumnScale) and type(touched.top[0][1]) is not nn.Linear
    untouched = quantized(planted(1.0), wide)
    assert linear.wide_record(untouched) == {}
    assert type(untouched.top[0]) is not nn.Linear and not isinstance(untouched.top[0], nn.Sequential)


class Muted(Planted):
    """The planted wide input, but its MLP only nudges a score that a plain Linear over the pooled rows sets (as HSTU's
    attention output joins its residual stream): quantizing `top.0` barely moves the scores."""

    def __init__(self, gain: float) -> None:
        super().__init__(gain)
        self.main = nn.Linear(DIM * len(TABLES), 1)

    def forward(self, dense, sparse):
        pooled = self.ebc(sparse).values()
        return self.main(pooled).squeeze(1) + 1e-3 * super().forward(dense, sparse)


@pytest.mark.parametrize("wide", ["smooth", "fp32"])
def test_a_wide_input_whose_layer_barely_moves_the_scores_stays_int8(wide):
    torch.manual_seed(0)
    muted = Muted(200.0).eval()
    slots = linear.quantized_slots(copy.deepcopy(muted), "fp32")
    assert linear.score_effects(muted, [(muted.top, "0")], CALIBRATION, CPU)["top.0"] < linear.WIDE_SCORE / 10
    loud = planted(200.0)
    assert linear.score_effects(loud, [(loud.top, "0")], CALIBRATION, CPU)["top.0"] > linear.WIDE_SCORE
    assert slots  # the muted model has int8 candidates, and its top.0's input is as wide as the planted one's
    touched = quantized(muted, wide)
    assert linear.wide_record(touched) == {}
    assert type(touched.top[0]) is not nn.Linear and not isinstance(touched.top[0], nn.Sequential)


def test_legacy_int8_quantizes_the_wide_layer_like_the_rest():
    legacy = quantized(planted(200.0), "int8")
    assert linear.wide_record(legacy) == {} and type(legacy.top[0]) is not nn.Linear and not isinstance(legacy.top[0], nn.Sequential)


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_smoothing_changes_nothing_in_fp32_and_brings_int8_closer(mode):
    model = planted(200.0)
    smoothed = copy.deepcopy(model)
    slots = linear.fuse_linear_relu(smoothed)
    linear.wide_inputs(smoothed, slots, CALIBRATION, CPU, "smooth", linear.WIDE_RATIO)
    assert torch.allclose(scores(smoothed), scores(model), rtol=1e-4, atol=1e-4)  # x/s times W*s is the layer itself
    reference = scores(model)
    error = {w: float((scores(quantized(model, w, mode)) - reference).abs().mean()) for w in ("int8", "smooth")}
    assert error["smooth"] < 0.75 * error["int8"], error


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("wide", ["smooth", "fp32"])
def test_fake_quant_is_the_twin_of_the_int8_backend_with_the_rule(wide, mode):
    """The twin applies the rule to the same layers with the same smoothing, and its scores follow the backend's within
    the tolerances of tests/test_backends_quant.py (dynamic: 1e-5; static: most logits within 1e-5, a rounding tie
    now and then one step apart)."""
    model = planted(200.0)
    backend = make("int8_tbe", mlp_mode=mode, mlp_wide=wide)
    twin_cfg = dict(backend.emulation())
    assert twin_cfg["mlp_wide"] == wide and twin_cfg["mlp_wide_ratio"] == linear.WIDE_RATIO
    twin = make(twin_cfg.pop("name"), **twin_cfg)
    deployed, emulated = backend.prepare(model, CALIBRATION, CPU), twin.prepare(model, CALIBRATION, CPU)
    assert backend.job_metrics(deployed).keys() - {"dense_path"} == twin.job_metrics(emulated).keys() - {"dense_path"} == {linear.WIDE_RECORD[wide]}
    if wide == "smooth":
        assert torch.equal(deployed.top[0][0].scale, emulated.top[0][0].scale)
    got, want = scores(emulated), scores(deployed)
    if mode == "dynamic":
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    else:
        assert float(((got - want).abs() <= 1e-5).float().mean()) >= 0.9


def test_the_rule_needs_calibration_batches():
    with pytest.raises(UserError, match="needs calibration batches"):
        linear.quantize_int8(planted(200.0), "dynamic", [], CPU, wide="smooth")


def resolved(*overrides):
    return dataclasses.asdict(compose(["+preset=tiny", *overrides]))


def without(config: dict, *keys: str) -> dict:
    return {**config, "backend": {k: v for k, v in config["backend"].items() if k not in keys}}


@pytest.mark.parametrize("backend", ["int8_tbe", "uint4", "int2_tbe", "fake_quant"])
def test_an_int8_mlp_job_has_a_new_identity_unless_it_asks_for_the_old_scheme(backend):
    default, legacy = resolved(f"backend={backend}"), resolved(f"backend={backend}", "backend.mlp_wide=int8")
    old_record = without(legacy, "mlp_wide", "mlp_wide_ratio")  # a record stored before the keys existed
    assert default["backend"]["mlp_wide"] == "fp32"
    assert job_hash(legacy) == job_hash(old_record)
    assert job_hash(resolved(f"backend={backend}", "backend.mlp_wide=int8", "backend.mlp_wide_ratio=4")) == job_hash(old_record)
    assert job_hash(default) != job_hash(old_record)
    assert job_hash(resolved(f"backend={backend}", "backend.mlp_wide=smooth")) not in (job_hash(default), job_hash(old_record))


@pytest.mark.parametrize("overrides", [["backend=fp32_tbe"], ["backend=fp16_tbe"], ["backend=int8_tbe", "backend.mlp=fp32"],
                                       ["backend=int8_tbe", "backend.mlp_engine=torchao"]])
def test_jobs_the_rule_does_not_reach_keep_their_identity(overrides):
    new = resolved(*overrides)
    assert job_hash(new) == job_hash(without(new, "mlp_wide", "mlp_wide_ratio"))


@pytest.mark.slow
@pytest.mark.parametrize("option,says", [("backend.mlp_wide=int4", "backend.mlp_wide='int4' is not one of fp32, smooth, int8"),
                                         ("backend.mlp_wide_ratio=0.5", "backend.mlp_wide_ratio=0.5: give a ratio of 1 or more")])
def test_a_bad_value_is_one_line_and_exit_2(tmp_path, option, says):
    run = subprocess.run([sys.executable, "-m", "bench", "backend=int8_tbe", option, "+preset=tiny", f"cache_dir={tmp_path / 'c'}",
                          f"reports_dir={tmp_path / 'r'}", f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert says in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "r" / "records.jsonl").exists()


@pytest.mark.parametrize("wide", ["fp32", "smooth", "int8"])
def test_the_layer_attribution_follows_the_rule(wide):
    """`attribute_layers=true` quantizes one Linear at a time as the backend does: a layer the rule keeps fp32 has no row,
    a smoothed one says so."""
    from bench.pipeline.layers import layer_rows

    model = planted(200.0)
    labels = EVAL.labels.numpy()

    def score(m):
        return labels, scores(m).numpy()

    rows = layer_rows(make("int8_tbe", mlp_wide=wide), model, CALIBRATION, CPU, score, labels, scores(model).numpy())
    schemes = {r["layer"]: r["scheme"] for r in rows if r["layer"].startswith("top.")}
    assert schemes == {**({} if wide == "fp32" else {"top.0": "int8 dynamic" + (", smoothed" if wide == "smooth" else "")}),
                       "top.2": "int8 dynamic"}


@pytest.mark.slow
def test_the_wide_layers_script_prints_each_candidate_as_the_rule_reads_it(tmp_path):
    """benchmarks/scripts/wide_layers.py (docs/backends.md's table): one row a quantized Linear, read by the rule's bounds."""
    from tests.conftest import REPO

    run = subprocess.run([sys.executable, str(REPO / "benchmarks/scripts/wide_layers.py"), "+preset=tiny", f"cache_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[0].startswith("layer") and "range ratio" in lines[0] and "score effect" in lines[0]
    rows = [line.split() for line in lines[1:]]
    assert rows and all(len(r) == 4 and float(r[1]) >= 1 and float(r[2]) >= 0 and r[3] in ("yes", "no") for r in rows)
    assert any(r[0].startswith("top_arch") or r[0].startswith("over_arch") or "top" in r[0] for r in rows)
