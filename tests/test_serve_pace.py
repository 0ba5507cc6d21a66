"""The host's pace in a Server run (bench.serve.pace): each run's median batch time against the same serving
setup's usual here, from the runs earlier jobs stored; a slow run set aside by the search and the staircase, its
round left out of the paired ratio; and a real serving job on a history that says the host used to be faster."""

import dataclasses
import json
import shutil

import pytest

from bench.config.compose import compose
from bench.io import compact_jsonl
from bench.serve import pace as pace_log
from bench.serve.pace import FILL, MIN_RUNS, RECENT, VERSION, Pace, latest_runs, log_path, setup_key
from bench.serve.paired import CANDIDATE, NOT_ENOUGH, REFERENCE, TRACK, interleave
from bench.store import read_records
from bench.serve.qps_search import aside_cause, aside_words, disturbed, search_plan
from bench.serve.scenario import FP32, round_qps
from bench.runner import run_job
from tests.conftest import run_bench
from tests.test_faults import FAST, fast_cfg, fast_models  # noqa: F401 (fixtures)
from tests.test_serve import TINY_SERVE


def served(ms, rows=8.0):
    """A Server run as Runs.run leaves it: its batch times on the SUT's clock and its batch fill."""
    return {"late": {"service_ms": {"p50": ms}}, "batching": {"rows_per_batch": rows}}


def pace(stored, max_slowdown=0.15):
    return Pace("setup", stored, max_slowdown)


def test_the_log_keeps_each_setups_latest_runs_once_it_passes_its_size(tmp_path, monkeypatch):
    """Compaction keeps what `Pace.read` reads (each setup's RECENT latest runs of this version) and nothing else:
    every setup's usual reads the same before and after, and a job's append past COMPACT_BYTES compacts."""
    path = tmp_path / "pace.jsonl"
    rows = [{"v": VERSION, "setup": s, "service_ms": 1.0 + i, "rows_per_batch": 8.0} for i in range(RECENT + 5) for s in "ab"]
    rows += [{"v": VERSION, "setup": "c", "service_ms": 3.0, "rows_per_batch": 8.0}, {"v": VERSION + 1, "setup": "a", "service_ms": 9.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    before = {s: Pace.read(path, s, 0.15).stored for s in "abc"}
    assert compact_jsonl(path, latest_runs) == 2 * 5 + 1 + 1  # five older runs of a and of b, the other version, the damaged line
    assert {s: Pace.read(path, s, 0.15).stored for s in "abc"} == before and len(before["a"]) == RECENT
    assert compact_jsonl(path, latest_runs) == 0  # nothing left to drop: the file is not rewritten
    # a job's append compacts once the log is past its size
    monkeypatch.setattr(pace_log, "COMPACT_BYTES", path.stat().st_size)
    job = Pace("a", [], 0.15)
    job.judge(served(50.0))
    assert job.store(path) == 1
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(kept) == 2 * RECENT + 1 and kept[-1]["service_ms"] == 50.0
    assert Pace.read(path, "a", 0.15).stored == [*before["a"][1:], (8.0, 50.0)] and Pace.read(path, "b", 0.15).stored == before["b"]


def test_a_run_has_a_usual_once_enough_runs_at_its_fill_were_stored():
    assert pace([(8.0, 2.0)] * (MIN_RUNS - 1)).usual(8.0) == (None, MIN_RUNS - 1)
    stored = [(8.0, ms) for ms in (2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 9.0)]  # one slow job's run among them
    assert pace(stored).usual(8.0) == (pytest.approx(2.35), MIN_RUNS)  # the median: one slow run does not move it
    # a fuller batch takes longer: runs at another fill are not this run's usual
    wide = stored + [(16.0, 5.0)] * MIN_RUNS
    assert pace(wide).usual(8.0)[0] == pytest.approx(2.35) and pace(wide).usual(16.0 * (1 + FILL / 2))[0] == 5.0


def test_a_run_past_its_usual_by_more_than_the_slowdown_is_set_aside():
    p = pace([(8.0, 2.0)] * MIN_RUNS)
    normal, slow = p.judge(served(2.2)), p.judge(served(2.4))
    assert normal["machine"] == {"pace": pytest.approx(1.1), "usual_service_ms": 2.0, "usual_runs": MIN_RUNS, "host_slow": False}
    assert slow["machine"]["host_slow"] and aside_cause(slow) == "slow host" and disturbed(slow) and not disturbed(normal)
    assert p.summary() | {"median_pace": None} == {"setup": "setup", "max_slowdown": 0.15, "stored_runs": MIN_RUNS, "runs": 2, "judged": 2,
                                                  "slow": 1, "median_pace": None}
    # no limit: the pace is still stamped, nothing is set aside
    off = pace([(8.0, 2.0)] * MIN_RUNS, None).judge(served(9.0))
    assert off["machine"]["pace"] == 4.5 and not off["machine"]["host_slow"]
    # a setup served here for the first time: no usual, no pace, nothing set aside
    first = pace([]).judge(served(9.0))
    assert first["machine"]["pace"] is None and not disturbed(first)
    assert pace([]).judge({"validity": "VALID"}) == {"validity": "VALID"}  # a run without batch times is left as it is


def test_steal_and_a_slow_host_are_named_apart():
    stolen = {"machine": {"steal_share": 0.3}}
    slow = {"machine": {"steal_share": 0.0, "host_slow": True}}
    assert aside_cause(stolen) == "steal" and aside_cause(slow) == "slow host" and aside_cause({"machine": {}}) is None
    assert aside_cause(stolen, max_steal=None) is None
    assert aside_words([stolen]) == "1 set aside: steal" and aside_words([slow, slow]) == "2 set aside: slow host"
    assert aside_words([stolen, slow, slow]) == "3 set aside: 1 steal, 2 slow host" and aside_words([{}]) == ""


def test_the_log_keeps_each_setup_s_latest_runs(tmp_path):
    path = log_path(tmp_path)
    first = pace([])
    for ms in range(1, RECENT + 6):
        first.judge(served(float(ms)))
    assert first.store(path) == RECENT + 5
    other = Pace("another", [], 0.15)
    other.judge(served(50.0))
    other.store(path)
    with open(path, "a") as f:  # a line another version of the log wrote is not read
        f.write(json.dumps({"v": VERSION + 1, "setup": "setup", "service_ms": 0.1, "rows_per_batch": 8.0}) + "\n")
    again = Pace.read(path, "setup", 0.15)
    assert [ms for _, ms in again.stored] == [float(ms) for ms in range(6, RECENT + 6)]  # the RECENT latest
    assert Pace.read(path, "another", 0.15).stored == [(8.0, 50.0)] and Pace.read(tmp_path / "none.jsonl", "setup", 0.15).stored == []


def test_the_setup_key_holds_what_sets_a_batch_s_time():
    cfg = compose(["+preset=tiny", "+sweep=serve", "backend=fp32"])
    key = setup_key(cfg, cfg.backend)
    assert key == setup_key(cfg, FP32)  # fp32 served alone is the setup of every paired job's fp32 side
    assert key != setup_key(cfg, compose(["+preset=tiny", "backend=int8_tbe"]).backend)
    for same in ("serve.bound_ms=80", "serve.min_rounds=8", "serve.max_search_s=30"):  # the search's rules: not the batch's time
        assert setup_key(compose(["+preset=tiny", "+sweep=serve", "backend=fp32", same]), FP32) == key
    for other in ("batch_size=64", "serve.max_wait_ms=5", "threads=2", "workload.eval_samples=4096"):
        assert setup_key(compose(["+preset=tiny", "+sweep=serve", "backend=fp32", other]), FP32) != key


def limits(slow_rounds):
    """Both sides judged against fixed limits (100 and 200 QPS); the tracking runs of the rounds in `slow_rounds`
    served slow and failed, as a slow phase of the host does (every round runs each side once)."""
    made = []

    def run(side, qps, draw, role):
        made.append((side, role))
        limit = {CANDIDATE: 100, REFERENCE: 200}[side]
        step = {"target_qps": qps, "validity": "VALID" if qps <= limit else "INVALID", "latency_ms": {"p99": qps / limit * 50}}
        if role == TRACK and (len(made) - 1) // 2 in slow_rounds:
            step.update(validity="INVALID", machine={"host_slow": True, "pace": 1.4})
        return step

    return run


def plan(start):
    return search_plan(start, 1.5, 0.1, 20, 1, round_qps, None, None)


def test_a_round_with_a_slow_run_is_left_out_of_the_ratio():
    p = interleave(plan(100), plan(200), limits(range(8, 11)), track_rounds=16)
    aside = p.aside_rounds
    assert aside == [8, 9, 10] and not set(aside) & set(p.used_rounds)
    runs = {side: [r for r in p.tracks[side].runs if r["round"] in aside] for side in (CANDIDATE, REFERENCE)}
    assert all(r["moved"] == 0 and r["validity"] == "INVALID" for side in runs.values() for r in side)
    assert p.ratio == pytest.approx(0.5, rel=0.05) and p.as_metrics()["aside_rounds"] == 3
    assert "3 set aside: slow host" in p.as_metrics()["track_candidate"]
    assert p.withheld() is None  # a ratio despite the rounds set aside: nothing to measure again


def test_a_job_whose_every_round_is_slow_gives_no_ratio():
    p = interleave(plan(100), plan(200), limits(range(100)), track_rounds=8)
    m = p.as_metrics()
    assert p.ratio is None and m["qps_ratio"] is None and m["used_rounds"] == 0 and m["aside_rounds"] == 8
    assert m["not_enough_runs"].startswith(NOT_ENOUGH) and "8 rounds left out, a run set aside" in m["not_enough_runs"]
    assert p.withheld() == f"no paired ratio, its rounds set aside: {m['not_enough_runs']}"  # a resumed sweep measures it again
    assert m["fitted_qps"] is None and m["qps_ratio_levels"] is None  # no limits that would read as the ratio withheld


def test_a_bad_slowdown_is_one_line_and_exit_2(tmp_path):
    result = run_bench("+sweep=serve", "backend=fp32", "serve.max_slowdown=0", f"reports_dir={tmp_path / 'r'}",
                       f"cache_dir={tmp_path / 'c'}", timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr[-2000:]
    assert "serve.max_slowdown must be above 0" in result.stderr and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_serving_job_on_a_history_of_a_faster_host_sets_its_runs_aside(fast_cfg):  # noqa: F811
    cfg = fast_cfg(*TINY_SERVE, "backend=fp32", "serve.max_slowdown=0.15")
    first, exc = run_job(cfg)
    assert exc is None and first.status == "ok", first.error
    assert first.metrics["pace"]["judged"] == 0 and first.metrics["pace"]["runs"] == len(first.metrics["steps"])  # nothing stored yet
    path = log_path(cfg.cache_dir)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert {line["setup"] for line in lines} == {first.metrics["pace"]["setup"]}
    # the same setup's history, as if this host had served it ten times faster before, at every batch fill the runs can
    # have: a run's usual comes from stored runs within 10% of its fill, and how many queries share a batch moves
    # with how busy the machine is (one query of 64 pairs a batch, up to about three). RECENT lines in all.
    def faster(rows: float) -> dict:
        near = min(lines, key=lambda line: abs(line["rows_per_batch"] - rows))
        return {**near, "rows_per_batch": rows, "service_ms": near["service_ms"] * rows / near["rows_per_batch"] / 10}

    fills = [64 * 1.15**k for k in range(RECENT // MIN_RUNS)]  # 64 to 170 rows; each within 15% of the next
    path.write_text("".join(json.dumps(faster(rows)) + "\n" for rows in fills for _ in range(MIN_RUNS)))
    again, exc = run_job(dataclasses.replace(cfg, resume=False))
    assert exc is None and again.status == "ok", again.error
    m = again.metrics
    assert m["pace"]["slow"] == m["pace"]["judged"] == len(m["steps"]) > 0
    assert all(s["machine"]["host_slow"] and s["machine"]["pace"] > 5 for s in m["steps"])
    assert "set aside: slow host" not in m["evidence"]  # every run at a target was slow: they all count, as the search says
    assert all(j["runs"] == 2 for j in m["judgments"])  # each target ran again once (2 x serve.judgments) before counting them


@pytest.mark.slow
def test_a_sweep_measures_again_a_job_the_host_left_without_an_answer_before_its_report(tmp_path, fast_models):  # noqa: F811
    # A paired Server job whose every tracking round the host served slow has no ratio: its record says so
    # (measure_again) and, once the sweep's jobs are done, the sweep measures the job again (measure_again=1) into
    # <job>/again-1/; the report reads that measurement, and the withheld record stays in the store as it was.
    shutil.copytree(fast_models, tmp_path / "cache" / "models")
    # enough queries a run for LoadGen's early stopping to judge a load VALID: both sides meet load and track it
    args = [*FAST, *TINY_SERVE, "backend=uint4", "serve.scenario=server", "serve.max_slowdown=0.15", "serve.min_query_count=700", "serve.qps_start=1000",
            f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}"]
    first = run_bench(*args, "measure_again=0", f"hydra.sweep.dir={tmp_path / 'm1'}", timeout=300)
    assert first.returncode == 0 and "1 jobs (1 ok, 0 error, 0 skipped)" in first.stdout, first.stderr[-3000:]
    # both sides' serving setups as if this host had served them ten times faster before: every run of the next
    # sweep is slow, and so is every run of its measurement again (the planted lines stay the most of the RECENT)
    path = next((tmp_path / "cache" / "timing").glob("*-pace.jsonl"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len({line["setup"] for line in lines}) == 2
    path.write_text("".join(json.dumps({**line, "service_ms": line["service_ms"] / 10}) + "\n" for line in lines * RECENT))
    second = run_bench(*args, f"hydra.sweep.dir={tmp_path / 'm2'}", timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert ("1 jobs (1 ok, 0 error, 0 skipped; 1 measured again after the host withheld an answer; 1 still without an answer, "
            "the host's doing (resume=true measures again))") in second.stdout, second.stdout[-3000:]
    assert "measure again (1 of 1, measure_again): 1 job(s) the host left without an answer: uint4 cpu" in second.stdout + second.stderr
    stored = read_records(tmp_path / "reports" / "records.jsonl")
    assert len(stored) == 3 and stored[0].metrics.get("measure_again") is None  # the first sweep, at no usual pace yet
    withheld, again = stored[1], stored[2]
    assert withheld.metrics["measure_again"].startswith("no paired ratio, its rounds set aside") and withheld.metrics["paired"]["qps_ratio"] is None
    assert again.metrics["measured_again_after"] == withheld.record_id and again.config_hash == withheld.config_hash
    assert again.metrics["measure_again"]  # the host still slow: still without an answer, and said so
    job = tmp_path / "m2" / "0"
    assert json.loads((job / "record.json").read_text())["record_id"] == withheld.record_id  # as it was
    assert json.loads((job / "again-1" / "record.json").read_text())["record_id"] == again.record_id
    assert list((job / "again-1").glob("loadgen/*/mlperf_log_detail.txt"))  # its LoadGen logs beside its record
    report = sorted((tmp_path / "reports" / "serve").glob("2*"))[-1]  # the second sweep's report folder
    assert [json.loads(line)["record_id"] for line in (report / "records.jsonl").read_text().splitlines()] == [again.record_id]
