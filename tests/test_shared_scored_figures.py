"""`SharedWork.scored_figures`: a backend's score-only figures computed once per process, handed out as copies."""

from __future__ import annotations

from bench.pipeline.shared import SharedWork


def test_figures_are_computed_once_and_each_job_gets_its_own_copy():
    shared, calls = SharedWork(), []

    def compute():
        calls.append(1)
        return {"auc_delta": -0.001, "auc_delta_interval": [-0.002, 0.0], "by_table": {"t0": -0.001}}

    first = shared.scored_figures("key", compute)
    first["auc_delta_interval"][0] = 99.0  # a job editing nested figures of its own record
    first["by_table"]["t0"] = 99.0
    second = shared.scored_figures("key", compute)
    assert calls == [1]
    assert second == {"auc_delta": -0.001, "auc_delta_interval": [-0.002, 0.0], "by_table": {"t0": -0.001}}


def test_a_result_naming_an_error_is_computed_again():
    shared, calls = SharedWork(), []

    def compute():
        calls.append(1)
        return {"auc_delta_error": "no valid reference"}

    shared.scored_figures("key", compute)
    shared.scored_figures("key", compute)
    assert calls == [1, 1]
