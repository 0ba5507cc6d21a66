"""Step sizing from LoadGen's early-stopping rule, late queries by cause, and the queue estimate: pure
functions over planted timelines and service times (no LoadGen, no model)."""

import numpy as np
import pytest

from bench.serve.early_stopping import min_on_time, pass_probability, queries_for_share, tolerated_late, what_a_step_tells
from bench.serve.late import explain
from bench.serve.queue import ServiceModel, max_rate, simulate_p99
from bench.serve.timeline import Timeline, read


def test_the_early_stopping_rule_gives_loadgens_own_figures():
    assert min_on_time(0) == 459  # LoadGen: with no late query a Server run needs 459 queries
    # LoadGen's log at 11 of 1,185 late: "Would need to run at least 959 more queries"
    assert min_on_time(11) + 11 - 1185 == 959
    assert tolerated_late(458) is None and tolerated_late(459) == 0 and tolerated_late(2144) == 11
    assert queries_for_share(0) == 459 and queries_for_share(0.3) == 1157
    assert tolerated_late(queries_for_share(0.3)) >= 0.003 * queries_for_share(0.3)


def test_what_a_step_of_that_size_can_tell():
    assert pass_probability(500, 0.001) == pytest.approx(0.999 ** 500)  # none of 500 may be late
    assert pass_probability(1157, 0.001) > 0.95 > pass_probability(500, 0.001)
    assert "passes early stopping with up to 4 late" in what_a_step_tells(1157)
    assert "cannot pass" in what_a_step_tells(400)


def planted(batch_ms, issue_gap_s=0.01, pairs=200):
    """A run of one-query batches issued every `issue_gap_s`, each served in `batch_ms[i]` ms by one worker."""
    t = Timeline()
    free = 0.0
    for i, ms in enumerate(batch_ms):
        issued = i * issue_gap_s
        start = max(free, issued)
        free = start + ms / 1000
        t.batch([(None, issued)], start, free, ms / 1000, [pairs])
    return t


def test_a_single_stall_is_named_with_the_queries_behind_it(tmp_path):
    ms = [4.0] * 300
    ms[100] = 95.0  # one call stalls for 95 ms, computing all along
    t = planted(ms)
    t.write(tmp_path / "q.csv")
    frame = read(tmp_path / "q.csv")
    out = explain(frame, bound_ms=60, loadgen_late=7)
    assert out["over_bound"] == out["causes"]["stall"] >= 1 and out["causes"]["queueing"] == 0
    (stall,) = out["stalls"]
    assert stall["at_s"] == pytest.approx(1.0) and stall["ms"] == pytest.approx(95.0, abs=0.5) and stall["typical_ms"] == 4.0
    assert out["explanation"].startswith(f"{out['over_bound']} over the bound (LoadGen counted 7 on its own clock: the others lost their time before the SUT saw them): "
                                         f"{out['over_bound']} behind one 95 ms stall at 1.00 s")


def test_arrivals_beyond_capacity_are_queueing_and_a_batch_too_slow_is_service_time():
    queued = explain(planted([12.0] * 200).frame(), bound_ms=60)  # 12 ms of work every 10 ms: the queue grows
    assert queued["causes"]["queueing"] == queued["over_bound"] > 0 and queued["causes"]["stall"] == 0
    assert "queueing (arrivals beyond capacity" in queued["explanation"]
    slow = explain(planted([70.0] * 20, issue_gap_s=0.2).frame(), bound_ms=60)  # every call alone is over the bound
    assert slow["causes"] == {"stall": 0, "service": 20, "queueing": 0}
    assert explain(planted([4.0] * 50).frame(), bound_ms=60)["explanation"] == "none over the bound on the SUT's clock"


def test_a_descheduled_call_is_a_stall_even_below_three_times_its_typical_time():
    t = Timeline()
    for i in range(100):
        wall = 0.030 if i == 50 else 0.020  # 30 ms where 20 is typical, but only 5 ms of it on a core
        t.batch([(None, i * 0.05)], i * 0.05, i * 0.05 + wall, 0.005 if i == 50 else wall, [300])
    out = explain(t.frame(), bound_ms=25)
    assert out["causes"]["stall"] == 1 and "its thread off a core most of that time" in out["explanation"]


def test_the_queue_estimate_follows_the_service_time_and_its_spread():
    sizes, N = np.array([100, 200, 200, 300, 700]), 2000  # 2,000 simulated queries per rate: enough to order the cases
    fast, slow = ServiceModel(1.0, 0.01, np.ones(1)), ServiceModel(1.0, 0.02, np.ones(1))
    assert simulate_p99(10, sizes, fast, 2048, 0.002) < 15  # a light load: the largest query (8 ms) and the 2 ms wait, about
    rate = max_rate(sizes, fast, 2048, 0.002, 60, N)
    assert simulate_p99(rate, sizes, fast, 2048, 0.002, N) <= 60 < simulate_p99(rate * 1.1, sizes, fast, 2048, 0.002, N)
    assert max_rate(sizes, slow, 2048, 0.002, 60, N) < rate
    spread = ServiceModel(1.0, 0.01, np.r_[np.ones(98), 8.0, 8.0])  # 2% of batches 8x slower
    assert max_rate(sizes, spread, 2048, 0.002, 60, N) < rate
    fitted = ServiceModel.fit(np.array([100, 200, 400, 800] * 5), np.array([2.0, 3.0, 5.0, 9.0] * 5))
    assert fitted.slope_ms == pytest.approx(0.01) and fitted.intercept_ms == pytest.approx(1.0)


def test_a_line_fitted_flat_still_gets_its_max_rate():
    # offline times where the larger batch came out no slower (a tiny model on a busy host): the fitted slope is
    # clamped to 0, and the search's upper end must still be finite (it once bisected 0..1e12 and returned 0)
    flat = ServiceModel.fit(np.array([256, 1024]), np.array([0.6, 0.5]), with_spread=False)
    assert flat.slope_ms == 0.0 and flat.intercept_ms > 0
    sizes = np.array([100, 200, 300])
    rate = max_rate(sizes, flat, 1024, 0.002, 60, 2000)
    assert rate > 0 and simulate_p99(rate, sizes, flat, 1024, 0.002, 2000) <= 60 < simulate_p99(rate * 1.1, sizes, flat, 1024, 0.002, 2000)
