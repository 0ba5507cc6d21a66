"""model=custom: the contract checked before any work (exit 2, one line, nothing stored), a model that
returns probabilities trained and scored as it declares, backends that cannot apply to a user's model
(skipped, not failed), and caches and resume that see the model's source and the data files."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from bench import registry
from bench.config.compose import compose
from bench.models.custom import LogitsOf
from bench.runner import Session, run_one
from bench.config.quick import TINY_OVERRIDES as TINY
from examples.make_parquet import write_clicks
from tests.conftest import REPO, run_bench

EXAMPLE = "model.factory=examples.two_tower:build"
SUPPORT = "tests.support.custom_models"
QUICK = [*TINY, "model.train.samples=4096", "model.train.batch_size=512", "batch_size=256", "eval_batch_size=1024"]


@pytest.fixture(scope="module")
def clicks(tmp_path_factory):
    """A small click log of the example (6000 rows, 1200 of them eval)."""
    return write_clicks(tmp_path_factory.mktemp("data") / "clicks.parquet", rows=6000, seed=1)


def custom(data: Path, root: Path, *more: str) -> list[str]:
    return ["model=custom", "workload=parquet", f"workload.path={data}", f"cache_dir={root / 'cache'}", f"reports_dir={root / 'reports'}", *more]


# ------------------------------------------------------------------------------------ the contract


@pytest.mark.parametrize("factory,extra,says", [
    ("no_ebc", [], "without a torchrec EmbeddingBagCollection"),
    ("wrong_arguments", [], "its forward does not take (dense_features, KeyedJaggedTensor)"),
    ("wrong_shape", [], "returned shape [8, 2] for a batch of 8 samples"),
    ("logits_below_zero", ["model.output=probabilities"], "model.output=probabilities, but the model returned scores from"),
])  # fmt: skip
@pytest.mark.slow
def test_each_contract_violation_is_one_line_and_exit_2(clicks, tmp_path, factory, extra, says):
    result = run_bench(*custom(clicks, tmp_path, f"model.factory={SUPPORT}:{factory}", *extra))
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: model.factory={SUPPORT}:{factory}") and says in lines[0], lines
    assert not (tmp_path / "reports").exists() and not (tmp_path / "cache" / "models").exists()  # nothing trained or stored


@pytest.mark.slow
def test_a_factory_that_cannot_take_the_harness_arguments_is_one_line(clicks, tmp_path):
    result = run_bench(*custom(clicks, tmp_path, EXAMPLE, "+model.kwargs.depth=3"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: model.factory=examples.two_tower:build cannot be called with embedding_bag_collection=, dense_in_features= and "
        "model.kwargs (got an unexpected keyword argument 'depth'): give a factory that takes them (docs/custom-model.md shows a three-line adapter)"
    )


@pytest.mark.slow
def test_a_factory_module_that_does_not_exist_is_one_line(clicks, tmp_path):
    result = run_bench(*custom(clicks, tmp_path, "model.factory=no_such_package.model:build"))
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: model.factory=no_such_package.model:build: no module named 'no_such_package'")


def test_a_factory_given_as_a_file_path_is_told_the_dotted_path():
    from bench.config.schema import ModelConfig, check_model_config
    from bench.errors import UserError

    with pytest.raises(UserError) as info:
        check_model_config(ModelConfig(arch="custom", factory="examples/two_tower.py:build"))
    assert "a file path; name the module by its dotted import path, model.factory=examples.two_tower:build" in str(info.value)


def test_a_missing_factory_function_lists_what_the_module_defines():
    from bench.errors import UserError
    from bench.models.custom import load_factory

    with pytest.raises(UserError) as info:
        load_factory("examples.two_tower:buld")
    line = str(info.value)
    assert line.startswith("model.factory=examples.two_tower:buld: examples.two_tower has no 'buld'; did you mean examples.two_tower:build?")
    assert "its functions and classes: " in line and "build" in line.split("its functions and classes: ")[1]


# ------------------------------------------------------------------------- declared probabilities


def logistic_regression_auc(workload) -> float:
    """sklearn's logistic regression on the same splits: dense features plus one-hot (multi-hot) ids."""

    def design(split):
        blocks, labels = [], []
        for b in workload.batches(split, 8192):
            n = len(b)
            cols = [sp.csr_matrix(b.dense.numpy())]
            for t in workload.tables:
                jt = b.sparse[t.feature]
                rows = np.repeat(np.arange(n), jt.lengths().numpy())
                cols.append(sp.csr_matrix((np.ones(len(rows)), (rows, jt.values().numpy())), shape=(n, t.num_embeddings)))
            blocks.append(sp.hstack(cols).tocsr())
            labels.append(b.labels.numpy())
        return sp.vstack(blocks), np.concatenate(labels)

    x, y = design("train")
    x_eval, y_eval = design("eval")
    return float(roc_auc_score(y_eval, LogisticRegression(C=0.3, max_iter=2000).fit(x, y).decision_function(x_eval)))


@pytest.mark.slow
def test_a_model_that_returns_probabilities_trains_and_scores_as_declared(tmp_path):
    data = write_clicks(tmp_path / "clicks.parquet", rows=60000, seed=0, oracle=True)
    cfg = compose(custom(data, tmp_path, EXAMPLE, "+model.kwargs.sigmoid=true", "model.output=probabilities",
                         "workload.oracle=oracle_logit", "model.train.samples=50000", "model.train.progress=false",
                         "timing.trials=1", "timing.max_rounds=1", "timing.batches_per_trial=1", "timing.pool_samples=0",
                         "timing.calibrate=false"))
    session = Session()
    record = run_one(cfg, session)
    assert record.status == "ok", record.error
    workload = session.work.workload(cfg)
    reference, oracle = logistic_regression_auc(workload), workload.oracle_auc()
    auc = record.metrics["auc"]
    assert abs(auc - reference) < 0.02 and auc < oracle, (auc, reference, oracle)
    # the scores are the logits of the model's own probabilities, and the log loss is theirs
    model = session.work.model(cfg, workload).module
    assert isinstance(model, LogitsOf)
    batch = next(iter(workload.batches("eval", 512)))
    with torch.no_grad():
        p = model.model(*batch.model_inputs()).double()
        assert torch.allclose(torch.sigmoid(model(*batch.model_inputs()).double()), p.clamp(1e-7, 1 - 1e-7), atol=1e-6)
    assert 0 < record.metrics["logloss"] < 0.69


# --------------------------------------------------------------------- backends that cannot apply


@pytest.mark.parametrize("factory,backend,says", [
    ("own_embedding", "int8_tbe", "quantizes torchrec EmbeddingBagCollections and EmbeddingCollections only, and the model also holds position (Embedding)"),
    ("own_embedding", "fake_quant", "quantizes torchrec EmbeddingBagCollections and EmbeddingCollections only"),
    ("no_linear", "int8_tbe", "runs the model's nn.Linear layers in int8, and the model has none"),
    ("no_linear", "fake_quant", "emulates int8 nn.Linear layers, and the model has none"),
])  # fmt: skip
@pytest.mark.slow
def test_a_backend_that_cannot_apply_is_skipped_with_the_reason(clicks, tmp_path, factory, backend, says):
    session = Session()
    base = custom(clicks, tmp_path, f"model.factory={SUPPORT}:{factory}", *QUICK)
    assert run_one(compose(base), session).status == "ok"  # fp32 runs the same model
    record = run_one(compose([*base, f"backend={backend}"]), session)
    assert record.status == "skipped" and says in record.error, record.error


@pytest.mark.slow
def test_every_default_backend_runs_the_example(clicks, tmp_path):
    session = Session()
    for backend in registry.sweep_backends():
        record = run_one(compose([*custom(clicks, tmp_path, EXAMPLE, *QUICK), f"backend={backend}"]), session)
        assert record.status == "ok", (backend, record.error)
        assert record.metrics["n_eval"] == session.work.workload(compose(custom(clicks, tmp_path, EXAMPLE))).num_samples("eval")
        if backend != "fp32":
            assert record.metrics["auc_delta_lo"] <= record.metrics["auc_delta"] <= record.metrics["auc_delta_hi"]


# ------------------------------------------------------------------------- caches that see inputs


def _last_record(reports: Path) -> dict:
    return json.loads((reports / "records.jsonl").read_text().splitlines()[-1])


@pytest.mark.slow
def test_an_edited_model_or_a_replaced_file_retrains_and_rescores(tmp_path):
    """The real command, four times: a warm run reuses model, scores and record (resume); an edit to the
    model's source or a new Parquet file trains, scores and measures again."""
    package = tmp_path / "mymodels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(REPO / "examples" / "two_tower.py", package / "two_tower.py")
    data = write_clicks(tmp_path / "clicks.parquet", rows=4000, seed=2)
    args = custom(data, tmp_path, "model.factory=mymodels.two_tower:build", *QUICK, "resume=true")
    scores = tmp_path / "cache" / "scores"

    def run():
        result = run_bench(*args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout, _last_record(tmp_path / "reports"), sorted(scores.glob("*.npz"))

    out, first, first_scores = run()
    assert first["metrics"]["model_source"] == "trained" and first_scores
    out, same, same_scores = run()
    assert "resumed:" in out and same_scores == first_scores  # nothing measured, scored or trained

    (package / "two_tower.py").write_text((package / "two_tower.py").read_text() + "\n# an edit\n")
    out, edited, edited_scores = run()
    assert "resumed:" not in out and edited["metrics"]["model_source"] == "trained"
    assert edited["config_hash"] != first["config_hash"] and set(edited_scores) > set(first_scores)
    assert edited["config"]["inputs"]["code"]["sha256"] != first["config"]["inputs"]["code"]["sha256"]

    write_clicks(data, rows=4000, seed=3)  # the same path, other rows
    out, replaced, replaced_scores = run()
    assert "resumed:" not in out and replaced["metrics"]["model_source"] == "trained"
    assert replaced["config_hash"] != edited["config_hash"] and set(replaced_scores) > set(edited_scores)


@pytest.mark.slow
def test_per_table_overrides_and_sharding_apply_to_the_example(clicks, tmp_path):
    session = Session()
    base = [*custom(clicks, tmp_path, EXAMPLE, *QUICK), "backend=uint4"]
    plain = run_one(compose(base), session)
    mixed = run_one(compose([*base, "+backend.per_table={t_item_id: int8}"]), session)
    assert plain.status == mixed.status == "ok", (plain.error, mixed.error)
    assert mixed.metrics["embedding_bytes"] > plain.metrics["embedding_bytes"]  # one table at 8 bits instead of 4
    sharded = run_one(compose([*base, "sharding=table_wise", "world_size=2"]), session)
    assert sharded.status == "ok", sharded.error
    assert sharded.metrics["auc"] == pytest.approx(plain.metrics["auc"], abs=1e-6)  # sharding changes no score


@pytest.mark.slow
def test_the_readme_example_runs_in_a_short_mode(tmp_path):
    """docs/custom-model.md's commands: write the example's Parquet file, run the two-tower model on it."""
    data = tmp_path / "clicks.parquet"
    made = subprocess.run([sys.executable, "-m", "examples.make_parquet", str(data), "--rows", "3000", "--oracle"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0 and f"{data}: 3000 rows" in made.stdout, made.stderr
    result = run_bench(*custom(data, tmp_path, EXAMPLE, "workload.oracle=oracle_logit", *QUICK, "backend=int8_tbe"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "int8_tbe on parquet, cpu, batch 256: ok" in result.stdout and "(oracle 0." in result.stdout and "ΔAUC vs fp32" in result.stdout


def test_the_oracle_column_left_undeclared_is_refused_before_any_work(tmp_path):
    """make_parquet --oracle, then the custom-model command without workload.oracle: exit 2, one line
    naming oracle_logit and the keys that take it, nothing trained or stored."""
    data = tmp_path / "clicks.parquet"
    made = subprocess.run([sys.executable, "-m", "examples.make_parquet", str(data), "--oracle", "--rows", "3000"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0 and "workload.oracle=oracle_logit" in made.stdout, made.stderr
    result = run_bench("+sweep=quant", EXAMPLE, *custom(data, tmp_path), "+preset=tiny")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "column 'oracle_logit' would become a dense feature" in lines[0], lines
    assert "workload.oracle=oracle_logit" in lines[0] and "workload.dense=[dense_0,dense_1,dense_2,dense_3,oracle_logit]" in lines[0]
    assert not (tmp_path / "reports").exists() and not (tmp_path / "cache" / "models").exists()
