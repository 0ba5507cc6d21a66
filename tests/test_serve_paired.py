"""Paired Server searches (bench.serve.paired): the ABBA interleaving, the hold runs and the ratio's interval,
driven by stand-in steps that judge fixed limits, and one paired job through the real LoadGen."""

import pytest

from bench.serve.paired import CANDIDATE, HOLD, REFERENCE, SEARCH, interleave, order
from bench.serve.qps_search import search_plan
from bench.serve.scenario import round_qps
from tests.test_faults import fast_cfg, fast_models  # noqa: F401 (fixtures)
from tests.test_serve import TINY_SERVE


@pytest.fixture
def serve_cfg(fast_cfg):  # noqa: F811
    return lambda *more: fast_cfg(*TINY_SERVE, *more)


def judge(limit):
    """A step VALID at or below `limit` QPS."""
    return lambda qps: {"target_qps": qps, "validity": "VALID" if qps <= limit else "INVALID", "latency_ms": {"p99": qps / limit * 50}}


def plan(start, resolution=0.1):
    return search_plan(start, 1.5, resolution, 20, 1, round_qps)


def recorder(limits):
    made = []

    def run(side, qps, draw, role):
        made.append((side, qps, draw, role))
        return judge(limits[side])(qps)

    return run, made


def test_each_round_runs_both_sides_in_abba_order():
    assert [order(r) for r in range(4)] == [(CANDIDATE, REFERENCE), (REFERENCE, CANDIDATE)] * 2
    run, made = recorder({CANDIDATE: 137, REFERENCE: 211})
    p = interleave(plan(50), plan(50), run)
    sides = [m[0] for m in made]
    assert sides[:8] == [CANDIDATE, REFERENCE, REFERENCE, CANDIDATE, CANDIDATE, REFERENCE, REFERENCE, CANDIDATE]
    assert len(sides) % 2 == 0 and all(sorted(sides[i:i + 2]) == [CANDIDATE, REFERENCE] for i in range(0, len(sides), 2))
    assert [r["round"] for r in p.runs] == [i // 2 for i in range(len(made))]


def test_each_search_is_the_search_it_would_be_alone():
    from bench.serve.qps_search import find_max_qps

    run, made = recorder({CANDIDATE: 137, REFERENCE: 211})
    p = interleave(plan(50), plan(80), run)
    for side, start, limit, got in ((CANDIDATE, 50, 137, p.candidate), (REFERENCE, 80, 211, p.reference)):
        alone = find_max_qps(lambda q, n: judge(limit)(q), start, 1.5, 0.1, 20, 1, round_qps)
        assert [j.target_qps for j in got.judged] == [j.target_qps for j in alone.judged]
        assert [m[1] for m in made if m[0] == side and m[3] == SEARCH] == [j.target_qps for j in alone.judged]
        assert got.highest_valid <= limit < got.lowest_invalid


def test_a_side_whose_search_ended_holds_its_max_beside_the_other_sides_runs():
    # fp32's search from 200 ends in 2 targets (200 VALID, 300 INVALID; with resolution 0.6 the bracket is
    # done); the candidate's climbs from 20 for longer: each of its later runs sits beside an fp32 hold run at 200.
    run, made = recorder({CANDIDATE: 137, REFERENCE: 250})
    p = interleave(plan(20, 0.6), plan(200, 0.6), run)
    holds = [m for m in made if m[3] == HOLD]
    assert holds and all(m[0] == REFERENCE and m[1] == 200 for m in holds)
    assert [m[2] for m in holds] == list(range(100, 100 + len(holds)))  # fresh schedules, apart from the search's draws
    assert len([m for m in made if m[0] == CANDIDATE]) == len([m for m in made if m[0] == REFERENCE])
    assert p.hold_evidence(REFERENCE) == f"held {len(holds)}/{len(holds)} at 200" and p.hold_evidence(CANDIDATE) is None
    assert p.reference.highest_valid == 200 and p.reference.lowest_invalid == 300  # holds do not change its verdict


def test_the_ratio_and_the_interval_both_brackets_allow():
    run, _ = recorder({CANDIDATE: 137, REFERENCE: 211})
    p = interleave(plan(50), plan(50), run)
    c, r = p.candidate, p.reference
    assert p.ratio == pytest.approx(c.highest_valid / r.highest_valid)
    low, high = p.interval
    assert low == pytest.approx(c.highest_valid / r.lowest_invalid) and high == pytest.approx(c.lowest_invalid / r.highest_valid)
    assert low <= 137 / 211 <= high and low < p.ratio < high
    m = p.as_metrics()
    assert (m["qps_ratio"], m["qps_ratio_lo"], m["qps_ratio_hi"]) == (p.ratio, low, high) and m["reference_max_qps"] == r.highest_valid


def test_open_ends_when_a_bracket_is_open():
    # the candidate never INVALID within max_steps: its upper end is unknown, so is the ratio's
    run, _ = recorder({CANDIDATE: 10_000, REFERENCE: 211})
    p = interleave(search_plan(50, 1.5, 0.1, 3, 1, round_qps), plan(50), run)
    assert p.candidate.lowest_invalid is None and p.interval[1] is None and p.interval[0] > 0
    # fp32 met no load: no ratio
    run, _ = recorder({CANDIDATE: 137, REFERENCE: 0.1})
    p = interleave(plan(50), search_plan(50, 2.0, 0.1, 20, 20, round_qps), run)
    assert p.reference_max_qps == 0 and p.ratio is None and p.interval[1] is None
    assert not p.holds[REFERENCE]  # a side that met no load makes no hold runs: it has no max to hold


@pytest.mark.slow
def test_a_paired_server_job_through_loadgen(serve_cfg):
    # int8_tbe's search and fp32's, each two targets of one run, interleaved in one process: four runs
    # C R R C, fp32's in its own log folder; the ratio is the two max QPS's, whatever LoadGen judged.
    from pathlib import Path

    from bench.runner import run_job

    record, exc = run_job(serve_cfg("backend=int8_tbe"))
    assert exc is None and record.status == "ok", record.error
    m = record.metrics
    p = m["paired"]
    assert [(r["side"], r["role"]) for r in p["runs"]][:4] == [(CANDIDATE, SEARCH), (REFERENCE, SEARCH), (REFERENCE, SEARCH), (CANDIDATE, SEARCH)]
    ref = p["reference"]
    assert len(m["steps"]) == 2 and len(ref["steps"]) == 2 and p["reference_backend"] == "fp32"
    assert [s["target_qps"] for s in m["steps"]] == [r["target_qps"] for r in p["runs"] if r["side"] == CANDIDATE]
    for s in ref["steps"]:
        assert Path(s["log_dir"]).parent.name == "fp32" and s["validity"] in ("VALID", "INVALID") and "late" in s
    assert m["reference_max_qps"] == ref["max_qps"] and ref["warm_up"]["capacity_samples_per_s"] > 0
    from bench.report.summary import serving_summary

    assert "  fp32 searched beside it: max QPS " in serving_summary(record)
    if ref["max_qps"] > 0:
        assert m["qps_ratio"] == pytest.approx(m["max_qps"] / ref["max_qps"])
    else:
        assert m["qps_ratio"] is None


@pytest.mark.slow
def test_serve_paired_false_runs_one_search_and_fp32_is_never_paired(serve_cfg):
    from bench.runner import run_job

    alone, _ = run_job(serve_cfg("backend=int8_tbe", "serve.paired=false"))
    fp32, _ = run_job(serve_cfg("backend=fp32"))
    assert "paired" not in alone.metrics and alone.metrics["unpaired"] == "serve.paired=false" and len(alone.metrics["steps"]) == 2
    assert "paired" not in fp32.metrics and fp32.metrics["unpaired"] == "this is the reference"


@pytest.mark.slow
def test_paired_max_qps_over_two_prepared_modules(serve_cfg, tmp_path):
    # The public call a caller outside a serving sweep makes: two prepared modules, both searches, the ratio.
    import torch

    from bench import registry
    from bench.pipeline.job import backend_config
    from bench.pipeline.shared import SharedWork
    from bench.serve import paired_max_qps

    cfg = serve_cfg("backend=uint4", "serve.scenario=offline")  # the Server scenario is used whatever it says
    work, device = SharedWork(), torch.device("cpu")
    workload = work.workload(cfg)
    model = work.model(cfg, workload)
    uint4 = registry.get("backend", "uint4").factory(backend_config({"name": "uint4"}))
    candidate = work.prepared(cfg, uint4, model, workload, device)
    reference = work.reference(cfg, registry.get("backend", "fp32").factory(backend_config({"name": "fp32"})), model, device)
    m = paired_max_qps(cfg, candidate, reference, device, work, logs=tmp_path / "logs")
    ref = m["paired"]["reference"]
    assert len(m["steps"]) == 2 and len(ref["steps"]) == 2 and all(s["scenario"] == "Server" for s in m["steps"] + ref["steps"])
    assert m["reference_max_qps"] == ref["max_qps"] and m["max_qps"] == (m["max_qps_lo"] or 0.0)
    assert (m["qps_ratio"] is None) == (ref["max_qps"] == 0)
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["fp32", "server_step1_150qps", "server_step2_" + m["steps"][1]["log_dir"].split("server_step2_")[1]]
    assert m["warm_up"]["capacity_samples_per_s"] > 0 and ref["warm_up"]["capacity_samples_per_s"] > 0
