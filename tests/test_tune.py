"""The tune (`+sweep=tune`): the held-out split, the swappable model, the planted problem through the real
model code, per_table files, the ΔAUC attribution of every sweep, and a tiny tune end to end."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from bench import registry
from bench.backends.fake_quant import qdq_rows
from bench.config.compose import compose
from bench.config import TuneConfig
from bench.errors import UserError
from bench.pipeline.attribution import attribute_delta
from bench.pipeline.job import backend_config
from bench.pipeline.shared import SharedWork
from bench.config.quick import TINY_OVERRIDES
from bench.tune import main as tune_main
from bench.tune.candidate import SwappableModel
from bench.tune.holdout import CHECK, HOLDOUT, PLAN, split_by_index
from bench.tune.measured import Budget, Row
from bench.tune.tune_folder import CSV_COLUMNS
from bench.tune.search import search
from bench.tune.sensitivity import sensitivity
from bench.tune.sizes import Table, map_bytes
from bench.tune.candidate_records import SUMMARY
from bench.record import RunRecord
from bench.results.tune import CANDIDATE, LABELS, MEASURED, ROW, row_of
from bench.store import read_records
from bench.report.__main__ import main as report_main
from bench.tune.validate import holdout_rows
from tests.support.planted import (
    DIM,
    KNOWN_ANSWER,
    ROWS,
    SCALES,
    PlantedModel,
    planted_batches,
)

CPU = torch.device("cpu")
PRECISIONS = ["fp16", "int8", "int4", "int2"]


# ----------------------------------------------------------------------------------- the split


@pytest.mark.slow
def test_the_split_interleaves_plan_check_and_held_out_samples_and_keeps_every_id():
    cfg = compose(["workload.eval_samples=1001", "workload.cardinalities=[50,60,70]", "workload.pooling=[1,3,2]"])
    workload = SharedWork().workload(cfg)
    split = split_by_index(list(workload.batches("eval", 300)))  # batches of 300 do not line up with the parts
    [whole] = list(workload.batches("eval", 1001))
    for name, (start, step) in ((PLAN, (0, 4)), (CHECK, (2, 4)), (HOLDOUT, (1, 2))):
        assert torch.equal(torch.cat([b.dense for b in split[name]]), whole.dense[start::step])
        assert torch.equal(torch.cat([b.labels for b in split[name]]), whole.labels[start::step])
        for key in whole.sparse.keys():
            got = [x for b in split[name] for x in b.sparse.to_dict()[key].to_dense()]
            want = whole.sparse.to_dict()[key].to_dense()[start::step]
            assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    # disjoint and complete: the search's two quarters (plan 251, check 250) and the held-out half (500)
    assert [sum(len(b) for b in split[k]) for k in (PLAN, CHECK, HOLDOUT)] == [251, 250, 500]


# ------------------------------------------------------------------------------ swappable model


@pytest.fixture(scope="module")
def planted():
    torch.manual_seed(0)
    model = PlantedModel().eval()
    split = split_by_index(planted_batches(model, 60_000, 4096, seed=1))
    calibration = planted_batches(model, 2048, 1024, seed=2)
    tables = [Table(t, ROWS[t], DIM) for t in SCALES]
    return model, split, calibration, tables


def test_swapping_writes_fbgemm_rows_and_restores_fp32_exactly(planted):
    model, _, calibration, _ = planted
    before = model.ebc.embedding_bags["loud_0"].weight.detach().clone()
    swap = SwappableModel(model, calibration, CPU)
    weight = swap.module.ebc.embedding_bags["loud_0"].weight
    swap.set_tables({"loud_0": "int4"})
    assert torch.equal(weight, qdq_rows(before, 4))
    for variant in swap.dense.values():  # the dense variants read the same tables
        assert variant.ebc.embedding_bags["loud_0"].weight.data_ptr() == weight.data_ptr()
    swap.set_tables({})
    assert torch.equal(weight, before) and torch.equal(model.ebc.embedding_bags["loud_0"].weight, before)


@pytest.mark.slow
def test_planted_problem_finds_the_known_answer(planted):
    """Loud tables keep int8 (int4 costs more than the budget), quiet ones go to int2."""
    model, split, calibration, tables = planted
    swap = SwappableModel(model, calibration, CPU)  # min-max rows: the planted loud table's int4 is past the budget
    plan = split[PLAN]
    rows = sensitivity(swap, tables, PRECISIONS, plan, swap.logits("fp32", plan, sum(len(b) for b in plan)))
    by = {r.candidate: r for r in rows}
    assert by["loud_0=int4"].auc_delta_hi < 0 and by["loud_0=int2"].auc_delta < by["loud_0=int4"].auc_delta
    assert all(abs(by[f"quiet_{i}={p}"].auc_delta) < 1e-4 for i in (0, 1) for p in PRECISIONS)
    assert {r.candidate for r in rows if r.kind == "dense"} == {"dense int8 dynamic", "dense int8 static"}

    check = split[CHECK]
    base = swap.logits("fp32", check, sum(len(b) for b in check))
    result = search(swap, tables, PRECISIONS, rows, "fp32", Budget(absolute=0.00025), check, base, ratio=0.5)
    assert result.chosen == KNOWN_ANSWER
    chosen = [r for r in result.probes if r.chosen]
    assert len(chosen) == 1 and chosen[0].per_table == KNOWN_ANSWER and chosen[0].auc_delta_lo >= -0.00025
    # every probe past the chosen candidate failed: the search backed off to the last passing one
    assert all(r.auc_delta_lo < -0.00025 for k, r in zip(result.probed, result.probes) if k > result.passed)

    # the held-out check runs the real integer backends: stored bytes are the map's FBGEMM row bytes
    tune = SimpleNamespace(mlp="fp32", mlp_mode="dynamic", precisions=["int2"], row_range="minmax")  # the chosen map and uniform int2
    held = halves_base(swap, split)
    swap.set_tables(result.chosen)
    _, emulated = swap.logits("fp32", split[HOLDOUT], len(held[0]))
    checked, gap = holdout_rows(result.chosen, tables, tune, model, calibration, CPU, split[HOLDOUT], held, emulated)
    assert checked[0].chosen and checked[0].measured_by == "uint4"
    # the search's emulation scores the held-out half as the real backend does (FBGEMM's own rows, fp32 dense)
    emulation = checked[1]
    assert emulation.kind == "emulation" and not emulation.chosen and gap < 1e-5
    assert emulation.auc_delta == pytest.approx(checked[0].auc_delta, abs=1e-6)
    assert checked[0].embedding_bytes == map_bytes(tables, KNOWN_ANSWER)
    assert Budget(absolute=0.00025).verdict(checked[0]) == "within budget"
    uniform = {r.candidate: r for r in checked[2:]}
    assert uniform["uniform int2 (int2_tbe, fp32 MLP)"].auc_delta_hi < -0.00025  # uniform int2 is clearly over


def halves_base(swap, split):
    n = sum(len(b) for b in split[HOLDOUT])
    return swap.logits("fp32", split[HOLDOUT], n)


# ------------------------------------------------------------------------------------ the budget


def test_one_budget_by_default_for_tune_the_report_and_the_gate():
    """tune's default budget, compare.max_auc_drop (report.md's verdicts and bottom line) and the gate's
    default_rules are one number."""
    from bench.config import MAX_AUC_DROP
    from bench.config.files import load_compare_config
    from bench.gate.thresholds import load_gate_config

    assert Budget.of(_cfg(TuneConfig())).absolute == MAX_AUC_DROP == load_compare_config().max_auc_drop
    assert load_gate_config().default_rules.max_auc_drop == MAX_AUC_DROP


def _cfg(tune, max_auc_drop=0.001):
    """A tune's config as `Budget.of` reads it: the tune's settings and compare.max_auc_drop."""
    return SimpleNamespace(tune=tune, compare=SimpleNamespace(max_auc_drop=max_auc_drop))


def test_budget_is_given_once_and_relative_scales_with_the_fp32_auc():
    with pytest.raises(UserError, match="give the AUC budget once"):
        Budget.of(_cfg(TuneConfig(max_auc_drop=0.001, max_auc_drop_relative=0.01)))
    with pytest.raises(UserError, match="between 0 and 1"):
        Budget.of(_cfg(TuneConfig(max_auc_drop=2.0)))
    with pytest.raises(UserError, match="compare.max_auc_drop must be a number between 0 and 1"):
        Budget.of(_cfg(TuneConfig(), max_auc_drop=0.0))  # a 0 budget leaves a tune no room: it says which key
    assert Budget.of(_cfg(TuneConfig(max_auc_drop_relative=0.01))).drop(0.8) == pytest.approx(0.008)
    assert Budget.of(_cfg(TuneConfig(), 0.01)).absolute == 0.01  # given neither: compare.max_auc_drop
    row = Row("c", "chosen", "holdout", 1, "fp32", "uint4", auc_delta=-0.0005, auc_delta_lo=-0.0009, auc_delta_hi=-0.0001, auc_fp32=0.8)
    budget = Budget(absolute=0.001)
    assert budget.verdict(row) == "within budget"
    assert Budget(absolute=0.0007).verdict(row) == "inconclusive" and Budget(absolute=0.00005).verdict(row) == "over budget"


# --------------------------------------------------------------------------------- per_table_file


def _tbe(overrides):
    cfg = backend_config({"name": "uint4", **overrides})
    return registry.get("backend", "uint4").factory(cfg)


def test_per_table_file_joins_per_table_which_wins(tmp_path):
    path = tmp_path / "per_table.yaml"
    path.write_text("{t_cat_0: int8, t_cat_1: int2}\n")
    backend = _tbe({"per_table_file": str(path), "per_table": {"t_cat_1": "fp16"}})
    assert backend.cfg.per_table == {"t_cat_0": "int8", "t_cat_1": "fp16"}
    rows = {"t_cat_0": 100, "t_cat_1": 100, "t_cat_2": 100}  # table name -> rows
    assert backend.stored_table_dtypes(rows) == {"t_cat_0": "int8", "t_cat_1": "fp16", "t_cat_2": "int4"}
    assert backend.emulation()["per_table"] == {"t_cat_0": 8, "t_cat_1": 16}
    # the same file composes from the command line
    cfg = compose(["backend=uint4", f"backend.per_table_file={path}"])
    assert cfg.backend.per_table_file == str(path)


@pytest.mark.parametrize("text, match", [(None, "no such file"), ("[int8, int4]\n", "mapping"), ("{a: [\n", "not valid YAML")])
def test_per_table_file_errors_name_the_fix(tmp_path, text, match):
    path = tmp_path / "per_table.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(UserError, match=match):
        _tbe({"per_table_file": str(path)})


# ------------------------------------------------------------------------------------ attribution


def test_attribution_splits_the_delta_into_embeddings_and_dense_layers():
    rng = np.random.default_rng(0)
    labels = (rng.random(4000) < 0.3).astype(np.float32)
    base = labels + rng.normal(0, 1.0, 4000)
    emb = base + rng.normal(0, 0.3, 4000)  # the fp32-MLP twin: embeddings' error only
    full = emb + rng.normal(0, 0.3, 4000)  # the backend: the dense layers' error on top
    asked = []

    def scores_of(cfg):
        asked.append(cfg)
        return labels, emb

    cfg = backend_config({"name": "uint4"})
    parts = attribute_delta(cfg, labels, base, full, scores_of)
    [twin] = asked
    assert twin.mlp == "fp32" and twin.name == "uint4" and cfg.mlp == "int8"
    from bench.stats import paired_auc_delta

    assert parts["auc_delta_embeddings"] == pytest.approx(paired_auc_delta(labels, base, emb).delta)
    assert parts["auc_delta_embeddings"] + parts["auc_delta_mlp"] == pytest.approx(paired_auc_delta(labels, base, full).delta)
    # an fp32 MLP owes everything to the embeddings, and nothing more is scored
    fp32_mlp = attribute_delta(dataclasses.replace(cfg, mlp="fp32"), labels, base, full, scores_of)
    assert fp32_mlp["auc_delta_mlp"] == 0.0 and len(asked) == 1
    assert attribute_delta(backend_config({"name": "fp32"}), labels, base, base, scores_of) == {}


# ------------------------------------------------------------------------------------- end to end

TUNE_TINY = [*TINY_OVERRIDES, "workload.cardinalities=[40,300,2000,900,12,3000]", "+sweep=tune", "threads=1"]


@pytest.fixture
def tune_cfg(tmp_path):
    def make(*overrides):
        return compose([*TUNE_TINY, f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", *overrides])

    return make


@pytest.mark.slow
def test_tiny_tune_end_to_end(tune_cfg, tmp_path, capsys, caplog):
    cfg = tune_cfg("tune.max_auc_drop=0.002")
    with caplog.at_level(logging.INFO, logger="bench.tune"):
        code = tune_main(cfg, SharedWork())
    out = capsys.readouterr().out
    # a line per measurement as it goes: each table's sensitivity, each search probe, each held-out map
    said = [r.getMessage() for r in caplog.records if r.name.startswith("bench.tune")]
    assert sum(m.startswith("tune: sensitivity ") and "/6: " in m for m in said) == 6
    probes = [m for m in said if m.startswith("tune: search probe ")]
    assert probes and all(m.endswith(("passes", "does not pass")) for m in probes)
    assert any(m.startswith("tune: held-out check: uniform int8 (int8_tbe, int8 dynamic MLP)") for m in said)
    folder = tmp_path / "reports" / "tune" / "latest"
    assert {p.name for p in folder.iterdir()} == {"tune.md", "tune.csv", "per_table.yaml", "frontier.png", "records.jsonl"}
    csv = pd.read_csv(folder / "tune.csv")
    assert list(csv.columns) == CSV_COLUMNS and set(csv["split"]) == {"search", "holdout"}
    [emulation] = csv[csv["kind"] == "emulation"].itertuples()  # the chosen map's emulation, held out, never chosen
    assert emulation.split == "holdout" and not emulation.chosen and emulation.measured_by == "emulation"
    assert len(csv[csv["kind"] == "sensitivity"]) == 6 * 4 and len(csv[csv["kind"] == "dense"]) == 2
    [chosen] = csv[csv["chosen"] & (csv["split"] == "holdout")].itertuples()
    per_table = yaml.safe_load((folder / "per_table.yaml").read_text())
    assert len(per_table) == 6 and chosen.per_table == " ".join(f"{k}={v}" for k, v in per_table.items())
    assert chosen.measured_by == "uint4" and math.isfinite(chosen.auc_delta_lo)
    md = (folder / "tune.md").read_text()
    for part in ("## Verdict (held-out half)", "selection bias", "## Sensitivity (plan quarter", "int8 dynamic",
                 "## Search (check quarter", "search's emulation of the same map", "frontier.png"):
        assert part in md
    assert code == (0 if "within budget" in out.splitlines()[0] else 1)
    # per_table.yaml works both ways: as a file and inline (one flow-style line)
    text = (folder / "per_table.yaml").read_text().strip()
    assert compose(["backend=uint4", f"+backend.per_table={text}"]).backend.per_table == per_table
    assert _tbe({"per_table_file": str(folder / "per_table.yaml")}).cfg.per_table == per_table

    # re-rendered from its stored records alone: the same tune.md, tune.csv and per_table.yaml
    _assert_rerenders(folder)
    # the tune's store of candidates is not a tune: one line naming the folder to give, exit 2
    capsys.readouterr()
    assert report_main([str(tmp_path / "reports" / "tune")]) == 2
    assert "give a tune folder" in capsys.readouterr().err

    # a second tune with another budget reads the sensitivities from the cache
    again = tune_main(tune_cfg("tune.max_auc_drop_relative=0.01"), SharedWork())
    assert again in (0, 1) and "read from the cache" in (folder.resolve().parent / "latest" / "tune.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("left", [0.5, 0.1], ids=["in the sensitivities", "in the held-out check"])
def test_an_interrupted_tune_resumed_measures_no_candidate_twice(tune_cfg, tmp_path, left):
    cfg = tune_cfg("tune.max_auc_drop=0.002", "resume=true")
    code = tune_main(cfg, SharedWork())
    folder = tmp_path / "reports" / "tune" / "latest"
    store = tmp_path / "reports" / "tune" / "records.jsonl"
    whole = store.read_text().splitlines()
    first = read_records(folder / "records.jsonl")
    assert len(first) == len(whole) + 1 and first[-1].metrics[SUMMARY]["measured"] == len(whole)  # every row, then the summary
    assert len(pd.read_csv(folder / "tune.csv")) == len(whole)
    first_md = (folder / "tune.md").read_text().replace(str(folder.resolve()), "FOLDER")

    # interrupted: only the first candidates stored (a kill leaves whole lines), no sensitivity cache either
    kept = len(whole) - max(int(left * len(whole)), 1)
    store.write_text("\n".join(whole[:kept]) + "\n")
    shutil.rmtree(tmp_path / "cache" / "tune")
    assert tune_main(cfg, SharedWork()) == code
    stored = read_records(store)
    assert len(stored) == len(whole) and max(Counter(r.config_hash for r in stored).values()) == 1  # none measured twice
    again = read_records(folder / "records.jsonl")
    assert again[-1].metrics[SUMMARY]["measured"] == len(whole) - kept
    assert sum(r.resumed_from is not None for r in again) == kept
    assert [r.metrics for r in again[:-1]] == [r.metrics for r in first[:-1]]
    timed = lambda md: [line for line in md.splitlines() if not line.startswith("Tune time")]  # noqa: E731
    assert timed((folder / "tune.md").read_text().replace(str(folder.resolve()), "FOLDER")) == timed(first_md)

    # once more: everything is stored, nothing is measured, the store is unchanged
    before = store.read_bytes()
    assert tune_main(cfg, SharedWork()) == code
    assert read_records(folder / "records.jsonl")[-1].metrics[SUMMARY]["measured"] == 0
    assert store.read_bytes() == before


def _assert_rerenders(folder):
    """`python -m bench.report FOLDER` writes the tune's files again from its records.jsonl, the same as the tune did."""
    files = [name for name in ("tune.md", "tune.csv", "per_table.yaml") if (folder / name).exists()]
    before = {name: (folder / name).read_text() for name in files}
    for name in [*files, "frontier.png"]:
        (folder / name).unlink(missing_ok=True)
    assert report_main([str(folder)]) == 0
    assert {name: (folder / name).read_text() for name in files} == before
    assert (folder / "frontier.png").exists() == ("per_table.yaml" in files)


def test_sizes_only_when_the_fp32_model_cannot_be_built(tune_cfg, tmp_path, capsys):
    code = tune_main(tune_cfg("tune.max_auc_drop=0.001", "memory_fraction=1e-9"), SharedWork())
    assert code == 0 and "sizes only" in capsys.readouterr().out
    folder = tmp_path / "reports" / "tune" / "latest"
    _assert_rerenders(folder)
    assert not (folder / "per_table.yaml").exists()
    md = (folder / "tune.md").read_text()
    assert "**Sizes only**" in md and "not enough host memory" in md
    csv = pd.read_csv(folder / "tune.csv")
    assert set(csv["split"]) == {"none"} and csv["auc_delta"].isna().all() and len(csv) == 5
    assert not (tmp_path / "cache" / "models").exists()  # nothing was trained


def test_bad_budget_is_one_line_and_exit_2(tune_cfg, capsys):
    assert tune_main(tune_cfg("tune.max_auc_drop=0.001", "tune.max_auc_drop_relative=0.01"), SharedWork()) == 2  # two budgets
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tune.max_auc_drop=0.001" in err[0]


@pytest.mark.slow
def test_an_eval_split_too_small_to_cut_is_one_line_and_exit_2(tune_cfg, capsys):
    assert tune_main(tune_cfg("tune.max_auc_drop=0.001", "workload.eval_samples=2"), SharedWork()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "workload.eval_samples" in err[0]


def test_the_search_keeps_a_guard_so_the_held_out_check_is_likely_to_pass():
    row = Row("c", "probe", "search", 1, "fp32", "emulation", auc_delta=-0.0006, auc_delta_lo=-0.0009, auc_delta_hi=-0.0003, auc_fp32=0.8)
    coin = Budget(absolute=0.001, holdout_confidence=0.5)
    assert coin.guard(row) == pytest.approx(0.0) and coin.passes(row)
    strict = Budget(absolute=0.001, holdout_confidence=0.9)
    sd = 0.0006 / (2 * 1.959964)
    assert strict.guard(row) == pytest.approx(1.281552 * math.sqrt(2) * sd, rel=1e-5) and not strict.passes(row)
    # a held-out half twice the check quarter: its own interval is narrower, and so is the difference's noise
    sd_h = math.sqrt(0.5) * sd
    assert strict.guard(row, 0.5) == pytest.approx(1.959964 * (sd_h - sd) + 1.281552 * math.hypot(sd, sd_h), rel=1e-5)
    assert 0 < strict.guard(row, 0.5) < strict.guard(row)
    assert Budget.of(_cfg(TuneConfig(max_auc_drop=0.001))).holdout_confidence == 0.9
    with pytest.raises(UserError, match="holdout_confidence"):
        Budget.of(_cfg(TuneConfig(max_auc_drop=0.001, holdout_confidence=0.3)))


def test_an_all_fp32_choice_does_not_read_as_a_quantized_map_within_budget(tmp_path):
    """Issue 35: a +preset=tiny tune kept all 26 tables fp32 (533% of uint4's bytes) and said "within budget"."""
    from types import SimpleNamespace

    from bench.tune import summary
    from bench.tune.run import nothing_compressed

    def result(precision: str):
        chosen = SimpleNamespace(candidate="chosen", per_table={f"t{i}": precision for i in range(26)}, embedding_bytes=5.33e6, auc_delta=0.0,
                                 auc_delta_lo=0.0, auc_delta_hi=0.0, auc_fp32=0.75)
        uniform4 = SimpleNamespace(candidate="uniform int4", embedding_bytes=1e6)
        return SimpleNamespace(sizes_only=None, chosen=chosen, holdout=[chosen, uniform4], verdict="within budget", n_holdout=4096,
                               n_check=2048, budget=Budget(absolute=0.002), seconds={"total": 1.0})

    fp32 = summary(result("fp32"), tmp_path)
    assert nothing_compressed(result("fp32")) and not nothing_compressed(result("int4"))
    assert fp32.splitlines()[0].startswith("tune: within budget only because nothing was compressed (every table stays fp32) on the held-out half")
    assert "could not show any cheaper precision within the budget on its check quarter (2048 samples)" in fp32
    plain = summary(result("int4"), tmp_path)
    assert plain.splitlines()[0].startswith("tune: within budget on the held-out half") and "cheaper precision" not in plain


def test_a_stored_row_reads_back_in_the_tables_order():
    """The stored form sorts keys (t_10 before t_2): a re-render puts each map back in the tables' order."""
    names = [f"t_{i}" for i in range(12)]
    row = Row("candidate 3/9", "probe", "search", 123, "fp32", "emulation", {n: "int8" for n in names}, auc_delta=-0.001,
              auc_delta_lo=-0.002, auc_delta_hi=0.0, auc_delta_p=math.nan, auc_fp32=0.75)
    stored = RunRecord(status="ok", workload="w", backend="emulation", device="cpu", batch_size=1,
                       config={CANDIDATE: {}, ROW: {k: getattr(row, k) for k in LABELS}}, config_hash="h", env={},
                       metrics={k: getattr(row, k) for k in MEASURED})
    back = row_of(RunRecord.from_dict(json.loads(json.dumps(stored.stored_form(), sort_keys=True))), names)
    assert list(back.per_table) == names and back.embedding_bytes == 123 and math.isnan(back.auc_delta_p)
    assert dataclasses.replace(back, auc_delta_p=0.0) == dataclasses.replace(row, auc_delta_p=0.0)
