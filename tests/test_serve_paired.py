"""Paired Server searches (bench.serve.paired): the ABBA interleaving, the paired staircases that track both
sides' limits after their searches and the ratio they measure, the time budget and round cap, driven by
stand-in steps that judge fixed limits (transients injected as scripted verdicts, no timing); a seeded
simulation of a host whose speed moves in phases, the instrument check of the ratio; and paired jobs
through the real LoadGen."""

import math
import random

import pytest
from scipy import stats

from pathlib import Path

from bench.serve.paired import (CANDIDATE, LEVELS, LOGISTIC, MIN_ROUNDS, NOT_ENOUGH, REFERENCE, SEARCH, STILL_WALKING, TRACK, TRACK_DRAW,
                                TRACK_ROUNDS, TRACK_STEP, Evidence, interleave, order, rerun_interval)
from bench.config.schema import ServeConfig
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


def plan(start, resolution=0.1, budget=None):
    return search_plan(start, 1.5, resolution, 20, 1, round_qps, None, budget)


def recorder(limits, script=None):
    """Runs judged against fixed limits; `script` maps (side, n-th tracking run of it) to a forced verdict."""
    made = []

    def run(side, qps, draw, role):
        made.append((side, qps, draw, role))
        step = judge(limits[side])(qps)
        n = sum(1 for m in made if m[0] == side and m[3] == TRACK) - 1
        if role == TRACK and script and (side, n) in script:
            step["validity"] = script[side, n]
        return step

    return run, made


def test_each_round_runs_both_sides_in_abba_order():
    assert [order(r) for r in range(4)] == [(CANDIDATE, REFERENCE), (REFERENCE, CANDIDATE)] * 2
    run, made = recorder({CANDIDATE: 137, REFERENCE: 211})
    p = interleave(plan(50), plan(50), run, track_rounds=6)
    sides = [m[0] for m in made]
    assert sides[:8] == [CANDIDATE, REFERENCE, REFERENCE, CANDIDATE, CANDIDATE, REFERENCE, REFERENCE, CANDIDATE]
    assert len(sides) % 2 == 0 and all(sorted(sides[i:i + 2]) == [CANDIDATE, REFERENCE] for i in range(0, len(sides), 2))
    assert [r["round"] for r in p.runs] == [i // 2 for i in range(len(made))]
    tracking = [m for m in made if m[3] == TRACK]
    assert tracking[-12:] == [m for m in made[-12:]]  # the last 6 rounds: both sides tracking, still ABBA


def test_each_search_is_the_search_it_would_be_alone():
    from bench.serve.qps_search import find_max_qps

    run, made = recorder({CANDIDATE: 137, REFERENCE: 211})
    p = interleave(plan(50), plan(80), run)
    for side, start, limit, got in ((CANDIDATE, 50, 137, p.candidate), (REFERENCE, 80, 211, p.reference)):
        alone = find_max_qps(lambda q, n: judge(limit)(q), start, 1.5, 0.1, 20, 1, round_qps)
        assert [j.target_qps for j in got.judged] == [j.target_qps for j in alone.judged]
        assert [m[1] for m in made if m[0] == side and m[3] == SEARCH] == [j.target_qps for j in alone.judged]
        assert got.highest_valid <= limit < got.lowest_invalid


def test_a_side_whose_search_ended_tracks_from_its_max_beside_the_other_sides_search():
    # fp32's search from 200 ends in 2 targets (200 VALID, 300 INVALID, resolution 0.6); the candidate's climbs
    # from 20 for longer: each of its later runs sits beside an fp32 tracking run, up a step after VALID, down after INVALID.
    run, made = recorder({CANDIDATE: 137, REFERENCE: 210})
    p = interleave(plan(20, 0.6), plan(200, 0.6), run, track_step=0.04, track_rounds=4)
    searching = max(i for i, m in enumerate(made) if m[3] == SEARCH and m[0] == CANDIDATE)
    early = [m for m in made[:searching] if m[3] == TRACK]
    assert early and all(m[0] == REFERENCE for m in early)
    assert [m[1] for m in early][:4] == pytest.approx([200, 208, 216.32, 208][:len(early)])  # 200 x 1.04 VALID, x 1.04 INVALID, back
    assert [m[2] for m in made if m[0] == REFERENCE and m[3] == TRACK] == list(range(TRACK_DRAW, TRACK_DRAW + len(p.tracks[REFERENCE].runs)))
    assert len([m for m in made if m[0] == CANDIDATE]) == len([m for m in made if m[0] == REFERENCE])  # every run has a partner
    assert p.reference.highest_valid == 200 and p.reference.lowest_invalid == 300  # the bracket is the search's, untouched
    assert len(p.joint_rounds) == 4


def test_a_round_where_both_fail_moves_both_down_and_keeps_their_ratio():
    # Both at their limits (100 and 200, searches that end exactly there); in one tracking round the host
    # slows and both runs fail: both levels step down, the ratio of the loads run stays 0.5.
    run, made = recorder({CANDIDATE: 100, REFERENCE: 200}, {(CANDIDATE, 2): "INVALID", (REFERENCE, 2): "INVALID"})
    p = interleave(iter_plan(100), iter_plan(200), run, track_step=0.05, track_rounds=8)
    c, r = p.tracks[CANDIDATE], p.tracks[REFERENCE]
    assert c.runs[2]["moved"] == r.runs[2]["moved"] == -1
    assert [round(x, 6) for x in p.round_ratios(p.joint_rounds)] == [0.5] * len(p.joint_rounds)
    assert p.ratio == pytest.approx(0.5)


def test_a_one_sided_transient_moves_one_level_one_step_and_no_more():
    clean_run, _ = recorder({CANDIDATE: 100, REFERENCE: 200})
    clean = interleave(iter_plan(100), iter_plan(200), clean_run, track_step=0.05, track_rounds=8)
    run, _ = recorder({CANDIDATE: 100, REFERENCE: 200}, {(CANDIDATE, 3): "INVALID"})
    hit = interleave(iter_plan(100), iter_plan(200), run, track_step=0.05, track_rounds=8)
    c0, c1 = clean.tracks[CANDIDATE].runs, hit.tracks[CANDIDATE].runs
    assert c1[4]["target_qps"] == pytest.approx(c0[4]["target_qps"] / 1.05 ** (2 if c0[3]["moved"] == 1 else 0), rel=1e-9)
    assert [r["target_qps"] for r in hit.tracks[REFERENCE].runs] == [r["target_qps"] for r in clean.tracks[REFERENCE].runs]
    # one step of 5% on one side moves the ratio by at most 5% in the rounds it touches, and the estimate by less
    assert abs(hit.ratio / clean.ratio - 1) <= 0.05


def iter_plan(limit):
    """A search that ends with its max exactly at `limit` (VALID at limit, INVALID 5% above)."""
    return search_plan(limit, 1.05, 0.1, 2, 1)


def test_tracking_stops_at_the_evidence_whatever_a_run_costs():
    # Fixed limits 100 and 200: each staircase reverses from its second run on. Tracking stops once 6 joint rounds
    # after both first reversals (and 2 reversals a side) are in, whether a run takes 4 s or 12 s, within the cap.
    made_by_cost = {}
    for cost in (4.0, 12.0):
        run, made = recorder({CANDIDATE: 100, REFERENCE: 200})
        p = interleave(iter_plan(100), iter_plan(200), run, (1000.0, lambda q, c=cost: c))
        assert p.enough and "the evidence" in p.stop and len(p.used_rounds) == MIN_ROUNDS
        assert all(n >= 2 for n in p.reversals().values()) and p.ratio == pytest.approx(0.5, rel=0.05)
        made_by_cost[cost] = len(made)
    assert made_by_cost[4.0] == made_by_cost[12.0]


def test_a_level_that_ends_six_steps_one_way_says_its_limit_was_still_moving():
    # Fixed limits: both staircases settle and end reversing, nothing said. Then fp32's limit rises 5% a run from its
    # 4th tracking run on (the host got faster for it): its level climbs every run to the end, and the record says so.
    run, _ = recorder({CANDIDATE: 100, REFERENCE: 200})
    settled = interleave(iter_plan(100), iter_plan(200), run, track_step=0.04, track_rounds=20)
    assert settled.still_walking() is None and settled.as_metrics()["still_walking"] is None
    assert all(abs(w) < 6 for w in settled.as_metrics()["track_walk"].values())
    rising = []

    def climbing(side, qps, draw, role):
        if side == CANDIDATE:
            return judge(100)(qps)
        rising.extend([qps] if role == TRACK else [])
        return judge(200 * 1.05 ** max(0, len(rising) - 4))(qps)

    # the limit outruns the 4% step for good: with the evidence at 12 joint rounds, it is in while the level walks, and
    # tracking follows the walk to the round cap, then says so beside the ratio
    p = interleave(iter_plan(100), iter_plan(200), climbing, track_step=0.04, track_rounds=30, evidence=Evidence(min_rounds=12))
    walk = p.as_metrics()["track_walk"]
    assert walk[REFERENCE] >= 6 and abs(walk[CANDIDATE]) < 6 and len(p.joint_rounds) == 30
    assert p.stop == "30 joint rounds of tracking (serve.track_rounds); a level still walking"
    assert p.tracks[REFERENCE].final_walk == walk[REFERENCE]
    assert p.still_walking().startswith(f"fp32's level ended {walk[REFERENCE]} steps up in a row: its limit was still moving")
    assert p.as_metrics()["still_walking"] == p.still_walking() and p.ratio is not None  # the ratio given, the walk said


def test_tracking_follows_a_walking_level_past_the_evidence_until_it_turns():
    # fp32's limit rises 5% a run over its tracking runs 4-13 (the host got faster for it), then holds at 200 x 1.05^10.
    # The evidence (10 joint rounds here) is in while fp32's level still climbs, and tracking goes on until that level
    # turns at its new limit: then the evidence ends it, with nothing left walking. With fixed limits it ends at once.
    evidence = Evidence(min_rounds=10)
    run, _ = recorder({CANDIDATE: 100, REFERENCE: 200})
    settled = interleave(iter_plan(100), iter_plan(200), run, track_step=0.04, track_rounds=40, evidence=evidence)
    rising = []

    def climbing(side, qps, draw, role):
        if side == CANDIDATE:
            return judge(100)(qps)
        rising.extend([qps] if role == TRACK else [])
        return judge(200 * 1.05 ** min(10, max(0, len(rising) - 4)))(qps)

    p = interleave(iter_plan(100), iter_plan(200), climbing, track_step=0.04, track_rounds=40, evidence=evidence)
    moves = [r["moved"] for r in p.tracks[REFERENCE].runs]
    assert "+1, " * STILL_WALKING in ", ".join(f"{m:+d}" for m in moves) + ", "  # it walked
    assert p.stop.startswith("the evidence") and not p.walking() and p.still_walking() is None
    assert len(p.joint_rounds) > len(settled.joint_rounds) + STILL_WALKING
    assert p.tracks[REFERENCE].runs[-1]["target_qps"] == pytest.approx(200 * 1.05 ** 10, rel=0.09)  # at its new limit


def test_the_time_cap_before_the_evidence_gives_not_enough_runs_not_a_ratio():
    run, made = recorder({CANDIDATE: 100, REFERENCE: 200})
    budget = (30.0, lambda q: 5.0)  # 6 runs a side: 2 search runs each, then 4 rounds of tracking
    p = interleave(iter_plan(100), iter_plan(200), run, budget)
    assert all(sum(1 for m in made if m[0] == side) == 6 for side in (CANDIDATE, REFERENCE))
    assert "serve.max_search_s" in p.stop and len(p.joint_rounds) == 4 and not p.enough
    assert p.ratio is None and p.interval == (None, None)
    m = p.as_metrics()
    assert m["qps_ratio"] is None and m["not_enough_runs"].startswith(NOT_ENOUGH) and "serve.min_rounds" in m["not_enough_runs"]
    assert m["round_ratios"] and m["qps_ratio_bracket"] == pytest.approx(0.5)  # the rounds are kept, not read as a ratio
    assert m["side_runs"] == {CANDIDATE: 6, REFERENCE: 6} and set(m["reversals"]) == {CANDIDATE, REFERENCE}


def test_the_round_cap_before_the_evidence_gives_not_enough_runs_and_tracking_off_gives_the_brackets():
    run, made = recorder({CANDIDATE: 100, REFERENCE: 200})
    p = interleave(iter_plan(100), iter_plan(200), run, None, track_rounds=6)  # 6 joint rounds hold 5 after the first reversals
    assert len(p.joint_rounds) == 6 and "serve.track_rounds" in p.stop and p.ratio is None
    run, made = recorder({CANDIDATE: 100, REFERENCE: 200})
    p = interleave(iter_plan(100), iter_plan(200), run, (60.0, lambda q: 5.0), track_rounds=0)  # no tracking: the brackets' ratio
    assert not p.joint_rounds and not any(m[3] == TRACK for m in made)
    assert p.ratio == pytest.approx(0.5) and p.interval == p.bracket_interval and p.as_metrics()["not_enough_runs"] is None


def test_an_injected_clock_counts_what_each_run_took_against_the_cap():
    # Runs expected to last 4 s that take 12 s on a slow machine: the cap counts the 12 s, so the job ends with
    # "not enough runs" where the expected lengths alone would have let it finish.
    now = [0.0]

    def slow(side, qps, draw, role):
        now[0] += 12.0
        return judge({CANDIDATE: 100, REFERENCE: 200}[side])(qps)

    budget = (70.0, lambda q: 4.0)
    p = interleave(iter_plan(100), iter_plan(200), slow, budget, clock=lambda: now[0])
    assert not p.enough and p.ratio is None and "serve.max_search_s" in p.stop
    # 2 search runs and 3 tracking runs a side, 60 s: a sixth run, 12 s as the others took, would pass 70 s
    assert p.side_runs() == {CANDIDATE: 5, REFERENCE: 5} and p.as_metrics()["seconds"] == {CANDIDATE: 60.0, REFERENCE: 60.0}
    ran = interleave(iter_plan(100), iter_plan(200), lambda *a: judge({CANDIDATE: 100, REFERENCE: 200}[a[0]])(a[1]), budget)
    assert ran.enough and ran.ratio == pytest.approx(0.5, rel=0.05)


def test_few_rounds_give_a_wide_interval_and_more_rounds_a_narrower_one():
    rng = random.Random(3)
    ratios = [0.5 * math.exp(rng.gauss(0, 0.05)) for _ in range(16)]
    few, many = rerun_interval(ratios[:4], 0.0, 0.01), rerun_interval(ratios, 0.0, 0.01)
    assert few[1] / few[0] > many[1] / many[0] * 1.5
    # the run-to-run term alone: identical rounds still give +-1.96 x sqrt(2) x spread (8.3% at 0.03)
    flat = rerun_interval([0.5] * 8, 0.03, 0.01)
    assert flat == pytest.approx((0.5 * math.exp(-0.0832), 0.5 * math.exp(0.0832)), rel=1e-3)
    # and never under a staircase step either side
    assert rerun_interval([0.5] * 8, 0.0, 0.04) == pytest.approx((0.5 / 1.04, 0.5 * 1.04))
    assert rerun_interval([0.5] * 3, 0.03, 0.04) == (0.0, math.inf)  # one ABBA block: no spread to read


@pytest.mark.parametrize("fit", [LEVELS, LOGISTIC])
def test_a_learned_run_to_run_spread_widens_the_interval_by_its_own_term_and_the_record_says_where_it_came_from(fit):
    # The same rounds judged with serve.rerun_spread alone and with a spread learned from the machine's re-runs
    # (bench.pipeline.reruns.serve_spread): the rounds' own standard error is the same, the interval's half-width is
    # sqrt(t^2 2 se^2 + z^2 2 spread^2) with each spread.
    script = {(CANDIDATE, 4): "INVALID", (CANDIDATE, 5): "INVALID", (REFERENCE, 7): "INVALID"}
    jobs = {}
    for spread, source in ((0.03, "serve.rerun_spread"), (0.2, "serve.rerun_spread (3 degrees of freedom) and 6 re-runs of 6 jobs on this machine")):
        run, _ = recorder({CANDIDATE: 100, REFERENCE: 200}, script)
        jobs[spread] = interleave(iter_plan(100), iter_plan(200), run, track_step=0.04, evidence=Evidence(rerun_spread=spread, rerun_from=source), fit=fit)
    narrow, wide = jobs[0.03], jobs[0.2]
    assert narrow.ratio == wide.ratio and narrow.log_se == wide.log_se and wide.log_se > 0
    variance, blocks = wide.log_variance()
    assert wide.log_se == pytest.approx(math.sqrt(variance))
    for spread, job in jobs.items():
        low, high = job.interval
        t, z = stats.t.ppf(0.975, blocks - 1), stats.norm.ppf(0.975)
        assert math.log(high / low) / 2 == pytest.approx(max(math.sqrt(t ** 2 * 2 * variance + z ** 2 * 2 * spread ** 2), math.log(1.04)))
    metrics = wide.as_metrics()
    assert metrics["rerun_spread"] == 0.2 and metrics["ratio_log_se"] == wide.log_se
    assert metrics["rerun_spread_from"].endswith("6 re-runs of 6 jobs on this machine") and "0.2 from serve.rerun_spread (3" in metrics["method"]
    assert narrow.as_metrics()["rerun_spread_from"] == "serve.rerun_spread"


def test_a_disturbed_tracking_run_is_shown_but_does_not_move_its_level():
    made = []

    def run(side, qps, draw, role):
        made.append((side, role))
        step = judge({CANDIDATE: 100, REFERENCE: 200}[side])(qps)
        if side == CANDIDATE and role == TRACK and sum(1 for m in made if m == (CANDIDATE, TRACK)) == 1:
            step.update(validity="INVALID", machine={"steal_share": 0.3})
        return step

    p = interleave(iter_plan(100), iter_plan(200), run, track_rounds=3, max_steal=0.05)
    first, second = p.tracks[CANDIDATE].runs[:2]
    assert first["validity"] == "INVALID" and first["moved"] == 0 and second["target_qps"] == first["target_qps"]
    assert "1 set aside: steal" in p.as_metrics()["track_candidate"]


def test_a_side_that_met_no_load_does_not_track_and_has_no_ratio():
    run, made = recorder({CANDIDATE: 0.5, REFERENCE: 200})
    p = interleave(plan(8), iter_plan(200), run, track_rounds=4)
    assert CANDIDATE not in p.tracks and p.ratio is None and "candidate met no load" in p.no_load()
    assert not p.joint_rounds and p.as_metrics()["qps_ratio"] is None


def test_the_estimate_averages_the_joint_rounds_after_both_first_reversals():
    # Limits 100 and 200 with searches that stop well below (80 and 150): both climb, then reverse;
    # the climbs before the reversals are left out of the estimate, and the ratio is near 0.5.
    run, made = recorder({CANDIDATE: 100, REFERENCE: 200})
    p = interleave(search_plan(80, 1.05, 0.1, 1, 1), search_plan(150, 1.05, 0.1, 1, 1), run, track_step=0.04, track_rounds=20)
    firsts = [t.first_reversal for t in p.tracks.values()]
    assert all(f is not None for f in firsts) and min(p.used_rounds) == max(firsts) and len(p.used_rounds) >= MIN_ROUNDS
    assert p.ratio == pytest.approx(0.5, rel=0.05) and p.interval[0] <= p.ratio <= p.interval[1]
    assert min(p.used_rounds) > min(p.joint_rounds)  # the walk up from 80 and 150 is left out
    assert p.as_metrics()["tracked_qps"] == pytest.approx(100, rel=0.05)


@pytest.mark.parametrize("fit", [LEVELS, LOGISTIC])
def test_the_interval_is_where_a_rerun_should_fall_from_the_used_rounds(fit):
    # Both sides agree every round (fixed limits 100 and 200 reached together): the per-round ratios barely move,
    # and the interval is the run-to-run term (and at least a step) around the estimate, read either way.
    run, _ = recorder({CANDIDATE: 100, REFERENCE: 200})
    p = interleave(iter_plan(100), iter_plan(200), run, track_step=0.05, evidence=Evidence(rerun_spread=0.03), fit=fit)
    ratios = p.round_ratios()
    assert max(ratios) / min(ratios) < 1.001 and len(ratios) == MIN_ROUNDS
    assert p.ratio == pytest.approx(0.5, rel=0.03)
    if fit == LEVELS:
        assert p.interval == pytest.approx(rerun_interval(ratios, 0.03, 0.05))
    assert p.interval[0] < p.ratio / 1.05 and p.interval[1] > p.ratio * 1.05
    # rounds the two sides disagreed in widen it
    run, _ = recorder({CANDIDATE: 100, REFERENCE: 200}, {(CANDIDATE, 4): "INVALID", (CANDIDATE, 5): "INVALID", (CANDIDATE, 6): "INVALID"})
    q = interleave(iter_plan(100), iter_plan(200), run, track_step=0.05, evidence=Evidence(rerun_spread=0.03), fit=fit)
    assert q.enough and q.interval[1] / q.interval[0] > p.interval[1] / p.interval[0]
    metrics = q.as_metrics()
    assert metrics["ratio_fit"] == fit and metrics["qps_ratio_levels"] == pytest.approx(q.levels_ratio)
    assert metrics["fitted_qps"][REFERENCE] == pytest.approx(200, rel=0.05) and ("fitted to" in metrics["method"]) == (fit == LOGISTIC)


def test_a_climb_after_an_early_reversal_biases_the_levels_and_not_the_fit():
    # The candidate's search ended at 84 (as in a slow phase), under its limit of 100; one transient INVALID at its
    # second tracking run makes its first reversal, and its level then climbs 4% a run to the limit. The levels
    # average that climb in from the reversal on; the fit reads the limit from the verdicts near it.
    script = {(CANDIDATE, 1): "INVALID"}
    runs = {}
    for fit in (LEVELS, LOGISTIC):
        run, _ = recorder({CANDIDATE: 100, REFERENCE: 200}, script)
        runs[fit] = interleave(iter_plan(80), iter_plan(200), run, track_step=0.04, track_rounds=24, evidence=Evidence(min_rounds=10), fit=fit)
    levels, fitted = runs[LEVELS], runs[LOGISTIC]
    assert levels.enough and fitted.enough and levels.round_ratios() == fitted.round_ratios()
    assert levels.tracks[CANDIDATE].runs[0]["target_qps"] < 85 and max(r["target_qps"] for r in levels.tracks[CANDIDATE].runs) > 100
    assert levels.ratio < 0.47  # 6% or more under the true 0.5
    assert fitted.ratio == pytest.approx(0.5, rel=0.03)
    assert fitted.interval[0] <= 0.5 <= fitted.interval[1]


# --------------------------------------------------------------------- the instrument check: a host that moves
QUERIES, BOUND = 1157, 60.0
SEEDS = 30


def host(seed, runs=400):
    """A host speed factor that moves in phases: uniform in 0.7-1.3, held for 3 to 8 runs."""
    rng = random.Random(seed)
    speeds = []
    while len(speeds) < runs:
        speeds += [rng.uniform(0.7, 1.3)] * rng.randint(3, 8)
    return speeds


def simulated(seed, capacity, noise=0.06, rerun=0):
    """Runs on that host: VALID with probability 1 / (1 + exp((load - 1) / noise)), load = QPS / (capacity x speed),
    so that within 5-10% of the limit about one run in 7-10 flips; late queries and p99 grow with the load (runs
    near the bound are judged again by the search's own rule). `rerun` draws another host and other verdicts."""
    rng, speeds, made = random.Random(seed * 7919 + 1 + 104729 * rerun), host(seed + 1000 * rerun), [0]

    def run(side, qps, draw, role):
        load = qps / (capacity[side] * speeds[made[0] // 2])  # both runs of a round see the same phase, mostly
        made[0] += 1
        valid = rng.random() < 1 / (1 + math.exp((load - 1) / noise))
        late = 0 if load < 0.6 else int(QUERIES * 0.01 * min(load, 3) ** 4 * (0.3 if valid else 1.2))
        return {"target_qps": qps, "validity": "VALID" if valid else "INVALID", "overlatency_queries": late, "queries": QUERIES,
                "bound_ms": BOUND, "latency_ms": {"p99": BOUND * min(load, 2) * (0.9 if valid else 1.1)}}

    return run


def simulate(seed, judgments=1, rerun=0, run_s=None):
    """One paired job on the simulated host with serve.*'s defaults (the cap, the evidence, runs of at least 4 s, first
    target 0.6 of the capacity, as a warm-up's estimate gives; `run_s` fixes every run's length): the PairedSearch and
    the true ratio."""
    rng = random.Random(seed)
    capacity = {REFERENCE: rng.uniform(300, 600), CANDIDATE: rng.uniform(200, 700)}
    budget = (ServeConfig().max_search_s, (lambda q: run_s) if run_s else (lambda q: max(4.0, QUERIES / q)))
    plans = [search_plan(round_qps(capacity[s] * 0.6), 1.5, 0.1, 6, 0.5, round_qps, None, budget, judgments) for s in (CANDIDATE, REFERENCE)]
    p = interleave(*plans, simulated(seed, capacity, rerun=rerun), budget, TRACK_STEP, TRACK_ROUNDS, round_qps)
    return p, capacity[CANDIDATE] / capacity[REFERENCE]


def test_on_a_host_whose_speed_moves_the_tracked_ratio_lands_within_10_percent_in_most_seeds():
    results = [simulate(seed) for seed in range(SEEDS)]
    assert sum(p.enough for p, _ in results) >= 0.9 * SEEDS  # the default caps hold the default evidence at these loads
    results = [(p, true) for p, true in results if p.enough]
    tracked = sum(abs(p.ratio / true - 1) <= 0.10 for p, true in results)
    bracket = sum(abs((p.bracket_ratio or math.nan) / true - 1) <= 0.10 for p, true in results)
    worst = max(abs(p.ratio / true - 1) for p, true in results)
    summary = f"tracked ratio within 10% of the true one in {tracked}/{SEEDS} seeds (worst {worst:.0%}); the searches' brackets alone: {bracket}/{SEEDS}"
    assert tracked >= 0.9 * SEEDS, summary
    assert tracked > bracket and worst < 0.2, summary


def test_a_jobs_interval_holds_a_reruns_ratio():
    # The same two capacities, run again on another draw of the host's phases and of the verdicts: the first job's
    # interval holds the re-run's ratio in nearly every seed (95% intervals; the range of the rounds, the interval before,
    # held it in fewer), and the two ratios agree within 10% in most.
    held = agree = pairs = 0
    for seed in range(SEEDS):
        (first, _), (again, _) = simulate(seed), simulate(seed, rerun=1)
        if first.ratio is None or again.ratio is None:  # "not enough runs": no ratio to hold
            continue
        pairs += 1
        low, high = first.interval
        held += low <= again.ratio <= high
        agree += abs(again.ratio / first.ratio - 1) <= 0.10
    assert pairs >= 0.8 * SEEDS and held >= 0.9 * pairs and agree >= 0.75 * pairs, (pairs, held, agree)


def test_on_a_slow_machine_the_cap_gives_not_enough_runs_never_a_ratio_from_a_few_rounds():
    # Every run 20 s long (a slow machine's low loads): the 240 s cap holds 12 runs a side, short of the evidence
    # after a six-target search; the job has no ratio where the seconds budget used to give one from 1-3 rounds.
    results = [simulate(seed, run_s=20.0)[0] for seed in range(10)]
    assert all((p.ratio is None) == (not p.enough) for p in results)
    short = [p for p in results if not p.enough]
    assert short and all(p.as_metrics()["not_enough_runs"].startswith(NOT_ENOUGH) for p in short)
    assert all(len(p.used_rounds) >= MIN_ROUNDS for p in results if p.enough)


@pytest.mark.slow
def test_a_paired_server_job_through_loadgen(serve_cfg):
    # int8_tbe's search and fp32's, each two targets of one run, interleaved in one process: four runs
    # C R R C, fp32's in its own log folder; the ratio is the two max QPS's, whatever LoadGen judged.
    from pathlib import Path

    import json

    from bench.measure.environment import kernel_path
    from bench.pipeline import calibrate, reruns
    from bench.runner import run_job

    # the machine's re-run log holds two earlier paired Server jobs measured twice each: the job's interval carries
    # their spread, weighed with serve.rerun_spread, and the job joins the log when it gives a ratio
    cfg = serve_cfg("backend=int8_tbe")
    log = reruns.path_for(calibrate.cache_path(cfg.cache_dir))
    for job, ratios in (("a", (2.0, 3.0)), ("b", (0.9, 0.7))):
        for ratio in ratios:
            reruns.append(log, reruns.entry(job, "abc", reruns.SERVED, kernel_path(), cfg.batch_size, "x", math.log(ratio), 0.02, 6))
    learned = reruns.serve_spread(log, kernel_path(), cfg.serve.rerun_spread, cfg.batch_size)
    record, exc = run_job(cfg)
    assert exc is None and record.status == "ok", record.error
    m = record.metrics
    p = m["paired"]
    assert (p["rerun_spread"], p["rerun_spread_from"]) == learned and learned[1].endswith("2 re-runs of 2 jobs on this machine")
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    if p["qps_ratio"]:
        assert len(lines) == 5 and lines[-1]["job"] == record.config_hash and lines[-1]["setting"] == reruns.SERVED
        assert lines[-1]["log_speedup"] == pytest.approx(math.log(p["qps_ratio"])) and lines[-1]["round_se"] == p["ratio_log_se"]
    else:  # no ratio: nothing to learn from
        assert len(lines) == 4
    assert [(r["side"], r["role"]) for r in p["runs"]][:4] == [(CANDIDATE, SEARCH), (REFERENCE, SEARCH), (REFERENCE, SEARCH), (CANDIDATE, SEARCH)]
    ref = p["reference"]
    assert len(m["steps"]) >= 2 and len(ref["steps"]) >= 2 and p["reference_backend"] == "fp32"
    assert [s["target_qps"] for s in m["steps"]] == [r["target_qps"] for r in p["runs"] if r["side"] == CANDIDATE and r["role"] == SEARCH][:2]
    # then each side that met load tracks its limit (fresh schedules), in its own log folders
    tracked = p["track_steps"]
    for side in tracked:
        assert tracked[side] and all(s["validity"] in ("VALID", "INVALID") and s["draw"] >= TRACK_DRAW for s in tracked[side])
        assert [r["target_qps"] for r in p["runs"] if r["side"] == side and r["role"] == TRACK] == [s["target_qps"] for s in tracked[side]]
    for s in tracked.get(CANDIDATE, []):
        assert Path(s["log_dir"]).name.startswith("track")
    assert all(Path(s["log_dir"]).parent.name == "fp32" for s in tracked.get(REFERENCE, []))
    for s in ref["steps"]:
        assert Path(s["log_dir"]).parent.name == "fp32" and s["validity"] in ("VALID", "INVALID") and "late" in s
    assert p["reference_max_qps"] == ref["max_qps"] and ref["warm_up"]["capacity_samples_per_s"] > 0
    assert not {"qps_ratio", "qps_ratio_lo", "qps_ratio_hi", "reference_max_qps"} & set(m)  # the paired figures are stored once, under paired
    from bench.report.summary import serving_summary

    assert "  fp32 searched beside it: max QPS " in serving_summary(record)
    assert p["joint_rounds"] == len(p["round_ratios"]) <= 4 and sum(p["side_runs"].values()) == len(p["runs"])
    if ref["max_qps"] > 0 and m["max_qps"] > 0 and not p["not_enough_runs"]:  # 4 joint rounds after both first reversals
        assert p["used_rounds"] == 4 and all(n >= 2 for n in p["reversals"].values())
        assert p["qps_ratio_lo"] <= p["qps_ratio"] <= p["qps_ratio_hi"]
    else:  # a side met no load, or the 4 rounds held less than the evidence: no ratio, and the record says why
        assert p["qps_ratio"] is None and (p["no_load"] or p["not_enough_runs"].startswith(NOT_ENOUGH))


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
    from bench.measure.environment import kernel_path
    from bench.pipeline import calibrate, reruns

    log = calibrate.rerun_log(cfg.cache_dir)  # the machine's re-runs of paired Server jobs: the interval carries their spread
    for ratio in (2.0, 3.0):
        reruns.append(log, reruns.entry("a", "abc", reruns.SERVED, kernel_path(), cfg.batch_size, "x", math.log(ratio), 0.02, 6))
    learned = reruns.serve_spread(log, kernel_path(), cfg.serve.rerun_spread, cfg.batch_size)
    m = paired_max_qps(cfg, candidate, reference, device, work, logs=tmp_path / "logs")
    assert (m["paired"]["rerun_spread"], m["paired"]["rerun_spread_from"]) == learned and learned[1].endswith("1 re-runs of 1 jobs on this machine")
    assert len(log.read_text().splitlines()) == 2  # a call makes no record: nothing joins the log
    ref = m["paired"]["reference"]
    assert len(m["steps"]) >= 2 and len(ref["steps"]) >= 2 and all(s["scenario"] == "Server" for s in m["steps"] + ref["steps"])
    assert m["paired"]["reference_max_qps"] == ref["max_qps"] and m["max_qps"] == (m["max_qps_lo"] or 0.0)
    assert (m["paired"]["qps_ratio"] is None) == (ref["max_qps"] == 0)
    names = {p.name for p in (tmp_path / "logs").iterdir()}
    made = [m["steps"], m["paired"]["track_steps"].get("candidate", [])]
    assert names == {"fp32"} | {Path(s["log_dir"]).name for steps in made for s in steps}
    assert "server_step1_150qps" in names
    assert m["warm_up"]["capacity_samples_per_s"] > 0 and ref["warm_up"]["capacity_samples_per_s"] > 0
