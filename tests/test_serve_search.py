"""The bracketed search over target QPS, driven by a stand-in step that judges a fixed limit (no LoadGen)."""

import pytest

from bench.serve.qps_search import clear, find_max_qps
from bench.serve.scenario import round_qps


def limit(at, noisy=()):
    """A step VALID at or below `at` QPS (except at the loads in `noisy`), and the targets it was asked for."""
    asked = []

    def step(qps, draw=0):
        asked.append(qps)
        valid = qps <= at and qps not in noisy
        return {"target_qps": qps, "validity": "VALID" if valid else "INVALID", "latency_ms": {"p99": qps / at * 50}}

    return step, asked


def test_brackets_the_limit_within_the_resolution():
    step, asked = limit(137)
    s = find_max_qps(step, 50, 1.5, 0.1, 20, 1, round_qps)
    assert s.highest_valid <= 137 < s.lowest_invalid
    assert s.lowest_invalid / s.highest_valid <= 1.1 and s.stop == "bracket within 10%"
    assert asked[:3] == [50, 75, 112]  # up by the factor until INVALID
    m = s.as_metrics()
    assert m["max_qps"] == s.highest_valid and (m["max_qps_lo"], m["max_qps_hi"]) == (s.highest_valid, s.lowest_invalid)
    assert m["latency_ms"] == s.at_max()["latency_ms"] and len(m["steps"]) == len(asked)


def test_steps_down_from_an_invalid_start():
    step, asked = limit(20)
    s = find_max_qps(step, 100, 2.0, 0.25, 20, 1)
    assert asked[:3] == [100, 50, 25] and s.highest_valid <= 20 < s.lowest_invalid


def test_stops_after_max_steps_with_what_it_has():
    step, asked = limit(1000)
    s = find_max_qps(step, 10, 1.5, 0.1, 3, 1)
    assert len(asked) == 3 and s.lowest_invalid is None and s.stop == "3 targets (serve.max_steps)"
    assert s.as_metrics()["max_qps"] == s.highest_valid


def test_no_load_meets_the_bound():
    step, asked = limit(0.1)
    s = find_max_qps(step, 8, 2.0, 0.1, 20, 1)
    assert asked == [8, 4, 2, 1] and s.highest_valid is None
    assert s.as_metrics()["max_qps"] == 0.0 and "no target QPS down to 1" in s.stop
    assert s.at_max()["target_qps"] == 1  # the lowest load tried


def test_a_hopeless_search_stops_at_its_first_invalid_step():
    step, asked = limit(0.1)
    s = find_max_qps(step, 3, 2.0, 0.1, 20, 1, hopeless="the queries alone take longer than the bound")
    assert asked == [3] and s.stop == "the queries alone take longer than the bound"


def test_a_target_that_rounds_to_one_already_judged_ends_the_search():
    step, asked = limit(1000)
    s = find_max_qps(step, 100, 1.5, 0.1, 20, 1, snap=lambda q: 100.0)
    assert asked == [100] and "already judged" in s.stop and s.monotonic


def run_of(validity, late, queries=1200, p99=40.0):
    return {"validity": validity, "overlatency_queries": late, "queries": queries, "bound_ms": 60.0, "latency_ms": {"p99": p99}}


def test_only_a_run_near_the_bound_is_judged_again():
    assert clear(run_of("VALID", 0, p99=25.0))  # no late query, p99 under half the bound
    assert not clear(run_of("VALID", 0, p99=45.0)) and not clear(run_of("VALID", 2, p99=25.0))
    assert clear(run_of("INVALID", 120)) and not clear(run_of("INVALID", 5))  # 10% late: far beyond; 5 of 1,200: near
    # 130 late, 100 of them behind one stall: the 30 others are near the bound, so the run is judged again
    assert not clear({**run_of("INVALID", 130), "late": {"causes": {"stall": 100, "queueing": 30, "service": 0}}})
    assert clear({**run_of("INVALID", 130), "late": {"causes": {"stall": 10, "queueing": 120, "service": 0}}})


def test_a_target_near_the_bound_is_run_until_a_majority_agrees():
    verdicts = {(100, 0): "INVALID", (100, 1): "VALID", (100, 2): "VALID", (150, 0): "INVALID", (150, 1): "INVALID"}
    asked = []

    def step(qps, draw):  # near the bound at both targets: a few late queries, p99 close to it
        asked.append((qps, draw))
        v = verdicts.get((qps, draw), "INVALID")
        return {**run_of(v, 1 if v == "VALID" else 4, p99=50.0), "target_qps": qps}

    s = find_max_qps(step, 100, 1.5, 0.1, 2, 1, judgments=3)
    assert asked == [(100, 0), (100, 1), (100, 2), (150, 0), (150, 1)]  # 1 of 3 against at 100; 2 of 2 at 150
    assert (s.highest_valid, s.lowest_invalid) == (100, 150)
    m = s.as_metrics()
    assert m["evidence"] == "VALID 2/3 at 100, INVALID 2/2 at 150" and len(m["steps"]) == 5
    assert [j["runs"] for j in m["judgments"]] == [3, 2] and m["latency_ms"] == s.judged[0].runs[2]["latency_ms"]


def test_a_clear_first_run_settles_its_target():
    asked = []

    def step(qps, draw):
        asked.append((qps, draw))
        return {**(run_of("VALID", 0, p99=10.0) if qps < 120 else run_of("INVALID", 600, p99=900.0)), "target_qps": qps}

    s = find_max_qps(step, 100, 1.5, 0.5, 20, 1, judgments=3)
    assert asked == [(100, 0), (150, 0)] and s.evidence() == "VALID 1/1 at 100, INVALID 1/1 at 150"


def test_round_qps_keeps_three_digits():
    assert [round_qps(x) for x in (1234.5, 137.49, 9.876, 0.01234)] == [1230.0, 137.0, 9.88, 0.0123]


def test_stops_before_a_step_that_would_overrun_the_time_budget():
    step, asked = limit(5)
    seconds = lambda qps: max(4.0, 500 / qps)  # noqa: E731 - a run's length: 4 s, or 500 queries
    s = find_max_qps(step, 100, 2.0, 0.1, 20, 1, budget=(60.0, seconds))
    # 100 (5 s), 50 (10 s), 25 (20 s) spent 35 s; 12.5 would run 40 s more
    assert asked == [100, 50, 25] and "past 60 s (serve.max_search_s)" in s.stop and s.highest_valid is None


def test_the_new_serve_keys_keep_the_identity_of_jobs_that_leave_them_at_their_legacy_values():
    import dataclasses

    from bench.config.compose import compose
    from bench.runner import job_hash

    def resolved(*overrides):
        return dataclasses.asdict(compose(["+preset=tiny", "+sweep=serve", *overrides]))

    legacy = resolved("serve.judgments=1", "serve.step_late_share=null", "serve.max_steal=null", "serve.max_slowdown=null", "serve.paired=false",
                      "serve.ratio_fit=levels")
    added = ("judgments", "step_late_share", "test_stall_ms", "max_steal", "max_slowdown", "paired", "ratio_fit")
    stored_before = {**legacy, "serve": {k: v for k, v in legacy["serve"].items() if k not in added}}  # a record from before them
    assert job_hash(legacy) == job_hash(stored_before)
    default = job_hash(resolved())
    assert default != job_hash(stored_before)  # re-judged, longer steps: a new measurement
    assert job_hash(resolved("serve.test_stall_ms=80")) != default
    # runs set aside for steal: a new measurement, so resume does not return a record made before the key
    assert job_hash(resolved("serve.max_steal=0.05")) == default != job_hash(resolved("serve.max_steal=null"))
    # runs set aside for a slow host (bench.serve.pace): a new measurement too
    assert job_hash(resolved("serve.max_slowdown=0.15")) == default != job_hash(resolved("serve.max_slowdown=null"))
    # the ratio fitted to the verdicts: a new measurement; the levels' ratio is what records before the fit measured
    assert job_hash(resolved("serve.ratio_fit=logistic")) == default != job_hash(resolved("serve.ratio_fit=levels"))
    # a Server search interleaved with fp32's: a new measurement too
    assert job_hash(resolved("serve.paired=true")) == default != job_hash(resolved("serve.paired=false"))
    # paired tracking: off with each target judged by serve.judgments is what paired records before it measured
    untracked = resolved("serve.track_rounds=0", "serve.paired_judgments=null")
    before_tracking = {**untracked, "serve": {k: v for k, v in untracked["serve"].items() if k not in ("track_rounds", "track_step", "paired_judgments")}}
    assert job_hash(untracked) == job_hash(before_tracking) != default
    assert job_hash(resolved("serve.track_step=0.08")) != default
    # the evidence a paired ratio needs: no legacy value, every setting of it a measurement of its own
    for key, value in (("min_rounds", 8), ("min_reversals", 3), ("rerun_spread", 0.05)):
        assert job_hash(resolved(f"serve.{key}={value}")) != default


def stolen(step, share):
    return {**step, "machine": {"steal_share": share}}


def test_a_run_disturbed_by_steal_is_set_aside_and_its_target_run_again():
    asked = []

    def step(qps, draw):  # the first run at 100 ran while the hypervisor took 20% of the CPU: INVALID, far beyond
        asked.append((qps, draw))
        run = run_of("INVALID", 600, p99=900.0) if draw == 0 else run_of("VALID", 0, p99=10.0)
        return {**stolen(run, 0.2 if draw == 0 else 0.01), "target_qps": qps}

    s = find_max_qps(step, 100, 1.5, 0.1, 1, 1, judgments=1)
    assert asked == [(100, 0), (100, 1)]  # a clear INVALID, but disturbed: not clear, run again
    [j] = s.judged
    assert j.verdict == "VALID" and j.set_aside == 1 and j.evidence() == "VALID 1/1 at 100 (1 set aside: steal)"
    assert s.as_metrics()["judgments"][0]["set_aside"] == 1 and len(s.as_metrics()["steps"]) == 2


def test_with_max_steal_null_no_run_is_set_aside_and_a_threshold_sets_aside_runs_above_it():
    def step(qps, draw):  # every run at 100 took 8% steal: INVALID far beyond the bound
        return {**stolen(run_of("INVALID", 600, p99=900.0), 0.08), "target_qps": qps}

    off = find_max_qps(step, 100, 1.5, 0.1, 1, 1, judgments=2, max_steal=None)
    assert [j.evidence() for j in off.judged] == ["INVALID 1/1 at 100"]  # clear at once: nothing set aside
    loose = find_max_qps(step, 100, 1.5, 0.1, 1, 1, judgments=2, max_steal=0.1)
    assert [j.evidence() for j in loose.judged] == ["INVALID 1/1 at 100"]  # 8% is under a 10% threshold
    strict = find_max_qps(step, 100, 1.5, 0.1, 1, 1, judgments=2)
    assert len(strict.steps) == 4  # over the default 5%: disturbed, run again up to twice the judgments


def test_when_every_run_at_a_target_is_disturbed_they_all_count_up_to_twice_the_judgments():
    asked = []

    def step(qps, draw):
        asked.append((qps, draw))
        return {**stolen(run_of("INVALID", 600, p99=900.0), 0.3), "target_qps": qps}

    s = find_max_qps(step, 100, 1.5, 0.1, 1, 1, judgments=2)
    assert asked == [(100, 0), (100, 1), (100, 2), (100, 3)]
    [j] = s.judged
    assert j.verdict == "INVALID" and j.set_aside == 0 and j.evidence() == "INVALID 4/4 at 100"


@pytest.mark.parametrize("bad", [1.0, -0.1])
def test_a_steal_threshold_outside_a_share_is_refused(bad):
    from bench.config.schema import ServeConfig, check_serve_config
    from bench.errors import UserError

    check_serve_config(ServeConfig(max_steal=None))
    with pytest.raises(UserError, match=r"serve.max_steal must be in \[0, 1\)"):
        check_serve_config(ServeConfig(max_steal=bad))


@pytest.mark.parametrize("override,message", [
    ({"min_rounds": 3}, r"serve.min_rounds must be at least 4"),
    ({"min_reversals": 0}, r"serve.min_reversals must be a positive integer"),
    ({"rerun_spread": -0.01}, r"serve.rerun_spread must be in \[0, 1\)"),
    ({"track_rounds": 5}, r"serve.track_rounds must be 0 \(no tracking\) or at least serve.min_rounds \(6\)"),
])
def test_evidence_settings_that_cannot_give_a_ratio_are_refused(override, message):
    from bench.config.schema import ServeConfig, check_serve_config
    from bench.errors import UserError

    check_serve_config(ServeConfig(track_rounds=0, min_rounds=4))  # tracking off, or the fewest rounds that give a spread
    with pytest.raises(UserError, match=message):
        check_serve_config(ServeConfig(**override))


@pytest.mark.slow
def test_python_m_bench_refuses_too_little_evidence_before_any_work(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    args = ["+sweep=serve", "serve.min_rounds=2", f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}",
            f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    done = subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        "error: serve.min_rounds must be at least 4 (two ABBA blocks of two rounds give the interval its spread), got 2")
    assert not (tmp_path / "reports").exists()
