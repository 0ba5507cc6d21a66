"""Sequence features: the sequential workloads, the factory's embedding_collection=, and the real command."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.config import ModelConfig
from bench.errors import UserError
from bench.models.contract import check_model
from bench.models.dlrm import embedding_bag_collection
from bench.workloads import movielens
from bench.workloads.parquet import ParquetConfig, ParquetWorkload
from bench.workloads.synthetic_seq import SyntheticSeqConfig, SyntheticSeqWorkload
from examples.make_parquet import write_clicks

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(train_samples=512, eval_samples=256, calibration_samples=64, history_length=6, candidates=4, num_items=40,
            num_categories=4, num_users=30)


def _workload(seed: int = 0, **over) -> SyntheticSeqWorkload:
    return SyntheticSeqWorkload(SyntheticSeqConfig(**{**TINY, **over}), seed, "/tmp")


def test_synthetic_seq_rows_are_requests_of_k_candidates_deterministic_by_seed():
    a, b, other = (next(iter(w.batches("train", 64))) for w in (_workload(), _workload(), _workload(seed=1)))
    assert torch.equal(a.sparse.values(), b.sparse.values()) and torch.equal(a.labels, b.labels)
    assert not torch.equal(a.sparse.values(), other.sparse.values())
    kjt = a.sparse.to_dict()
    request, lengths = kjt["request"].values(), kjt["history"].lengths()
    assert request.tolist() == np.repeat(np.arange(16), 4).tolist()  # K = 4 consecutive rows per request
    histories = kjt["history"].to_dense()
    ages = kjt["history_age"].to_dense()
    for row in range(64):
        first = row - row % 4
        assert torch.equal(histories[row], histories[first])  # every candidate of a request carries its history
        assert 1 <= lengths[row] <= 6 and (ages[row][:-1] > ages[row][1:]).all() and ages[row][-1] > 0  # oldest first
    assert kjt["item_id"].lengths().eq(1).all()
    assert _workload(train_samples=511).num_samples("train") == 508  # whole requests


def test_side_keys_leave_pooled_lookups_alone():
    """The ages and request keys ride in the same KJT; a collection reads only its own features."""
    w = _workload()
    batch = next(iter(w.batches("eval", 8)))
    ebc = embedding_bag_collection(w.tables, 4)  # the pooled user_id table only
    assert [c.name for c in ebc.embedding_bag_configs()] == ["t_user_id"]
    assert ebc(batch.sparse).values().shape == (8, 4)


def test_the_oracle_beats_popularity_which_beats_chance():
    w = _workload(train_samples=8192, eval_samples=4096)
    assert w.oracle_auc() > w.popularity_auc() + 0.1 > 0.6


def _custom(factory: str, **kwargs) -> ModelConfig:
    return ModelConfig(name="custom", arch="custom", factory=factory, embedding_dim=8, kwargs=kwargs)


def test_din_keeps_the_contract_with_an_embedding_collection():
    check_model(_custom("examples.din:build"), _workload())


def test_a_factory_without_embedding_collection_is_one_line():
    with pytest.raises(UserError, match="cannot be called with embedding_bag_collection=, embedding_collection=, dense_in_features="):
        check_model(_custom("examples.two_tower:build"), _workload())


def test_parquet_sequence_features(tmp_path):
    path = write_clicks(tmp_path / "clicks.parquet", rows=2000)
    w = ParquetWorkload(ParquetConfig(path=str(path), sequence_features=["history"]), 0, tmp_path / "cache")
    assert {t.feature: t.sequence for t in w.tables} == {"user_id": False, "item_id": False, "item_category": False, "history": True}
    check_model(_custom("examples.din:build"), w)
    from bench.models.contract import check_builtin

    with pytest.raises(UserError, match=r"the workload's \['history'\] are sequences"):
        check_builtin(ModelConfig(name="small"), w)
    bad = ParquetWorkload(ParquetConfig(path=str(path), sequence_features=["user_id"]), 0, tmp_path / "cache")
    with pytest.raises(UserError, match=r"sequence_features names \['user_id'\], which are not list columns"):
        bad.check_data()


@pytest.mark.skipif(importlib.util.find_spec("recbole") is None, reason="MovieLens needs pip install --no-deps recbole==1.2.1")
def test_movielens_leave_last_out():
    w = movielens.MovieLensWorkload(movielens.MovieLensConfig(), 0, "/tmp")
    train, eval_rows = w._splits["train"], w._splits["eval"]
    assert len(eval_rows) == 943 and len(train) + len(eval_rows) == 100_000
    inter, _ = movielens.read_ratings(movielens.data_folder())
    last = inter.sort_values(["user_id", "timestamp", "item_id"], kind="stable").groupby("user_id").tail(1)
    assert sorted(zip(eval_rows.pooled["user_id"], eval_rows.candidate)) == sorted(zip(last["user_id"], last["item_id"]))
    assert eval_rows.labels.mean() == pytest.approx((last["rating"] >= 4).mean())
    assert (eval_rows.ages >= 0).all() and eval_rows.lengths.max() == 50
    assert 0.6 < w.popularity_auc() < 0.8


@pytest.mark.slow
def test_movielens_without_the_package_is_one_line_and_exit_2(tmp_path):
    """A `recbole` without the data (a package of that name, empty) stands for a machine where it is missing."""
    (tmp_path / "fake" / "recbole").mkdir(parents=True)
    (tmp_path / "fake" / "recbole" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-m", "bench", "model=hstu", "workload=movielens", f"reports_dir={tmp_path / 'reports'}",
                           f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "pip install --no-deps recbole==1.2.1" in proc.stderr + proc.stdout
    assert not (tmp_path / "reports").exists()


@pytest.mark.slow
def test_hstu_on_synthetic_seq_through_the_command(tmp_path):
    """Trained through the harness's train-and-cache path, HSTU reads the history: clearly above popularity alone
    (0.713 against 0.669 on 8,192 eval rows when measured; docs/sequential.md)."""
    proc = subprocess.run([sys.executable, "-m", "bench", "backend=fp32", "model=hstu", "workload=synthetic_seq", "+preset=tiny",
                           "workload.num_items=100", "workload.eval_samples=4096", "model.train.batch_size=128", "model.train.sparse_lr=0.3",
                           "threads=1",
                           f"reports_dir={tmp_path / 'reports'}", f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "record.json").read_text())
    assert record["status"] == "ok"
    m = record["metrics"]
    assert m["n_eval"] == 4096 and 0.6 < m["popularity_auc"] < m["oracle_auc"]
    assert m["auc"] > m["popularity_auc"] + 0.02, (m["auc"], m["popularity_auc"])
    assert "popularity-only baseline" in proc.stdout
    # served by request: MLPerf DLRMv3's grouped AUC beside the AUC over every pair; fp32 against itself moves by 0
    assert 0.5 < m["gauc"] < 1 and (m["gauc_delta"], m["gauc_delta_lo"], m["gauc_delta_hi"]) == (0, 0, 0)


def test_report_prints_the_popularity_baseline_beside_fp32():
    import pandas as pd

    from bench.report.markdown import _oracle_line

    g = pd.DataFrame({"backend": ["fp32", "int8_tbe"], "auc": [0.77, 0.76], "oracle_auc": [None, None], "popularity_auc": [0.67, 0.67]})
    assert _oracle_line(g) == ("Popularity-only baseline AUC (each candidate's train click rate, no history): 0.6700; "
                               "fp32 0.7700, +0.1000 above it.")
    assert _oracle_line(g.assign(popularity_auc=None)) is None


def test_a_builtin_model_that_cannot_read_the_workload_is_refused_before_any_work():
    from bench.config import HstuConfig
    from bench.models.contract import check_builtin
    from bench.workloads.synthetic import SyntheticConfig, SyntheticWorkload

    with pytest.raises(UserError, match="model=small pools every feature, but the workload's \\['history', 'item_id'\\] are sequences"):
        check_builtin(ModelConfig(name="small"), _workload())
    pooled = SyntheticWorkload(SyntheticConfig(cardinalities=[10, 10], train_samples=64, eval_samples=64), 0, "/tmp")
    with pytest.raises(UserError, match="model=hstu reads a history and candidates, and workload synthetic has none"):
        check_builtin(ModelConfig(name="hstu", arch="hstu", hstu=HstuConfig()), pooled)
    check_builtin(ModelConfig(name="hstu", arch="hstu", hstu=HstuConfig()), _workload())


def test_a_larger_item_table_spreads_the_lookups_and_keeps_the_labels():
    """workload.table_rows: copies of the catalogue; each lookup at a uniformly drawn copy, labels unchanged."""
    small, large = _workload(), _workload(table_rows=40 * 1000)
    assert [t.num_embeddings for t in large.tables if t.name == "t_item"] == [40_000, 40_000]
    a, b = next(iter(small.batches("eval", 256))), next(iter(large.batches("eval", 256)))
    assert torch.equal(a.labels, b.labels) and torch.equal(a.dense, b.dense)
    for key in ("history", "item_id"):
        ids, catalogue = b.sparse[key].values(), a.sparse[key].values()
        assert torch.equal(ids % 40, catalogue) and int(ids.max()) < 40_000
        copy = (ids // 40).double()  # uniform over the 1,000 copies: spread over the whole table
        assert 400 < float(copy.mean()) < 600 and float(copy.min()) < 50 and float(copy.max()) > 950
    with pytest.raises(UserError, match="table_rows"):
        _workload(table_rows=39)
