"""`model.output_key`: a user's model whose forward returns a tuple or dict of outputs is read through the one
that names the score; each refusal is one line and exit 2 before any work; the key leaves the identity of
jobs that do not set it as it was (bench.config.identity)."""

import dataclasses

import pytest
import torch

from bench.config.compose import compose
from bench.config.schema import ModelConfig, check_model_config
from bench.errors import UserError
from bench.models.outputs import OutputOf, pick
from bench.runner import Session, job_hash, run_one
from tests.conftest import run_bench
from tests.test_torchrec_models import TINY

SUPPORT = "tests.support.custom_models"


def test_pick_reads_a_key_or_an_index_and_says_what_to_set_otherwise():
    a, b = torch.zeros(2), torch.ones(2)
    assert pick({"ctr": a, "cvr": b}, "cvr")[0] is b and pick((a, b), "1")[0] is b and pick([a, b], "0")[0] is a
    assert pick({"ctr": a}, "cvr")[1] == "its forward returned a dict with keys ['ctr'], and model.output_key=cvr is not one of them: set one of those keys"
    assert pick((a, b), "2")[1].endswith("is not an index of it: set model.output_key to 0..1")
    assert pick((a, b), "ctr")[1].endswith("is not an index of it: set model.output_key to 0..1")
    assert pick(a, "ctr")[1] == "model.output_key=ctr, but its forward returned a Tensor, not a tuple or dict: remove model.output_key"
    with pytest.raises(ValueError, match="not one of them"):
        OutputOf(torch.nn.Identity(), "x")({"y": a})


def test_a_built_in_model_refuses_the_key():
    with pytest.raises(UserError, match=r"^model.output_key=ctr: the built-in DLRM models return one tensor; model.output_key is for model=custom$"):
        check_model_config(ModelConfig(name="small", output_key="ctr"))


def resolved(*overrides):
    return dataclasses.asdict(compose(["+preset=tiny", "model=custom", f"model.factory={SUPPORT}:dict_outputs", *overrides]))


def test_jobs_without_the_key_keep_their_identity_and_the_key_makes_a_new_one():
    unset = resolved()
    stored_before = {**unset, "model": {k: v for k, v in unset["model"].items() if k != "output_key"}}  # a record from before the key
    assert "output_key" in unset["model"] and job_hash(unset) == job_hash(stored_before)
    assert job_hash(resolved("model.output_key=ctr")) != job_hash(stored_before)


@pytest.mark.parametrize("factory,extra,says", [
    ("dict_outputs", [], "its forward returned a dict with keys ['ctr', 'cvr']; name the score among them with model.output_key="),
    ("dict_outputs", ["model.output_key=ctx"], "model.output_key=ctx is not one of them: set one of those keys"),
    ("tuple_outputs", ["model.output_key=2"], "its forward returned a tuple of 2 outputs, and model.output_key=2 is not an index of it"),
    ("no_linear", ["model.output_key=ctr"], "model.output_key=ctr, but its forward returned a Tensor, not a tuple or dict: remove model.output_key"),
])  # fmt: skip
@pytest.mark.slow
def test_each_refusal_is_one_line_and_exit_2_before_any_work(tmp_path, factory, extra, says):
    result = run_bench("+preset=tiny", "model=custom", f"model.factory={SUPPORT}:{factory}", *extra,
                       f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: model.factory={SUPPORT}:{factory}") and says in lines[0], lines
    assert not (tmp_path / "reports").exists() and not (tmp_path / "cache" / "models").exists()  # nothing trained or stored


@pytest.mark.slow
def test_a_built_in_model_with_the_key_is_one_line_and_exit_2(tmp_path):
    result = run_bench("+preset=tiny", "model.output_key=ctr", f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert "model.output_key is for model=custom" in result.stderr


@pytest.mark.slow
def test_the_named_output_is_trained_scored_and_quantized(tmp_path):
    """The dict's "ctr" and the tuple's index 1 are the same head (same weights from the same seed): the same AUC;
    index 0 is the other head. A probabilities output is read before the model's own nn.Sigmoid."""
    session = Session()
    base = [*TINY, f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}"]

    def run(factory, key, backend="fp32", *more):
        return run_one(compose([*base, f"model.factory={SUPPORT}:{factory}", f"model.output_key={key}", f"backend={backend}", *more]), session)

    by_key, by_index, other = run("dict_outputs", "ctr"), run("tuple_outputs", "1"), run("tuple_outputs", "0")
    for record in (by_key, by_index, other):
        assert record.status == "ok" and record.metrics["auc"] > 0.65, (record.status, record.error, record.metrics.get("auc"))
    assert by_key.metrics["auc"] == by_index.metrics["auc"] != other.metrics["auc"]
    int8 = run("dict_outputs", "ctr", "int8_tbe")
    assert int8.status == "ok" and abs(int8.metrics["auc_delta"]) < 0.02, (int8.error, int8.metrics.get("auc_delta"))
    probabilities = run("dict_outputs", "ctr", "fp32", "model.output=probabilities", "+model.kwargs.sigmoid=true")
    assert probabilities.status == "ok" and probabilities.metrics["auc"] > 0.65, probabilities.error
    assert probabilities.metrics["score_read"] == "the input of model.sigmoid (nn.Sigmoid)"
