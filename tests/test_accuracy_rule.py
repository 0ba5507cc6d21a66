"""The one accuracy rule (`bench.stats.budget_verdict`) and the one pick rule (`bench.report.shipping_rank`).

Every reader judges a ΔAUC against a budget through `budget_verdict`: report.md's verdicts and bottom line,
the gate's max_auc_drop rule, tune's verdict and search check, recommend's stage 1. Changing the rule in
that one place changes every reader; and float rounding at a 0 budget reads alike everywhere.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import stats
from bench.config import GateConfig, RuleSet, auc_budget
from bench.gate.evaluate import evaluate_gate
from bench.recommend import decide
from bench.recommend.decide import Facts
from bench.report.markdown import verdict_cell
from bench.report.pick import picks
from bench.report.shipping_rank import Shippable, rank
from bench.results.table import results_table
from bench.store import read_records
from bench.tune.measured import Budget, Row

FIXTURES = Path(__file__).parent / "fixtures" / "records"
# uint4's ΔAUC in sweep_a: −0.0019 [−0.0027, −0.0011], over a 0.001 budget; int8_tbe's [−0.0006, +0.0002] is within.
UINT4 = (-0.0019, -0.0027, -0.0011)


@pytest.fixture(scope="module")
def sweep_a():
    return read_records(FIXTURES / "sweep_a" / "records.jsonl")


def readings(records, budget: float) -> dict[str, object]:
    """What each reader makes of uint4's ΔAUC at `budget`: report.md's verdict column and bottom line, the gate's
    max_auc_drop rule, tune's verdict and search check, recommend's stage 1."""
    df = results_table(records, budget=budget)
    uint4 = df[(df["backend"] == "uint4") & (df["workload"] == "synthetic") & (df["batch_size"] == 2048)].iloc[0]
    [bottom] = [p for p in picks(df, budget) if (p.workload, p.device, p.batch_size) == ("synthetic", "cpu", 2048)]
    gate = evaluate_gate(df, GateConfig(default_rules=RuleSet(max_auc_drop=budget)))
    [gate_uint4] = [v for v in gate.verdicts if (v.backend, v.workload, v.batch_size, v.rule) == ("uint4", "synthetic", 2048, "max_auc_drop")]
    d, lo, hi = UINT4
    row = Row("c", "chosen", "holdout", 1, "fp32", "uint4", auc_delta=d, auc_delta_lo=lo, auc_delta_hi=hi, auc_fp32=0.8)
    tune = Budget(absolute=budget, holdout_confidence=0.5)  # 0.5: no guard, the interval's own low end
    return {"report": uint4["budget_verdict"], "bottom line": bottom.choice and bottom.choice.backend, "gate": gate_uint4.verdict,
            "tune": tune.verdict(row), "tune search": tune.passes(row),
            "recommend": decide.inside_budget(Facts("uint4", d, lo, hi, 0.8, 1.0), budget) is None}


def test_changing_the_one_rule_changes_the_report_gate_tune_and_recommend(sweep_a, monkeypatch):
    """The rule replaced in its one place (here: one that forgives 0.002 more) moves every reader with it."""
    before = readings(sweep_a, 0.001)
    assert before == {"report": "over budget", "bottom line": "int8_tbe", "gate": "fail", "tune": "over budget",
                      "tune search": False, "recommend": False}
    rule = stats.budget_verdict
    monkeypatch.setattr(stats, "budget_verdict", lambda lo, hi, max_drop: rule(lo, hi, max_drop + 0.002))
    after = readings(sweep_a, 0.001)
    assert after == {"report": "within budget", "bottom line": "uint4", "gate": "pass", "tune": "within budget",
                     "tune search": True, "recommend": True}


def test_changing_the_rounding_tolerance_moves_every_reader_at_a_zero_budget(sweep_a, monkeypatch):
    """The rule's rounding tolerance (FP32_EQUIVALENT) is read at each call: widened to 0.003, uint4's drop is
    'rounding' at a 0 budget for every reader; at its 1e-05 it is over it for every reader (and no backend of the
    sweep is within a 0 budget: fp32_tbe's [−1.2e-05, +1.2e-05] reaches past rounding)."""
    assert readings(sweep_a, 0.0) == {"report": "over budget", "bottom line": None, "gate": "fail", "tune": "over budget",
                                      "tune search": False, "recommend": False}
    monkeypatch.setattr(stats, "FP32_EQUIVALENT", 0.003)
    assert readings(sweep_a, 0.0) == {"report": "within budget", "bottom line": "uint4", "gate": "pass", "tune": "within budget",
                                      "tune search": True, "recommend": True}


# compiled_fp32's ΔAUC at a 0 budget in a recommend run: fp32's scores up to float rounding.
ROUNDING = (-4.3e-9, -9.9e-9, 1.2e-9)


def test_an_interval_within_rounding_of_zero_is_within_a_zero_budget():
    d, lo, hi = ROUNDING
    assert stats.budget_verdict(lo, hi, 0.0) == stats.WITHIN_BUDGET
    assert stats.budget_verdict(-2e-5, -1.5e-5, 0.0) == stats.OVER_BUDGET  # past rounding: a loss
    assert stats.budget_verdict(-2e-5, 1e-6, 0.0) == stats.INCONCLUSIVE
    assert stats.budget_verdict(lo, hi, -0.001) == stats.OVER_BUDGET  # a demanded gain is read as given
    assert stats.budget_verdict(-0.0009, 0.0, 0.001) == stats.WITHIN_BUDGET  # budgets past rounding read as given
    assert stats.budget_verdict(math.nan, hi, 0.0) == stats.INCONCLUSIVE
    # recommend's stage 1 keeps it, with no "reaches 0.00000 past the 0 budget"
    assert decide.inside_budget(Facts("compiled_fp32", d, lo, hi, 0.8, 2.9), 0.0) is None
    r = decide.inside_budget(Facts("uint4", -3e-5, -5e-5, -1e-5, 0.8, 1.0), 0.0)
    assert r.reason == "ΔAUC -3e-05 [-5e-05, -1e-05]: its interval reaches 4e-05 past the 0 budget"
    assert r.needs == "accuracy.max_auc_drop=5e-05"
    assert decide.inside_budget(Facts("fp32_tbe", 0.0, -1.2e-5, 1.2e-5, 0.8, 2.9), 0.0).reason.endswith("reaches 2e-06 past the 0 budget")
    # the gate's max_auc_drop rule at 0 and report.md's gate-rule reading say the same
    row = {"workload": "w", "device": "cpu", "backend": "compiled_fp32", "batch_size": 1024, "status": "ok",
           "auc_delta": d, "auc_delta_lo": lo, "auc_delta_hi": hi}
    import pandas as pd
    gate = evaluate_gate(pd.DataFrame([row]), GateConfig(default_rules=RuleSet(max_auc_drop=0.0)))
    assert [v.verdict for v in gate.verdicts] == ["pass"]
    cell = SimpleNamespace(budget_verdict="within budget", auc_margin=0.0, auc_budget=0.001, auc_delta_lo=lo, auc_delta_hi=hi)
    assert verdict_cell(cell) == "within budget (gate rule 0: within budget)"
    # tune's verdict too
    assert Budget(absolute=0.0).verdict(Row("c", "chosen", "holdout", 1, "fp32", "x", auc_delta=d, auc_delta_lo=lo,
                                            auc_delta_hi=hi, auc_fp32=0.8)) == "within budget"


def test_one_pick_rule_with_the_measure_as_its_parameter():
    """The bottom line's measure (the smallest) and another (here: the most QPS) rank the same candidates; the budget
    filters by the one accuracy rule; ties fall to the smaller drop, the fewer bytes, then the name."""
    a = Shippable("a", "a", -0.0005, -0.0008, -0.0002, 1.0)
    b = Shippable("b", "b", -0.0001, -0.0003, 0.0001, 2.0)
    c = Shippable("c", "c", -0.002, -0.003, -0.001, 0.5)  # over a 0.001 budget
    qps = {"a": 100.0, "b": 300.0, "c": 900.0}
    assert [s.item for s in rank([a, b, c], 0.001)] == ["a", "b"]
    assert [s.item for s in rank([a, b, c], 0.001, lambda s: (-qps[s.item],))] == ["b", "a"]
    assert [s.item for s in rank([a, b, c], None, lambda s: (-qps[s.item],))] == ["c", "b", "a"]  # judged before
    twin = Shippable("twin", "twin", -0.0005, -0.0008, -0.0002, 1.0)
    assert [s.item for s in rank([twin, a], 0.001)] == ["a", "twin"]


def test_the_budget_is_resolved_in_one_place():
    compare = SimpleNamespace(max_auc_drop=0.001)
    assert auc_budget(SimpleNamespace(compare=compare)) == ("compare.max_auc_drop", 0.001)
    assert auc_budget(SimpleNamespace(compare=compare, accuracy=SimpleNamespace(max_auc_drop=0.0))) == ("accuracy.max_auc_drop", 0.0)
    tune = SimpleNamespace(max_auc_drop=None, max_auc_drop_relative=0.01)
    assert auc_budget(SimpleNamespace(compare=compare, tune=tune)) == ("tune.max_auc_drop_relative", 0.01)
