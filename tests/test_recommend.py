"""bench.recommend: the funnel's decisions (pure), stage 3's estimate, stage 4's ratio, the cached accuracy figures,
and the funnel on real jobs, where a candidate whose offline figure is best but whose Server runs fail the bound
is not picked."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from bench.config import MLPERF_PAIRS
from bench.record import RunRecord
from bench.recommend import decide
from bench.recommend.confirm import confirm, confirmation
from bench.recommend.decide import (ACCURACY, CONFIRM, MEMORY, SPEED, Candidate, Confirmation, Estimate, Facts, Point,
                                    Rejection)
from bench.recommend.jobs import Jobs, facts_config, offline_config, served_config, server_config
from bench.recommend.funnel import backend_facts, run_recommend, served_times
from bench.results.parts import measured_table
from bench.results.table import results_table
from bench.recommend.speed import estimate, point, timed_sizes
from bench.runner import Session, job_hash
from tests.support.models import FAST, config_maker, train_once

SIZES = np.asarray(MLPERF_PAIRS, dtype=float)
# Short Server searches: runs of 500 queries (enough for LoadGen's early stopping to pass a run with none late),
# each target judged once, no run set aside for the host's steal.
SHORT_SERVE = ["serve.min_duration_s=0.5", "serve.min_query_count=500", "serve.step_late_share=null", "serve.judgments=1",
               "serve.max_steps=3", "serve.max_search_s=10", "serve.max_steal=null", "serve.max_slowdown=null"]


def facts(name, delta=0.0, lo=None, hi=None, mb=10.0):
    lo = delta if lo is None else lo
    hi = delta if hi is None else hi
    return Facts(name, delta, lo, hi, 0.75, mb, mb)


def est(rel, lo=None, hi=None, qps=None):
    lo, hi = rel if lo is None else lo, rel if hi is None else hi
    q = 100 * rel if qps is None else qps
    return Estimate(q, 100 * lo, 100 * hi, rel, lo, hi, 100.0)


# ------------------------------------------------------------------------------------------------ decide


def test_stage_1_wants_the_whole_interval_inside_the_budget_and_says_by_how_much():
    assert decide.inside_budget(facts("a", -0.0005, -0.0009, -0.0001), 0.001) is None
    r = decide.inside_budget(facts("b", -0.0008, -0.0013, -0.0003), 0.001)
    assert r.stage == ACCURACY and "0.00030 past the 0.001 budget" in r.reason and r.needs == "accuracy.max_auc_drop=0.00130"
    assert decide.inside_budget(Facts("c"), 0.001).stage == ACCURACY  # nothing measured: nothing to judge


def test_stage_2_holds_the_model_to_the_limit():
    assert decide.within_memory(facts("a", mb=5.0), None) is None
    assert decide.within_memory(facts("a", mb=5.0), 5.0) is None
    r = decide.within_memory(facts("a", mb=7.5), 5.0)
    assert r.stage == MEMORY and "2.50 MB over the 5 MB limit" in r.reason and r.needs == "memory.max_model_mb=7.5"


def test_dominated_only_beyond_both_intervals_at_the_same_threads():
    a, b, c, d = (Candidate("a", 1024, 1), Candidate("b", 1024, 1), Candidate("c", 1024, 1), Candidate("d", 1024, 2))
    rows = [(a, est(1.0, 0.95, 1.05), facts("a", 0.0, mb=10)),
            (b, est(1.5, 1.4, 1.6), facts("b", 0.0, mb=3)),  # beats a beyond both intervals, smaller, no less accurate
            (c, est(1.45, 1.02, 1.9), facts("c", 0.0, mb=3)),  # faster than a by its point, not beyond a's interval
            (d, est(0.5, 0.4, 0.6), facts("d", 0.0, mb=10))]  # slower, but at other threads: another fp32 behind its ratio
    out = decide.dominated(rows)
    assert set(out) == {a} and out[a].stage == SPEED and "dominated by b bs=1024 threads=1" in out[a].reason
    # ratios over different fp32s: a higher ratio at batcher 1024 is not more QPS than a lower one at 4096, whose fp32
    # serves 2.5x more; read through fp32's estimate at each size, the 4096 candidate is the faster, beyond both intervals
    small, large = Candidate("s", 1024, 1), Candidate("l", 4096, 1)
    rows = [(small, Estimate(154, 146, 163, 1.54, 1.46, 1.63, 100.0), facts("s", 0.0, mb=10)),
            (large, Estimate(330, 315, 348, 1.32, 1.26, 1.39, 250.0), facts("l", 0.0, mb=10))]
    out = decide.dominated(rows)
    assert set(out) == {small} and "dominated by l bs=4096 threads=1: an estimated 154 QPS [146, 163] against 330 [315, 348]" in out[small].reason
    assert [c for c, _, _ in decide.confirm_order(rows, None)] == [large, small]
    # a candidate whose ΔAUC interval reaches lower is not beaten by a faster one that gives up less
    rows = [(a, est(1.0, 0.95, 1.05), facts("a", 0.0, -0.0001, 0.0001)), (b, est(1.5, 1.4, 1.6), facts("b", 0.0, -0.0005, 0.0005))]
    assert decide.dominated(rows) == {}


def test_confirm_order_and_pick():
    a, b, c = Candidate("a", 1024, 2), Candidate("b", 1024, 1), Candidate("c", 4096, 1)
    rows = [(a, est(2.0), facts("a")), (b, est(1.5), facts("b")), (c, est(1.0), facts("c"))]
    assert [r[0] for r in decide.confirm_order(rows, None)] == [a, b, c]
    # with a target rate, those whose estimate reaches it come first, fewest threads first
    assert [r[0] for r in decide.confirm_order(rows, 140)] == [b, a, c]

    def conf(qps):
        return Confirmation(qps, qps, qps * 1.1, 100.0, qps / 100, qps / 110, qps * 1.1 / 100, 20.0, "test")
    confirmed = [(a, conf(300.0), facts("a")), (b, conf(200.0), facts("b"))]
    assert decide.pick(confirmed, None)[0] == a  # the most Server QPS
    assert decide.pick(confirmed, 150.0)[0] == b  # the fewest threads that hold the target
    assert decide.pick([], None) is None
    assert decide.confirmation_fails(conf(0.0), None, 60) .startswith("no target QPS met the 60 ms")
    assert "falls 1.50x short of slo.qps=300" in decide.confirmation_fails(conf(200.0), 300.0, 60)
    assert decide.confirmation_fails(conf(200.0), 150.0, 60) is None


def test_pareto_front_and_what_would_change():
    a, b, c, d = (Candidate(n, 1024, 1) for n in "abcd")
    pts = [Point(a, 100, 0.0, 10, True), Point(b, 150, -0.0005, 3, True), Point(c, 90, -0.0006, 4, False),
           Point(d, 200, -0.0008, 2, False)]
    front = decide.pareto_front(pts)
    assert [p.candidate for p in front] == [d, b, a]  # c is beaten by b on all three
    lines = decide.what_would_change(pts[1], [Rejection("e", ACCURACY, "x", needs="accuracy.max_auc_drop=0.002")], front,
                                     {"e": facts("e", mb=1.5)})
    assert lines[0].startswith("serving more candidates (recommend.confirm): d bs=1024 threads=1") and "1.33x the pick's" in lines[0]
    assert lines[1] == "with accuracy.max_auc_drop=0.002, e (1.50 MB) would pass stage 1; its speed was not measured"


def test_nearest_miss_names_what_it_would_need():
    a = Candidate("a", 1024, 1)
    conf = Confirmation(400.0, 400.0, 420.0, 300.0, 1.33, 1.2, 1.4, 30.0, "test")
    miss = decide.nearest_miss([], {a: conf}, 1000.0, {}, 0.001)
    assert "a bs=1024 threads=1 holds 400 QPS" in miss and "2.50x short of slo.qps=1000" in miss and "slo.qps=400 or lower" in miss
    f = {"u": facts("u", -0.001, -0.0015, -0.0005), "v": facts("v", -0.002, -0.003, -0.001)}
    rej = [decide.inside_budget(f["v"], 0.001), decide.inside_budget(f["u"], 0.001)]
    assert decide.nearest_miss(rej, {}, None, f, 0.001).startswith("nearest miss: u: ")
    assert decide.nearest_miss(rej, {}, None, f, 0.001).endswith("accuracy.max_auc_drop=0.00150")


def test_a_missing_ratio_reads_as_a_dash_never_nanx():
    nan = math.nan
    assert decide.times(nan) == decide.ratio_text(nan, 1.0, 1.2) == "\u2014" and decide.times(1.384) == "1.38x"
    assert decide.ratio_text(1.5, nan, nan) == "1.50x" and decide.ratio_text(1.5, 1.4, 1.6) == "1.50x [1.40, 1.60]"
    open_ratio = Confirmation(300.0, 300.0, 320.0, 0.0, nan, nan, nan, 20.0, "paired")  # fp32's search beside it met no load
    assert "nan" not in decide.open_bracket(open_ratio) and "ratio \u2014 has no interval" in decide.open_bracket(open_ratio)
    a, b = Candidate("a", 1024, 1), Candidate("b", 1024, 1)
    zero = Point(a, 0.0, 0.0, 10, True)  # a pick whose stage-3 estimate was 0: no ratio to it, no division by 0
    lines = decide.what_would_change(zero, [], [zero, Point(b, 50.0, 0.0, 5, False)], {})
    assert lines and "nan" not in lines[0] and "\u2014 the pick's QPS" in lines[0]


def test_what_would_change_names_what_recommend_confirm_left_unserved():
    a, b, c = Candidate("a", 1024, 1), Candidate("b", 1024, 1), Candidate("c", 4096, 1)
    pts = [Point(a, 100, 0.0, 10, True), Point(b, 90, -0.0001, 3, False), Point(c, 120, -0.0002, 2, False)]
    rejections = [Rejection(b.label(), CONFIRM, "not confirmed: its estimate ranks 3, below the best 1 (recommend.confirm)",
                            needs="recommend.confirm=3"),
                  Rejection(c.label(), CONFIRM, "not confirmed: its estimate ranks 2, below the best 1 (recommend.confirm)",
                            needs="recommend.confirm=2"),
                  Rejection("b threads=2", SPEED, "not timed at 2 threads: ...", needs="recommend.confirm=3")]
    lines = decide.what_would_change(pts[0], rejections, decide.pareto_front(pts), {}, pts)
    assert lines[0] == ("with recommend.confirm=3, b bs=1024 threads=1 (3.00 MB, ΔAUC -0.00010, estimated 90 QPS, 0.90x the pick's) "
                        "would be served under LoadGen too; recommend.confirm left it unserved")
    assert lines[1].startswith("with recommend.confirm=2, c bs=4096 threads=1 (2.00 MB") and "1.20x the pick's" in lines[1]
    assert lines[2] == "with recommend.confirm=3, b threads=2 would be timed too, and could be served; recommend.confirm left it untimed at these threads"
    assert len(lines) == 3  # c, on the front above the pick, is named once


def test_stage_3_below_the_bound_everywhere_names_the_nearest_miss_by_its_no_load_p99():
    a, b = Candidate("a", 1024, 1), Candidate("b", 1024, 1)
    below = {a: dataclasses.replace(est(0.0, qps=0.0), qps_hi=0.0, idle_p99_ms=2.5),
             b: dataclasses.replace(est(0.0, qps=0.0), qps_hi=0.0, idle_p99_ms=2.1)}
    assert decide.below_the_bound(below) and not decide.below_the_bound({}) and not decide.below_the_bound({**below, a: est(1.0)})
    miss = decide.nearest_miss([], {}, None, {}, 0.001, below, 0.001, 2.0)
    assert miss.startswith("nearest miss: b bs=1024 threads=1: at no load, each query alone, stage 3 estimates a p99 of 2.1 ms "
                           "against the 0.001 ms bound (2,100x it;") and "the batcher's 2 ms wait included" in miss
    assert miss.endswith("it would need slo.p99_ms above 2.1, a shorter serve.max_wait_ms or a smaller batcher size")
    near = decide.nearest_miss([], {}, None, {}, 0.001, below, 2.0, 2.0)  # under 10x the bound: two decimals, the candidate still named
    assert near.startswith("nearest miss: b bs=1024 threads=1: at no load") and "against the 2 ms bound (1.05x it;" in near


# ------------------------------------------------------------------------------------------------ speed, confirm


def test_the_estimate_follows_the_speedup_and_is_relative_to_the_same_fp32():
    fp32 = {256: (4.0, 1.0, 1.0, 1.0), 1024: (12.0, 1.0, 1.0, 1.0)}
    base = estimate(fp32, SIZES, 1024, 0.002, 60.0)
    assert base.relative == pytest.approx(1.0) and base.qps == pytest.approx(base.fp32_qps) and base.qps > 0
    faster = estimate({r: (ms, 1.5, 1.3, 1.7) for r, (ms, *_) in fp32.items()}, SIZES, 1024, 0.002, 60.0)
    assert faster.qps_lo < faster.qps < faster.qps_hi and faster.relative_lo < faster.relative < faster.relative_hi
    assert faster.relative > 1.2 and faster.fp32_qps == pytest.approx(base.fp32_qps)
    assert estimate(fp32, SIZES, 128, 0.002, 60.0) is None  # no offline point within the batcher's size
    assert estimate(fp32, SIZES, 1024, 0.002, 2.0).qps < base.qps  # a tighter bound holds less
    # at no load each query waits the batcher's 2 ms, then its own batch: 4 ms at 256 pairs, 12 at 1024, on a line
    assert 2 + 4 < base.idle_p99_ms < 2 + 12 and faster.idle_p99_ms < base.idle_p99_ms
    beyond = estimate(fp32, SIZES, 1024, 0.002, base.idle_p99_ms * 0.9)  # a bound below that: no rate meets it
    assert beyond.qps == beyond.qps_hi == 0 and decide.below_the_bound({Candidate("fp32", 1024, 1): beyond})


def test_an_offline_point_reads_fp32s_time_from_the_paired_job():
    r = RunRecord(status="ok", workload="w", backend="uint4", device="cpu", batch_size=1024, config={}, config_hash="h", env={},
                  metrics={"throughput": 200_000.0, "speedup": 2.0, "speedup_lo": 1.8, "speedup_hi": 2.2, "reference_throughput": 100_000.0})
    assert point(r) == (pytest.approx(10.24), 2.0, 1.8, 2.2)
    r.metrics = {"throughput": 100_000.0}  # fp32's own job: unpaired
    assert point(r) == (pytest.approx(10.24), 1.0, 1.0, 1.0)
    r.status = "error"
    assert point(r) is None
    assert timed_sizes([4096, 1024]) == [256, 1024, 4096]


def serving(backend, metrics, status="ok"):
    return RunRecord(status=status, workload="w", backend=backend, device="cpu", batch_size=1024, config={}, config_hash="h", env={},
                     metrics=metrics, record_id="r1", error=None if status == "ok" else "it broke")


def test_a_paired_serving_record_gives_the_ratio_and_its_interval():
    c = confirmation(serving("uint4", {"max_qps": 300.0, "max_qps_lo": 300.0, "max_qps_hi": 330.0, "latency_ms": {"p99": 30.0},
                                       "paired": {"reference_max_qps": 200.0, "qps_ratio": 1.5, "qps_ratio_lo": 1.2, "qps_ratio_hi": 1.65}}))
    assert (c.max_qps, c.max_qps_lo, c.max_qps_hi, c.fp32_max_qps) == (300.0, 300.0, 330.0, 200.0)
    assert (c.relative, c.relative_lo, c.relative_hi, c.p99_ms, c.records) == (1.5, 1.2, 1.65, 30.0, ["r1"])
    assert "interleaved run by run (ABBA)" in c.method
    alone = confirmation(serving("fp32", {"max_qps": 200.0, "max_qps_lo": 200.0, "max_qps_hi": 220.0}))
    assert (alone.fp32_max_qps, alone.relative, alone.relative_lo, alone.relative_hi) == (200.0, 1.0, 1.0, 1.0)
    failed = confirmation(serving("uint4", {"max_qps": 0.0, "max_qps_hi": 40.0, "paired": {"reference_max_qps": 200.0, "qps_ratio": 0.0,
                                            "qps_ratio_lo": None, "qps_ratio_hi": 0.2}}))
    assert failed.max_qps == 0.0 and math.isnan(failed.relative_lo) and decide.confirmation_fails(failed, None, 60) is not None
    broken = confirmation(serving("uint4", {}, status="error"))
    assert broken.max_qps == 0.0 and "is error: it broke" in broken.method



def test_a_paired_search_without_enough_runs_leaves_the_bracket_open_and_says_why():
    short = "not enough runs: 3 joint rounds of 6 (serve.max_search_s=240 reached)"
    c = confirmation(serving("uint4", {"max_qps": 300.0, "max_qps_lo": 300.0, "max_qps_hi": 330.0,
                                       "paired": {"reference_max_qps": 200.0, "qps_ratio": None, "qps_ratio_lo": None, "qps_ratio_hi": None,
                                                  "not_enough_runs": short}}))
    why = decide.open_bracket(c)
    assert c.not_enough_runs == short and short in why and "nan" not in why


def test_a_server_job_the_host_left_without_an_answer_is_served_again_once_the_others_are_served(tmp_path):
    """Stage 4 as a sweep: a paired Server job whose rounds the host set aside (no ratio: bench.record.withheld) is served
    again, with the same config, after the other candidates, up to `measure_again` times; the pick reads the new
    measurement, which names the withheld one."""
    from bench.config.compose import compose
    from bench.recommend.funnel import Outcome, confirm_best

    def config(*extra):
        return compose(["+sweep=recommend", "+preset=tiny", f"reports_dir={tmp_path}", *extra])

    a, b = Candidate("uint4", 1024, 1), Candidate("int8_tbe", 1024, 1)
    served, told = [], []

    def confirm_planting(candidate, fp32, jobs, label):  # uint4's first job withheld, every other one answered
        served.append((label, candidate.backend, candidate.serve.scenario))
        rid = f"r{len(served)}"
        if label == a.label():
            return Confirmation(0.0, None, None, 0.0, math.nan, math.nan, math.nan, None, "paired", [rid],
                                "not enough runs: 0 rounds", withheld="no paired ratio, its rounds set aside: slow host")
        return Confirmation(300.0, 300.0, 330.0, 200.0, 1.5, 1.2, 1.65, 30.0, "paired", [rid])

    def stage4(*extra):
        served.clear()
        cfg = config("recommend.confirm=2", *extra)
        out = Outcome(cfg, 0.001, ["fp32", a.backend, b.backend], [1])
        out.estimates = {a: est(2.0), b: est(1.5)}
        cfgs = {name: config(f"backend={name}") for name in out.backends}
        confirmed = confirm_best(out, [(a, est(2.0), facts(a.backend)), (b, est(1.5), facts(b.backend))], cfgs, None,
                                 confirm_planting, told.append)
        return out, confirmed

    out, confirmed = stage4()
    assert [label for label, *_ in served] == [a.label(), b.label(), f"{a.label()} again 1"]  # after b, once
    assert all(scenario == "server" for *_, scenario in served)
    again = out.confirmations[a]
    assert again.relative == 1.5 and again.withheld is None and again.records == ["r1", "r3"]
    assert "served again after record r1, which the host left without an answer" in again.method
    assert [c for c, _, _ in confirmed] == [a, b] and not [r for r in out.rejections if r.stage == CONFIRM]
    assert any("serving uint4 bs=1024 threads=1 again (1 of 1, measure_again): the host left it without an answer "
               "(no paired ratio, its rounds set aside: slow host)" in line for line in told)
    # measure_again=0: served once; its confirmation keeps the open bracket and says why
    out, confirmed = stage4("measure_again=0")
    assert [label for label, *_ in served] == [a.label(), b.label()] and out.confirmations[a].withheld
    assert decide.open_bracket(out.confirmations[a]).startswith("its own Server search found no INVALID target")


def test_a_withheld_serving_record_says_why_in_its_confirmation():
    why = "no paired ratio, its rounds set aside: slow host"
    c = confirmation(serving("uint4", {"max_qps": 0.0, "measure_again": why, "paired": {"qps_ratio": None}}))
    assert c.withheld == why
    assert confirmation(serving("uint4", {"max_qps": 0.0, "measure_again": why}, status="error")).withheld is None


def test_a_part_of_a_job_has_its_own_identity_and_whole_jobs_keep_theirs(tmp_path):
    """`measure` (facts, served) joined the config after records were stored: a whole job (measure null) keeps the hash it
    had without the key, so every stored record still resumes and joins; a facts or served job is never a whole job's."""
    from bench.config.compose import compose
    cfg = compose(["+sweep=recommend", "+preset=tiny", "backend=int8_tbe", f"reports_dir={tmp_path}"])
    whole = dataclasses.asdict(offline_config(cfg, 256, 1))
    before_the_key = {k: v for k, v in whole.items() if k != "measure"}
    assert whole["measure"] is None and job_hash(whole) == job_hash(before_the_key)
    facts_hash = job_hash(dataclasses.asdict(facts_config(cfg)))
    served_hash = job_hash(dataclasses.asdict(served_config(cfg, 256, 1)))
    assert len({job_hash(whole), facts_hash, served_hash}) == 3


# ------------------------------------------------------------------------------------------------ on real jobs


@pytest.fixture(scope="module")
def fast_models(tmp_path_factory):
    return train_once(tmp_path_factory.mktemp("recommend-models"), FAST)


@pytest.fixture
def make(tmp_path, fast_models):
    return config_maker(tmp_path, fast_models, FAST)


RECOMMEND = ["+sweep=recommend", "recommend.batch_sizes=[1024]", "recommend.threads=[1]", "timing.max_rounds=2", *SHORT_SERVE]


@pytest.mark.slow
def test_accuracy_and_size_are_measured_once_then_read_back(make, tmp_path):
    """Stages 1-2's figures are a `facts` job's record (bench.routes.facts): stored in the record store, a second session
    reads them back (resume) and measures nothing; the results layer reads the same figures from the store."""
    cfg = make(*RECOMMEND, "backend=int8_tbe")
    first, reused = backend_facts(cfg, "int8_tbe", Jobs(Session(), tmp_path / "jobs"))
    assert not reused and first.skipped is None and first.auc_delta_lo <= first.auc_delta <= first.auc_delta_hi
    assert 0 < first.embedding_mb <= first.model_mb
    again, reused = backend_facts(cfg, "int8_tbe", Jobs(Session(), tmp_path / "jobs2"))
    assert reused and again == first
    fp32, _ = backend_facts(make(*RECOMMEND, "backend=fp32"), "fp32", Jobs(Session(), tmp_path / "jobs3"))
    assert fp32.auc_delta == fp32.auc_delta_lo == fp32.auc_delta_hi == 0.0 and fp32.fp32_equivalent and fp32.model_mb > first.model_mb
    stored = [RunRecord.from_dict(json.loads(line)) for line in (tmp_path / "reports" / "records.jsonl").read_text().splitlines()]
    assert [r.config["measure"] for r in stored] == ["facts", "facts"]  # int8_tbe's once, fp32's
    table = measured_table(stored)
    int8 = table[table["backend"] == "int8_tbe"].iloc[0]
    assert (int8["measure"], int8["status"], int8["auc_delta"], int8["model_mb"]) == ("facts", "ok", first.auc_delta, first.model_mb)
    from bench.report.measured_parts import measured_parts_section
    shown = "\n".join(measured_parts_section(stored))  # the report's section, as `python -m bench.report` renders it
    assert f"| int8_tbe | {first.auc_delta:+.5f} [".replace("-", "\u2212") in shown and "nan" not in shown
    assert results_table(stored).empty  # a part of a job is never a row of the results table


@pytest.mark.slow
def test_served_times_are_timed_once_then_read_back(make, tmp_path):
    """Stage 3's served batch times are `served` jobs (bench.routes.served), one per batcher size: a second session reads
    them back from the store (the same figures, nothing prepared); other threads, another query set or another size are
    other jobs, timed."""
    cfg = make(*RECOMMEND, "backend=int8_tbe")
    first, why, reused = served_times(cfg, [256, 1024], 1, Jobs(Session(), tmp_path / "jobs"))
    assert why is None and not reused and sorted(first) == [256, 1024]
    assert all(t.ms > 0 and t.fp32_ms > 0 and 0 < t.pairs <= size for size, t in first.items())
    again, why, reused = served_times(cfg, [256, 1024], 1, Jobs(Session(), tmp_path / "jobs"))
    assert why is None and reused and again == first
    jobs = Jobs(Session(), tmp_path / "jobs")
    _, _, reused = served_times(cfg, [1024, 512], 1, jobs)
    assert not reused and jobs.resumed == 1  # 1024's read back, 512's timed
    fixed = dataclasses.replace(cfg, serve=dataclasses.replace(cfg.serve, fixed_pairs=100))
    assert job_hash(dataclasses.asdict(served_config(fixed, 1024, 1))) != job_hash(dataclasses.asdict(served_config(cfg, 1024, 1)))
    assert job_hash(dataclasses.asdict(served_config(cfg, 1024, 2))) != job_hash(dataclasses.asdict(served_config(cfg, 1024, 1)))
    stored = [json.loads(line) for line in (tmp_path / "reports" / "records.jsonl").read_text().splitlines()]
    assert [(r["config"]["measure"], r["batch_size"]) for r in stored] == [("served", 256), ("served", 1024), ("served", 512)]


@pytest.mark.slow
def test_a_tune_map_joins_the_candidates_under_its_own_name(make, tmp_path):
    """A tune's per_table.yaml in the reports_dir joins the default candidates as uint4 with the map's types; named
    with `recommend.tune_map` it joins a given list too. Its facts, jobs and estimates carry its own name and its
    records the map."""
    from bench.recommend.funnel import TUNED, candidate_overrides, tune_map
    left = tmp_path / "reports" / "tune" / "latest" / "per_table.yaml"
    assert tune_map(make(*RECOMMEND)) is None
    left.parent.mkdir(parents=True)
    left.write_text("{t_cat_0: int8, t_cat_1: fp16}\n")
    assert tune_map(make(*RECOMMEND)) == left  # default candidates: the tune's map joins them
    assert tune_map(make(*RECOMMEND, "recommend.backends=[int8_tbe]")) is None  # a given list: only when named
    cfg = make(*RECOMMEND, "recommend.backends=[int8_tbe]", f"recommend.tune_map={left}", "accuracy.max_auc_drop=0.5",
               "recommend.confirm=1")
    assert candidate_overrides(cfg, TUNED) == ["backend=uint4", f"backend.per_table_file={left}"]
    jobs = Jobs(Session(), tmp_path / "jobs")
    told = []
    out = run_recommend(cfg, lambda name: make(*RECOMMEND, f"recommend.tune_map={left}", *candidate_overrides(cfg, name)), jobs,
                        say=told.append, confirm=lambda *args: Confirmation(0.0, None, None, 0.0, math.nan, math.nan, math.nan, None, "stage 4 left out: this test is about stages 1-3"))
    assert out.backends == ["fp32", "int8_tbe", TUNED] and f"{TUNED}: uint4 with the per-table map {left}" in told[0]
    assert out.facts[TUNED].backend == TUNED and out.facts[TUNED].skipped is None
    assert out.facts[TUNED].model_mb != out.facts["int8_tbe"].model_mb  # its own tables' types, not another backend's
    assert any(c.backend == TUNED for c in out.estimates)
    records = [json.loads(line) for line in (tmp_path / "reports" / "records.jsonl").read_text().splitlines()]
    tuned = [r for r in records if r["config"]["backend"].get("per_table_file") == str(left)]
    assert tuned and all(r["backend"] == "uint4" and r["config"]["backend"]["per_table"] == {"t_cat_0": "int8", "t_cat_1": "fp16"}
                         for r in tuned)
    # a tune run again into the same file: its facts are another backend's, measured, not read back (the runner
    # joins the map's contents to the job's identity)
    tuned_cfg = make(*RECOMMEND, *candidate_overrides(cfg, TUNED))
    _, reused = backend_facts(tuned_cfg, TUNED, Jobs(Session(), tmp_path / "again"))
    assert reused
    left.write_text("{t_cat_0: int2}\n")
    changed, reused = backend_facts(tuned_cfg, TUNED, Jobs(Session(), tmp_path / "again"))
    assert not reused and changed.model_mb != out.facts[TUNED].model_mb


@pytest.mark.slow
def test_a_candidate_best_offline_whose_server_runs_fail_the_bound_is_not_picked(make, tmp_path):
    """The candidate stage 3 ranks first is served under a bound no load can meet (0.01 ms): its LoadGen Server runs
    really fail; stage 4 must reject it and pick the next confirmed one."""
    # a loose budget: at 2,048 eval rows a backend's ΔAUC interval is wide, and this test is about stage 4, not stage 1
    cfg = make(*RECOMMEND, "recommend.backends=[int8_tbe,uint4]", "recommend.confirm=2", "accuracy.max_auc_drop=0.01")
    planted = []

    def confirm_planting(candidate, fp32, jobs, label):
        if not planted:  # stage 4 confirms the best estimate first
            planted.append(label)
            candidate = dataclasses.replace(candidate, serve=dataclasses.replace(candidate.serve, bound_ms=0.01))
        return confirm(candidate, fp32, jobs, label)

    jobs = Jobs(Session(), tmp_path / "jobs")
    out = run_recommend(cfg, lambda name: make(*RECOMMEND, f"backend={name}"), jobs, say=lambda _: None, confirm=confirm_planting)
    anchored = decide.anchored_estimates([(c, e, out.facts[c.backend]) for c, e in out.estimates.items()])
    best = max(out.estimates, key=lambda c: anchored[c][0])  # stage 3's best, read through its ratio as stage 4 orders
    assert planted == [best.label()] and best in out.confirmations and out.confirmations[best].max_qps == 0.0
    assert out.chosen is not None and out.chosen != best and out.confirmations[out.chosen].max_qps > 0, out.rejections
    rejected = [r for r in out.rejections if r.what == best.label()]
    assert [r.stage for r in rejected] == [CONFIRM] and "no target QPS met the 60 ms p99 bound" in rejected[0].reason
    # every job left its record in the store and its folder
    assert (tmp_path / "reports" / "records.jsonl").is_file() and len(list((tmp_path / "jobs").glob("*/record.json"))) == jobs.count


def test_job_configs_keep_what_the_stage_needs(make):
    cfg = make(*RECOMMEND, "backend=uint4")
    off = offline_config(cfg, 256, 2)
    assert (off.batch_size, off.threads, off.timing.threads, off.serve, off.resume) == (256, 2, 2, None, True)
    srv = server_config(cfg, 1024, 1, 45.0)
    assert (srv.batch_size, srv.threads, srv.serve.scenario, srv.serve.bound_ms, srv.serve.accuracy_scenarios) == (1024, 1, "server", 45.0, [])
    assert srv.serve.min_query_count == 500  # the command line's serve.* keys reach stage 4
    assert math.isfinite(cfg.recommend.budget_min)


@pytest.mark.slow
def test_stage_3_stops_timing_backends_the_budget_cannot_hold(make, tmp_path):
    """An injected clock where every reading is 30 s later: after fp32's jobs the next backend's would pass the budget
    (1 min, less stage 4's share), so it is not timed and the answer says so; fp32 is timed whatever the budget."""
    cfg = make(*RECOMMEND, "recommend.backends=[int8_tbe,uint4]", "recommend.confirm=1", "recommend.budget_min=1")
    ticks = iter(range(0, 10_000_000, 30))

    def clock():
        return float(next(ticks))

    jobs = Jobs(Session(), tmp_path / "jobs", clock=clock)
    told = []
    out = run_recommend(cfg, lambda name: make(*RECOMMEND, f"backend={name}"), jobs, say=told.append, clock=clock)
    cut = [r for r in out.rejections if r.stage == SPEED and "not timed" in r.reason]
    passed = [b for b in ("int8_tbe", "uint4") if b not in {r.what for r in out.rejections if r.stage == ACCURACY}]
    assert sorted(r.what for r in cut) == sorted(f"{b} threads=1" for b in passed)
    assert all("would take the funnel past recommend.budget_min=1" in r.reason for r in cut)
    assert {c.backend for c in out.estimates} == {"fp32"} and out.chosen is not None and out.chosen.backend == "fp32"
    assert told[0].startswith("recommend: p99 <= 60 ms") and "budget 1 min" in told[0]


def test_the_pick_reads_server_qps_through_the_ratio_to_fp32():
    """Two candidates at one batcher size whose paired fp32 searches saw the host at different speeds: the one with the
    higher ratio is picked, though its absolute max QPS is lower; the runner-up says which constraint would pick it."""
    a, b = Candidate("a", 1024, 1), Candidate("b", 1024, 1)
    fast_host = Confirmation(556.0, 556.0, 585.0, 278.0, 2.0, 1.9, 2.1, 28.0, "paired")
    slow_host = Confirmation(383.0, 383.0, 403.0, 164.0, 2.34, 2.23, 2.46, 13.0, "paired")
    confirmed = [(a, fast_host, facts("a", -0.00013, -0.00022, -0.00003, mb=2.88)), (b, slow_host, facts("b", -0.00007, -0.00015, 0.00001, mb=2.87))]
    anchored = decide.anchored_qps(confirmed)
    assert anchored[a] == pytest.approx((2.0 * 221.0, 1.9 * 221.0, 2.1 * 221.0))
    assert anchored[b] == pytest.approx((2.34 * 221.0, 2.23 * 221.0, 2.46 * 221.0))
    chosen = decide.pick(confirmed, None)
    assert chosen[0] == b
    lines = decide.runner_up_lines(chosen, confirmed)
    assert lines == ["runner-up, no tighter constraint favours it: a bs=1024 threads=1 (556 QPS under the bound, 2.00x fp32's [1.90, 2.10], "
                     "ΔAUC -0.00013, 2.88 MB)"]
    lines = decide.runner_up_lines(confirmed[0], confirmed)  # were a the pick, b is the more accurate and the smaller
    assert lines[0].startswith("with a budget below 0.00022 (the pick's ΔAUC interval reaches -0.00022): b bs=1024 threads=1")


def test_an_open_bracket_never_outranks_a_closed_one():
    """The records of a run on the idle machine: compiled_fp32 at 387 QPS beside an fp32 search whose budget ended at
    40.3 VALID (both brackets open, ratio 9.60x with no interval) against inc_int8_static at 894 [894, 939] QPS,
    1.42x [1.35, 1.49] of a closed fp32. The closed one is the pick and says why; the open one is picked only alone."""
    compiled, inc = Candidate("compiled_fp32", 4096, 2), Candidate("inc_int8_static", 4096, 2)
    open_conf = Confirmation(387.0, 387.0, None, 40.3, 9.603, float("nan"), float("nan"), 21.7, "paired")
    closed = Confirmation(894.0, 894.0, 939.0, 630.0, 1.419, 1.348, 1.490, 51.5, "paired")
    assert "fp32's search beside it found no INVALID target above 40.3 QPS" in decide.open_bracket(open_conf)
    assert decide.open_bracket(closed) is None
    own_open = Confirmation(500.0, 500.0, None, 300.0, 1.6, 1.5, 1.7, 20.0, "paired")
    assert "its own Server search found no INVALID target above 500 QPS" in decide.open_bracket(own_open)
    confirmed = [(compiled, open_conf, facts("compiled_fp32", 0.0, mb=2.9)), (inc, closed, facts("inc_int8_static", -0.0001, mb=1.0))]
    for rows in (confirmed, confirmed[::-1]):
        assert decide.pick(rows, None)[0] == inc
        assert decide.pick(rows, 100.0)[0] == inc  # with a target rate too
    why = decide.why_pick(confirmed, None)
    assert len(why) == 1 and why[0].startswith("why: inc_int8_static bs=4096 threads=2 894 [849.2, 938.7] QPS against the runner-up "
                                                "compiled_fp32 bs=4096 threads=2 387 [387, -]")
    assert "the runner-up is not confirmed (its own Server search found no INVALID target above 387 QPS" in why[0] and "a closed bracket outranks an open one" in why[0]
    assert decide.pick([confirmed[0]], None)[0] == compiled  # nothing closed met the constraints
    assert decide.why_pick([confirmed[0]], None)[0].startswith("the pick is not confirmed: its own Server search found no INVALID target above 387 QPS")


def test_closed_candidates_whose_intervals_overlap_are_picked_by_accuracy_then_size():
    """Two closed candidates at one configuration whose Server QPS intervals overlap: neither point nor low end decides
    (they trade places between two identical runs); the smaller ΔAUC drop does, then the fewer MB, whichever is faster by
    its point. Intervals apart: the higher low end."""
    a, b = Candidate("a", 1024, 1), Candidate("b", 1024, 1)
    wide = Confirmation(600.0, 600.0, 700.0, 300.0, 2.0, 1.5, 2.5, 30.0, "paired")
    narrow = Confirmation(570.0, 570.0, 600.0, 300.0, 1.9, 1.8, 2.0, 30.0, "paired")
    for conf_a, conf_b in ((wide, narrow), (narrow, wide)):  # either faster by its point and its low end
        confirmed = [(a, conf_a, facts("a", -0.0003, mb=2.0)), (b, conf_b, facts("b", -0.0001, mb=3.0))]
        assert decide.speed_ties(confirmed, None) == {a, b}
        assert decide.pick(confirmed, None)[0] == b  # the smaller ΔAUC drop
        why = decide.why_pick(confirmed, None)
        assert why[0].startswith("why: the Server QPS intervals read through the paired ratio to fp32 overlap") and "the smaller ΔAUC drop" in why[0]
        same_auc = [(a, conf_a, facts("a", -0.0001, mb=2.0)), (b, conf_b, facts("b", -0.0001, mb=3.0))]
        assert decide.pick(same_auc, None)[0] == a  # then the fewer MB
    apart = Confirmation(900.0, 900.0, 950.0, 300.0, 3.0, 2.9, 3.1, 30.0, "paired")
    confirmed = [(a, apart, facts("a", -0.0003)), (b, narrow, facts("b", -0.0001))]
    assert decide.speed_ties(confirmed, None) == {a} and decide.pick(confirmed, None)[0] == a
    assert "the intervals are apart" in decide.why_pick(confirmed, None)[0]


def test_served_times_set_the_estimate_and_the_offline_speedup_only_its_interval():
    from bench.recommend.speed import served_times
    from bench.serve.path import ServedTimes

    points = {256: (2.0, 3.0, 2.5, 3.5), 1024: (6.0, 3.0, 2.5, 3.5)}  # offline: 3x fp32
    served = {256: ServedTimes(200.0, 3.0, 4.0, 3.0, 4.0), 1024: ServedTimes(900.0, 6.0, 9.0, 6.0, 9.0)}  # served: 1.33-1.5x
    assert served_times(points, served, 0) == {200.0: 4.0, 900.0: 9.0}
    assert served_times(points, served, 1) == {200.0: 3.0, 900.0: 6.0}
    assert served_times(points, served, 2) == pytest.approx({200.0: 3.0 * 3.0 / 2.5, 900.0: 6.0 * 3.0 / 2.5})
    offline = estimate(points, SIZES, 1024, 0.002, 60.0)
    on_path = estimate(points, SIZES, 1024, 0.002, 60.0, served)
    assert 1.2 < on_path.relative < 1.8 < 2.5 < offline.relative  # near the served ratio, not the offline one
    assert on_path.fp32_qps < offline.fp32_qps  # fp32's served batches are slower than its offline ones
    assert on_path.qps_lo < on_path.qps < on_path.qps_hi and on_path.relative_lo < on_path.relative < on_path.relative_hi
    assert on_path.served == {256: served[256].as_metrics(), 1024: served[1024].as_metrics()} and offline.served == {}
    assert set(estimate(points, SIZES, 256, 0.002, 60.0, served).served) == {256}  # the batcher forms no larger
    same = {r: ServedTimes(t.pairs, t.fp32_ms, t.fp32_ms, t.fp32_ms, t.fp32_ms) for r, t in served.items()}
    assert estimate(points, SIZES, 1024, 0.002, 60.0, same).relative == pytest.approx(1.0)
