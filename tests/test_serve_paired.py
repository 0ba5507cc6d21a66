"""Paired Server searches (bench.serve.paired): the ABBA interleaving, the confirmation runs at the bracket ends
and the ends they overturn, the time budget, and the ratio's interval, driven by stand-in steps that judge fixed
limits (with transients injected as scripted verdicts, no timing), and paired jobs through the real LoadGen."""

from pathlib import Path

import pytest

from bench.serve.paired import CANDIDATE, CONFIRM, CONFIRM_DRAW, HIGH, HOLD, LOW, REFERENCE, REOPEN_STEPS, SEARCH, interleave, order
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


def test_a_side_whose_search_ended_confirms_its_ends_beside_the_other_sides_runs():
    # fp32's search from 200 ends in 2 targets (200 VALID, 300 INVALID; with resolution 0.6 the bracket is
    # done); the candidate's climbs from 20 for longer: each of its later runs sits beside an fp32 confirmation
    # run, at fp32's max and at its INVALID end in turn; then both confirm theirs until each end has 2.
    run, made = recorder({CANDIDATE: 137, REFERENCE: 250})
    p = interleave(plan(20, 0.6), plan(200, 0.6), run)
    searching = max(i for i, m in enumerate(made) if m[3] == SEARCH and m[0] == CANDIDATE)
    early = [m for m in made[:searching] if m[3] == CONFIRM]
    assert early and all(m[0] == REFERENCE for m in early)
    assert [m[1] for m in early] == [200, 300, 200, 300, 200, 300, 200, 300][:len(early)]  # its max first, then in turn
    confirms = {side: [m for m in made if m[3] == CONFIRM and m[0] == side] for side in (CANDIDATE, REFERENCE)}
    assert [m[2] for m in confirms[REFERENCE]] == list(range(CONFIRM_DRAW, CONFIRM_DRAW + len(confirms[REFERENCE])))  # fresh schedules
    assert len([m for m in made if m[0] == CANDIDATE]) == len([m for m in made if m[0] == REFERENCE])  # every run has a partner
    for side, search in ((CANDIDATE, p.candidate), (REFERENCE, p.reference)):
        ends = p.ends[side]
        assert set(ends) == {LOW, HIGH} and all(len(j.confirmations) >= 2 for j in ends.values())
        assert not any(j.overturned for j in ends.values())  # a fixed limit: every confirmation agrees
    assert p.reference.highest_valid == 200 and p.reference.lowest_invalid == 300
    assert p.as_metrics()["confirm_reference"].startswith("VALID 1/1 at 200, confirmed VALID ")
    assert [r["role"] for r in p.runs].count(CONFIRM) == sum(len(c) for c in confirms.values())


def scripted(limits, flips=()):
    """Stand-in runs VALID at or below each side's limit, except the runs named in `flips` (side, role, target, the
    n-th run of that side, role and target, 0 first), whose verdict is the other one: a transient on that run alone."""
    made, seen = [], {}

    def run(side, qps, draw, role):
        key = (side, role, qps)
        n = seen[key] = seen.get(key, -1) + 1
        valid = (qps <= limits[side]) != ((side, role, qps, n) in flips)
        made.append((side, qps, role, "VALID" if valid else "INVALID"))
        return {"target_qps": qps, "validity": "VALID" if valid else "INVALID"}

    return run, made


def test_a_transient_that_set_one_sides_invalid_end_is_overturned_by_its_confirmations():
    # The candidate (limit 200) climbs 50, 75, 112, 168: a transient fails its one run at 168 (judgments=1), so
    # its search ends at 160 below an INVALID 168. fp32's confirmations hold; the candidate's two at 168 pass:
    # 168 is overturned, its max rises to 168 with the upper end open, and the ratio with it.
    run, made = scripted({CANDIDATE: 200, REFERENCE: 100}, {(CANDIDATE, SEARCH, 168, 0)})
    p = interleave(plan(50), plan(50), run)
    j = p.candidate.judgment(168)
    assert j.searched == "INVALID" and j.overturned and j.verdict == "VALID"
    assert [s["validity"] for s in j.confirmations] == ["VALID", "VALID"]
    assert p.max_qps == 168 and p.candidate.lowest_invalid is None and p.interval[1] is None
    assert p.ratio == pytest.approx(168 / p.reference_max_qps)
    assert "INVALID 1/1 at 168, confirmed VALID 2/2: overturned to VALID" in p.as_metrics()["confirm_candidate"]
    assert p.as_metrics()["overturned"] == {CANDIDATE: [168], REFERENCE: []}
    # the runs alternate in ABBA order throughout, confirmations included
    sides = [m[0] for m in made]
    assert all(tuple(sides[i:i + 2]) == order(i // 2) for i in range(0, len(sides), 2))


def test_a_transient_on_one_confirmation_run_does_not_overturn_an_end():
    # One of the candidate's two confirmations at its max fails: no strict majority against the search's VALID.
    run, _ = scripted({CANDIDATE: 137, REFERENCE: 211})
    clean = interleave(plan(50), plan(50), run)
    top = clean.candidate.highest_valid
    run, _ = scripted({CANDIDATE: 137, REFERENCE: 211}, {(CANDIDATE, CONFIRM, top, 0)})
    p = interleave(plan(50), plan(50), run)
    assert [s["validity"] for s in p.candidate.judgment(top).confirmations][:2] == ["INVALID", "VALID"]
    assert p.max_qps == top and not p.candidate.judgment(top).overturned


def test_a_max_that_fails_its_confirmations_falls_to_the_next_valid_target():
    # A transient passed the candidate's run at 152 (its limit is 140): its max was 152. Both confirmations there fail.
    run, _ = scripted({CANDIDATE: 140, REFERENCE: 211}, {(CANDIDATE, SEARCH, 152, 0)})
    p = interleave(plan(50), plan(50), run)
    j = p.candidate.judgment(152)
    assert j.overturned and j.verdict == "INVALID" and {s["validity"] for s in j.confirmations} == {"INVALID"}
    assert p.max_qps == 137 and p.candidate.lowest_invalid == 152


def reopen(side, search, left):
    return search_plan(0.0, 1.5, 0.1, len(search.judged) + REOPEN_STEPS, 1, round_qps, prior=search)


def test_a_max_overturned_with_no_valid_target_below_reopens_its_search_downwards():
    # The candidate (limit 140) starts at 150, where a transient passes its one run: VALID 150, then INVALID
    # 225, 184, 166, 158. Its two confirmations at 150 fail: 150 is overturned, and no target below it was judged.
    flips = {(CANDIDATE, SEARCH, 150, 0)}
    run, _ = scripted({CANDIDATE: 140, REFERENCE: 211}, flips)
    folded = interleave(plan(150), plan(50), run)
    assert folded.candidate.judgment(150).overturned and folded.max_qps == 0 and folded.ratio is None  # without re-opening
    run, made = scripted({CANDIDATE: 140, REFERENCE: 211}, flips)
    p = interleave(plan(150), plan(50), run, reopen=reopen)
    # re-opened: down by the factor from the overturned 150 (100, VALID), then the bracket's middle (122, VALID)
    assert p.reopened == {CANDIDATE: [100, 122], REFERENCE: []} and p.max_qps == 122 and p.candidate.lowest_invalid == 150
    assert p.ratio == pytest.approx(122 / p.reference_max_qps) and p.as_metrics()["reopened"][CANDIDATE] == [100, 122]
    tail = made[-4:]  # the re-opened search's runs, each beside an fp32 hold run at its max, in ABBA order
    assert sorted((m[0], m[2]) for m in tail) == sorted([(CANDIDATE, SEARCH)] * 2 + [(REFERENCE, HOLD)] * 2)
    assert all(m[1] == p.reference_max_qps for m in tail if m[2] == HOLD)
    sides = [m[0] for m in made]
    assert all(tuple(sides[i:i + 2]) == order(i // 2) for i in range(0, len(sides), 2))


def test_the_serving_job_reopens_with_its_own_search_rules_and_the_seconds_left():
    # bench.serve.scenario.reopener: a search whose max 150 was overturned goes on down by serve.qps_factor,
    # its first target made whatever the seconds left, the next one only if it fits in them.
    from bench.config.schema import ServeConfig
    from bench.serve.qps_search import Judgment, Search
    from bench.serve.scenario import reopener

    search = Search([Judgment(150, [{"target_qps": 150, "validity": "VALID"}], overturned=True),
                     Judgment(225, [{"target_qps": 225, "validity": "INVALID"}])])
    plan = reopener(ServeConfig(judgments=1), lambda qps: 10.0)("candidate", search, 5.0)
    assert next(plan) == (100, 0)  # 150 / 1.5, though one run (10 s) is more than the 5 s left
    with pytest.raises(StopIteration) as end:
        plan.send({"target_qps": 100, "validity": "VALID"})
    assert "past 5 s" in end.value.value.stop and end.value.value.highest_valid == 100


def test_ends_that_both_sides_reverse_the_same_way_are_kept():
    # A slow phase during the confirmations fails every run at both sides' max: the host moved, not one side.
    run, _ = scripted({CANDIDATE: 137, REFERENCE: 211})
    clean = interleave(plan(50), plan(50), run)
    c_top, r_top = clean.candidate.highest_valid, clean.reference.highest_valid
    slow = {(side, CONFIRM, q, n) for side, q in ((CANDIDATE, c_top), (REFERENCE, r_top)) for n in range(10)}
    run, _ = scripted({CANDIDATE: 137, REFERENCE: 211}, slow)
    p = interleave(plan(50), plan(50), run)
    assert (p.max_qps, p.reference_max_qps) == (c_top, r_top) and p.ratio == clean.ratio
    assert p.kept == {CANDIDATE: [c_top], REFERENCE: [r_top]}
    assert "kept at" in p.as_metrics()["confirm_candidate"]


def test_a_side_that_met_no_load_is_tried_again_at_its_lowest_target_and_has_no_ratio_if_it_still_fails():
    # min_qps 45 from 50: one INVALID run at 50 ends the candidate's search with no load met.
    lowest = lambda: search_plan(50, 1.5, 0.1, 20, 45, round_qps)  # noqa: E731
    run, _ = scripted({CANDIDATE: 60, REFERENCE: 211}, {(CANDIDATE, SEARCH, 50, 0)})  # a transient failed it
    p = interleave(lowest(), plan(50), run)
    assert p.candidate.judgment(50).overturned and p.max_qps == 50 and p.ratio == pytest.approx(50 / p.reference_max_qps)
    assert p.no_load() is None
    run, _ = scripted({CANDIDATE: 40, REFERENCE: 211})  # truly below 50
    p = interleave(lowest(), plan(50), run)
    assert p.max_qps == 0 and p.ratio is None  # not 0: its max lies somewhere below 50
    assert p.interval == (0.0, pytest.approx(50 / p.reference_max_qps))
    assert p.no_load() == "the candidate met no load, down to 50 QPS" and p.as_metrics()["qps_ratio"] is None
    assert len(p.candidate.judgment(50).confirmations) >= 2


def test_confirmation_rounds_stop_before_a_side_would_pass_its_time_budget():
    # Every run lasts 10 s. Without a budget each end gets 2 confirmations; with 150 s a side, the rounds after
    # both searches stop as soon as one side's next run would take it past 150 s.
    run, made = scripted({CANDIDATE: 137, REFERENCE: 211})
    free = interleave(plan(50), plan(50), run)
    searched = {side: sum(1 for m in made if m[0] == side and m[2] == SEARCH) for side in (CANDIDATE, REFERENCE)}
    assert free.needs_confirmation() is False
    limit = 10.0 * max(searched.values()) + 10.0 * 3
    run, made = scripted({CANDIDATE: 137, REFERENCE: 211})
    p = interleave(plan(50), plan(50), run, budget=(limit, lambda qps: 10.0))
    spent = {side: 10.0 * sum(1 for m in made if m[0] == side) for side in (CANDIDATE, REFERENCE)}
    last = max(r["round"] for r in p.runs if r["role"] == SEARCH)
    after = [r for r in p.runs if r["round"] > last]
    assert after and all(r["role"] == CONFIRM for r in after)
    assert max(spent.values()) <= limit and max(spent.values()) + 10.0 > limit  # it stopped at the budget, not before
    assert p.needs_confirmation()  # the budget, not the count, ended them
    # confirm_runs=0: no rounds after the searches and nothing overturned, whatever the confirmations said
    run, made = scripted({CANDIDATE: 200, REFERENCE: 100}, {(CANDIDATE, SEARCH, 168, 0)})
    p = interleave(plan(50), plan(50), run, confirm_runs=0)
    assert p.max_qps == 160 and not any(j.overturned for ends in p.ends.values() for j in ends.values())
    assert max(r["round"] for r in p.runs) == max(r["round"] for r in p.runs if r["role"] == SEARCH)


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
    assert p.no_load() == "the reference met no load, down to 25 QPS"


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
    assert len(m["steps"]) >= 2 and len(ref["steps"]) >= 2 and p["reference_backend"] == "fp32"
    assert [s["target_qps"] for s in m["steps"]] == [r["target_qps"] for r in p["runs"] if r["side"] == CANDIDATE and r["role"] == SEARCH][:2]
    # then each side's bracket ends confirmed (2 runs at each, a re-opened search's runs and hold runs after them)
    confirmed = p["confirm_steps"]
    for side in (CANDIDATE, REFERENCE):
        assert len(confirmed[side]) >= 2 and all(s["validity"] in ("VALID", "INVALID") and s["draw"] >= CONFIRM_DRAW for s in confirmed[side])
        assert [r["target_qps"] for r in p["runs"] if r["side"] == side and r["role"] == CONFIRM] == [s["target_qps"] for s in confirmed[side]]
    assert [Path(s["log_dir"]).name.split("_")[0] for s in confirmed[CANDIDATE]] == [f"confirm{n}" for n in range(1, len(confirmed[CANDIDATE]) + 1)]
    assert all(Path(s["log_dir"]).parent.name == "fp32" for s in confirmed[REFERENCE])
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
    assert len(m["steps"]) >= 2 and len(ref["steps"]) >= 2 and all(s["scenario"] == "Server" for s in m["steps"] + ref["steps"])
    assert m["reference_max_qps"] == ref["max_qps"] and m["max_qps"] == (m["max_qps_lo"] or 0.0)
    assert (m["qps_ratio"] is None) == (ref["max_qps"] == 0)
    names = {p.name for p in (tmp_path / "logs").iterdir()}
    made = [m["steps"], m["paired"]["confirm_steps"]["candidate"]]
    assert names == {"fp32"} | {Path(s["log_dir"]).name for steps in made for s in steps} | {
        f"hold{n}_{r['target_qps']:g}qps" for n, r in enumerate((r for r in m["paired"]["runs"] if r["side"] == CANDIDATE and r["role"] == "hold"), 1)}
    assert "server_step1_150qps" in names
    assert m["warm_up"]["capacity_samples_per_s"] > 0 and ref["warm_up"]["capacity_samples_per_s"] > 0
