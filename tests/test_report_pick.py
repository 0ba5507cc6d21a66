"""The bottom line (bench.report.pick): the smallest model inside one accuracy budget, or why none."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from bench.report.pick import bottom_line, picks
from bench.results.table import results_table
from bench.store import read_records

FIXTURES = Path(__file__).parent / "fixtures" / "records"


@pytest.fixture(scope="module")
def sweep_a():
    return read_records(FIXTURES / "sweep_a" / "records.jsonl")


def pick_of(records, budget, workload="synthetic", device="cpu", batch_size=2048):
    [p] = [p for p in picks(results_table(records, budget=budget), budget)
           if (p.workload, p.device, p.batch_size) == (workload, device, batch_size)]
    return p


def test_the_budget_decides_the_pick(sweep_a):
    # int8_tbe's ΔAUC [−0.0006, +0.0002] is within 0.001, uint4's [−0.0027, −0.0011] is not: int8_tbe, then fp32_tbe
    tight = pick_of(sweep_a, 0.001)
    assert (tight.choice.backend, tight.runner_up.backend, tight.reason) == ("int8_tbe", "fp32_tbe", None)
    # with 0.01, uint4 is inside too and has fewer bytes (fake_quant stores fp32 tables): uint4, then int8_tbe
    loose = pick_of(sweep_a, 0.01)
    assert (loose.choice.backend, loose.runner_up.backend) == ("uint4", "int8_tbe")
    assert loose.choice.compression > tight.choice.compression > 1


def test_no_backend_inside_the_budget_names_none(sweep_a):
    kept = [r for r in sweep_a if r.backend != "fp32_tbe"]
    p = pick_of(kept, 0.0001)
    assert p.choice is None and "no backend is within the 0.0001 budget" in p.reason and "int8_tbe" in p.reason  # inconclusive
    assert p.line().endswith("stay on fp32.")


def test_an_undecided_speed_is_said_instead_of_a_pick(sweep_a):
    records = copy.deepcopy(sweep_a)
    int8 = next(r for r in records if (r.workload, r.backend, r.batch_size) == ("synthetic", "int8_tbe", 2048) and r.status == "ok")
    int8.created_at = "2999-01-01T00:00:00+00:00"
    int8.metrics.update(speedup=1.02, speedup_lo=0.9, speedup_hi=1.15)  # straddles the 5% margin
    p = pick_of([*records, int8], 0.001)
    assert p.choice is None and "int8_tbe is the smallest within the 0.001 budget" in p.reason and "undecided" in p.reason


def test_the_bottom_line_states_its_budget_and_where_the_gain_comes_from(sweep_a):
    lines = bottom_line(results_table(sweep_a, budget=0.01), 0.01)
    assert lines[0].startswith("Bottom line (accuracy budget: an AUC drop of at most 0.01 against fp32, compare.max_auc_drop")
    assert any("synthetic on cpu, batch 2048: **uint4**" in x for x in lines)
    [source] = [x for x in lines if x.startswith("- Where the gain comes from (synthetic on cpu)")]
    assert "table batching (fp32_tbe vs fp32)" in source and "int8_tbe / fp32_tbe" in source


def test_where_the_gain_comes_from_reads_each_batching_speedup_off_its_interval(sweep_a):
    records = copy.deepcopy(sweep_a)
    tbe = next(r for r in records if (r.workload, r.backend, r.batch_size) == ("synthetic", "fp32_tbe", 256))
    tbe.metrics.update(speedup=1.02, speedup_lo=0.95, speedup_hi=1.1)  # undecided at 256
    lines = bottom_line(results_table(records, budget=0.001), 0.001)
    [source] = [x for x in lines if x.startswith("- Where the gain comes from (synthetic on cpu)")]
    assert "table batching is a gain beyond noise at batch 2048 only" in source
