"""The serving report and gate over stored serving records (a real tiny sweep's, tests/fixtures/serve/records/):
fp32 and int8_tbe, Server and Offline, fp32 INVALID at 450 QPS where int8_tbe was VALID."""

import dataclasses

import pandas as pd
import pytest

from bench.config import GateConfig, RuleSet
from bench.gate import evaluate_gate
from bench.gate.stored import judge, settings
from bench.report import write_report
from bench.results.serving_table import serve_table
from bench.serve.paired import NOT_ENOUGH
from bench.results.table import results_table
from bench.store import read_records
from tests.conftest import REPO

RECORDS = REPO / "tests" / "fixtures" / "serve" / "records" / "records.jsonl"


@pytest.fixture
def records():
    return read_records(RECORDS)


def row(df, backend, scenario):
    return df[(df["backend"] == backend) & (df["scenario"] == scenario)].iloc[0]


def test_one_row_per_backend_and_scenario_with_the_bracket_and_the_ratio(records):
    df = serve_table(records)
    assert list(zip(df["backend"], df["scenario"])) == [("fp32", "server"), ("int8_tbe", "server"),
                                                         ("fp32", "offline"), ("int8_tbe", "offline")]
    fp32, int8 = row(df, "fp32", "server"), row(df, "int8_tbe", "server")
    assert (fp32.max_qps, fp32.max_qps_lo, fp32.max_qps_hi) == (300, 300, 450)
    assert int8.max_qps == 450 and pd.isna(int8.max_qps_hi)  # VALID at every step tried
    assert int8.qps_ratio == pytest.approx(1.5) and fp32.qps_ratio == 1.0
    assert fp32.validity == "200:VALID 300:VALID 450:INVALID" and fp32.bound_ms == 60
    at_max = next(s for s in records[0].metrics["steps"] if s["target_qps"] == 300)
    assert fp32.latency_p99_ms == at_max["latency_ms"]["p99"] and fp32.pairs_per_s == at_max["pairs_per_s"]
    off = row(df, "int8_tbe", "offline")
    assert off.samples_per_s == records[3].metrics["offline_samples_per_s"] and pd.isna(off.bound_ms)
    assert off.qps_ratio == pytest.approx(off.samples_per_s / row(df, "fp32", "offline").samples_per_s)
    assert off.auc_check == "pass" and off.batch_dependent and row(df, "fp32", "offline").auc_shift == 0


def test_the_console_gives_max_qps_per_backend_and_scenario_with_the_bracket_and_the_ratio(records):
    from bench.report.serve import console_lines

    lines = console_lines(records)
    assert lines[:2] == ["  fp32 server (p99 bound 60 ms): max QPS 300 [300, 450], 1.00x fp32's",
                         "  int8_tbe server (p99 bound 60 ms): max QPS 450 [450, —], 1.50x fp32's"]
    assert len(lines) == 4 and lines[2].startswith("  fp32 offline: ") and lines[3].startswith("  int8_tbe offline: ")
    assert "samples/s, " in lines[3] and lines[3].endswith("x fp32's")


def test_the_progress_line_names_the_job_that_just_finished():
    from omegaconf import OmegaConf

    from bench.progress import PlainProgress
    from bench.sweep import SweepCallback

    emitted = []
    callback = SweepCallback()
    callback.bar = PlainProgress(2, "sweep", "job", 0, emit=emitted.append)  # what on_multirun_start makes without a terminal
    for backend in ("fp32", "int8_tbe"):
        job = {"backend": {"name": backend}, "batch_size": 512, "device": {"type": "cpu"}, "serve": {"scenario": "server"}}
        callback.on_job_end(OmegaConf.create(job), None)
    assert "fp32 bs=512 cpu server" in emitted[0] and "int8_tbe" not in emitted[0]
    assert "int8_tbe bs=512 cpu server" in emitted[1]


def test_serving_records_stay_out_of_the_results_table(records):
    assert results_table(records).empty


def test_the_report_writes_serve_md_csv_and_a_plot_per_search(records, tmp_path):
    write_report(records, tmp_path, title="serve fixture")
    text = (tmp_path / "serve.md").read_text()
    assert "| fp32 | 300 | [300, 450] |" in text and "| int8_tbe | 450 | [450, —] |" in text
    assert "## Offline: every query at once" in text and "## Accuracy mode" in text
    assert "Shorter than MLPerf's 600 s minimum: not a compliant result." in text
    assert pd.read_csv(tmp_path / "serve.csv").shape[0] == 4
    assert sorted(p.name for p in tmp_path.glob("serve_latency_*.png")) == ["serve_latency_fp32_synthetic_cpu_512.png",
                                                                            "serve_latency_int8_tbe_synthetic_cpu_512.png"]
    assert "4 serving records" in (tmp_path / "report.md").read_text()


def test_an_errored_serving_job_is_listed(records, tmp_path):
    broken = dataclasses.replace(records[1], status="error", error="RuntimeError: planted", metrics={}, record_id="x")
    write_report([records[0], broken, *records[2:]], tmp_path, title="serve fixture")
    assert "- fp32 / offline / synthetic / cpu: **error**: RuntimeError: planted" in (tmp_path / "serve.md").read_text()


def gate(**rules):
    return GateConfig(rules={b: RuleSet(**r) for b, r in rules.items()})


def verdicts(records, cfg):
    return {(v.backend, v.scenario, v.rule): v for v in evaluate_gate(results_table(records), cfg, serve_table(records)).verdicts}


def test_serving_rules_judge_serving_rows_by_scenario(records):
    v = verdicts(records, gate(int8_tbe={"min_qps_at_sla": 400, "min_qps_ratio": 1.2, "max_p99_ms": 60},
                               fp32={"min_qps_at_sla": 400}))
    server, offline = "server ≤60 ms, wait 2 ms ×1", "offline, wait 2 ms ×1"
    assert v[("int8_tbe", server, "min_qps_at_sla")].verdict == "pass"
    assert v[("fp32", server, "min_qps_at_sla")].verdict == "fail"  # 300 < 400
    assert v[("int8_tbe", server, "min_qps_ratio")].value == pytest.approx(1.5)
    assert v[("int8_tbe", offline, "min_qps_ratio")].verdict == "fail"  # Offline: samples/s, 0.84x of fp32
    assert v[("int8_tbe", server, "max_p99_ms")].verdict == "pass"
    assert ("int8_tbe", offline, "min_qps_at_sla") not in v and ("int8_tbe", offline, "max_p99_ms") not in v


def test_accuracy_rules_leave_serving_rows_alone(records):
    v = verdicts(records, gate(fp32={"max_auc_drop": 0.0}))
    assert {key[2] for key in v} == {"job"}
    assert "no server serving rule (min_qps_at_sla, min_qps_ratio, max_p99_ms)" in v[("fp32", "server ≤60 ms, wait 2 ms ×1", "job")].reason


def test_the_stored_gate_judges_serving_records(records):
    result = judge(records, settings({"rules": {"fp32": {"min_qps_at_sla": 1e9}}}))
    assert result.exit_code == 1 and [f.rule for f in result.failures] == ["min_qps_at_sla"]


def test_a_serving_sweep_s_gate_writes_its_verdict_without_a_history(records, tmp_path):
    from bench.gate import gate_sweep
    from bench.store import write_records

    write_records(records, tmp_path / "records.jsonl")
    code = gate_sweep(tmp_path, {"rules": {"int8_tbe": {"min_qps_ratio": 1.2}}}, {})
    assert code == 1  # int8_tbe's Offline samples/s are 0.84x fp32's
    assert "min_qps_ratio" in (tmp_path / "gate.md").read_text() and not (tmp_path / "history.jsonl").exists()


def test_the_evidence_the_queue_estimate_and_why_a_run_was_late_reach_serve_md(records, tmp_path):
    fp32 = records[0]
    m = {**fp32.metrics, "evidence": "VALID 1/1 at 300, INVALID 2/3 at 450", "queue_estimate": {"qps": 900.0},
         "threads_used": {"workers": 1, "torch_threads_per_worker": 1, "loadgen_issue_threads": 1, "cores": 2,
                          "share_a_core": False, "process_cpu_per_s": 0.4},
         "step_tells": "a step of 1,157 queries passes early stopping with up to 4 late"}
    m["steps"] = [*m["steps"][:2], {**m["steps"][2], "draw": 1, "late": {"over_bound": 70, "explanation": "70 over the bound: 70 queueing"}}]
    again = dataclasses.replace(fp32, metrics=m, record_id="judged")
    df = serve_table([again, *records[1:]])
    server = row(df, "fp32", "server")
    assert server.queue_ratio == pytest.approx(300 / 900) and server.offline_ratio == pytest.approx(300 / row(df, "fp32", "offline").samples_per_s)
    write_report([again, *records[1:]], tmp_path, title="serve fixture")
    text = (tmp_path / "serve.md").read_text()
    assert "| fp32 | 300 | [300, 450] | VALID 1/1 at 300, INVALID 2/3 at 450 |" in text
    assert "- **fp32: 300 QPS is 0.33x what a queue with its measured service times holds (900 QPS)**: at 450 QPS, 70 over the bound: 70 queueing" in text
    assert "| fp32 | 3 | 450 | 2 | INVALID |" in text and "| 70 over the bound: 70 queueing |" in text  # the run, and why it was late
    assert "Threads (Server): 1 worker(s) x 1 torch thread(s) + 1 LoadGen issue thread(s) on 2 cores: one core each at most." in text
    assert "What one Server run can tell: a step of 1,157 queries" in text


def with_machine(rec, load, gemm, gather, steal=0.0, cpus=2):
    machine = {"load_start": load[0], "load_end": load[1], "steal_share": steal, "cpus": cpus,
               "reference_start": {"gemm_wall_us": gemm[0], "gather_wall_us": gather[0]},
               "reference_end": {"gemm_wall_us": gemm[1], "gather_wall_us": gather[1]}}
    return dataclasses.replace(rec, metrics={**rec.metrics, "machine": machine})


def test_the_machine_section_gives_each_job_s_reference_kernels_and_flags_a_machine_that_moved(records, tmp_path):
    steady = [with_machine(r, (1.0, 1.2), (1200, 1210), (700, 705)) for r in records]
    write_report(steady, tmp_path / "steady", title="serve fixture")
    text = (tmp_path / "steady" / "serve.md").read_text()
    assert "## The machine during the jobs" in text and "| fp32 | server | 1.00 → 1.20 | 0.0% | 1,200 → 1,210 | 700 → 705 |" in text
    assert "speed moved" not in text and "A busy machine" not in text
    assert pd.read_csv(tmp_path / "steady" / "serve.csv")["ref_gemm_us_start"].tolist() == [1200] * 4

    moved = [*steady[:3], with_machine(records[3], (3.5, 2.5), (1250, 1260), (700, 950))]  # int8_tbe offline: slower memory, busy
    write_report(moved, tmp_path / "moved", title="serve fixture")
    text = (tmp_path / "moved" / "serve.md").read_text()
    assert "- **The machine's speed moved during the sweep**: the reference gather took 700 to 950 µs (36% apart)" in text
    assert "GEMM took" not in text  # 1200-1260: within 15%
    assert "- **A busy machine**: int8_tbe (offline) ran with more runnable work than cores" in text


def test_records_without_machine_figures_leave_the_section_out(records, tmp_path):
    write_report(records, tmp_path, title="serve fixture")
    assert "## The machine during the jobs" not in (tmp_path / "serve.md").read_text()


def test_the_steps_table_marks_a_run_set_aside_by_the_job_s_own_steal_threshold(records, tmp_path):
    fp32 = records[0]
    steps = [{**s, "machine": {"steal_share": 0.08}} for s in fp32.metrics["steps"]]
    for name, serve, marked in (("default", {}, True), ("loose", {"max_steal": 0.1}, False), ("off", {"max_steal": None}, False)):
        config = {**fp32.config, "serve": {**fp32.config["serve"], **serve}}
        rec = dataclasses.replace(fp32, metrics={**fp32.metrics, "steps": steps}, config=config)
        write_report([rec, *records[1:]], tmp_path / name, title="serve fixture")
        text = (tmp_path / name / "serve.md").read_text()
        assert ("| 8.0% (set aside) |" in text) is marked and "| 8.0%" in text


def paired(rec, ratio, low, high, ref_max=300.0, no_load=None, short=None):
    """int8_tbe's Server record as a paired job: an fp32 search run beside it found `ref_max`, then both tracked."""
    ref = {"max_qps": ref_max, "max_qps_lo": ref_max, "max_qps_hi": 330.0, "evidence": f"VALID 2/2 at {ref_max:g}, INVALID 2/3 at 330",
           "steps": []}
    p = {"qps_ratio": ratio, "qps_ratio_lo": low, "qps_ratio_hi": high, "reference_max_qps": ref_max, "reference": ref,
         "runs": [{"round": i // 2} for i in range(12)], "track_reference": "6 runs from 300: 3 VALID, 3 INVALID, 3 reversals, tracked 312",
         "track_candidate": None, "qps_ratio_bracket_lo": 450 / 330, "qps_ratio_bracket_hi": None, "joint_rounds": 4,
         "tracked_qps": None if no_load else 380.0, "reference_tracked_qps": 312.0, "no_load": no_load,
         "side_runs": {"candidate": 6, "reference": 6}, "reversals": {"reference": 3}, "not_enough_runs": short}
    return dataclasses.replace(rec, metrics={**rec.metrics, "paired": p, "qps_ratio": ratio})


def test_a_paired_server_job_reads_its_ratio_against_the_fp32_search_beside_it(records, tmp_path):
    records = [*records[:2], paired(records[2], 1.2, 1.05, 1.3), records[3]]
    df = serve_table(records)
    fp32, int8 = row(df, "fp32", "server"), row(df, "int8_tbe", "server")
    assert int8.ratio_method == "paired" and int8.qps_ratio == 1.2  # not 450 / fp32's own job's 300
    assert (int8.qps_ratio_lo, int8.qps_ratio_hi, int8.fp32_max_qps_paired, int8.paired_runs) == (1.05, 1.3, 300, 12)
    assert int8.fp32_bracket_paired == "[300, 330]" and int8.paired_track == "reference: 6 runs from 300: 3 VALID, 3 INVALID, 3 reversals, tracked 312"
    assert (int8.tracked_qps, int8.fp32_tracked_qps_paired, int8.paired_joint_rounds) == (380, 312, 4) and not isinstance(int8.paired_no_load, str)
    assert int8.qps_ratio_bracket_lo == pytest.approx(450 / 330) and int8.qps_ratio_bracket_hi != int8.qps_ratio_bracket_hi
    assert fp32.ratio_method == "reference" and fp32.qps_ratio == 1.0 and row(df, "int8_tbe", "offline").ratio_method != "paired"
    write_report(records, tmp_path, title="serve fixture")
    text = (tmp_path / "serve.md").read_text()
    assert "### Relative to fp32, paired" in text
    assert "| int8_tbe | 1.20x | [1.05, 1.30] | 450 [450, —] | 300 [300, 330] |" in text
    assert "max QPS 450 [450, —], 1.20x fp32's searched beside it [1.05, 1.30]" in "\n".join(__import__("bench.report.serve", fromlist=["x"]).console_lines(records))
    assert "| 380 / 312 | 4 | 6 / 6 | — / 3 |" in text  # each side's tracked level, the joint rounds, runs and reversals a side
    assert int8.paired_side_runs == "6 / 6" and int8.paired_reversals == "— / 3" and not isinstance(int8.ratio_evidence, str)


SHORT = ("not enough runs: 2 joint rounds after both first reversals, of 6 (serve.min_rounds); fp32 1 reversals, of 2 "
         "(serve.min_reversals) (the next round would take the candidate past 240 s (serve.max_search_s))")


def test_a_paired_job_short_of_its_evidence_says_not_enough_runs_instead_of_a_ratio(records, tmp_path):
    records = [*records[:2], paired(records[2], None, None, None, short=SHORT), records[3]]
    int8 = row(serve_table(records), "int8_tbe", "server")
    assert int8.qps_ratio != int8.qps_ratio and int8.ratio_evidence == SHORT  # NaN, and why
    write_report(records, tmp_path, title="serve fixture")
    text = (tmp_path / "serve.md").read_text()
    assert "| int8_tbe | not enough runs | — | 450 [450, —] | 300 [300, 330] |" in text
    assert f"- int8_tbe: {SHORT}" in text
    server_row = next(line for line in text.splitlines() if line.startswith("| int8_tbe | 450 |"))
    assert "| not enough runs |" in server_row  # the Server table's vs fp32 column, not the ratio to fp32's own job
    csv = pd.read_csv(tmp_path / "serve.csv")
    got = csv[(csv.backend == "int8_tbe") & (csv.scenario == "server")].iloc[0]
    assert got.ratio_evidence == SHORT and got.qps_ratio != got.qps_ratio
    lines = "\n".join(__import__("bench.report.serve", fromlist=["x"]).console_lines(records))
    assert f"int8_tbe server (p99 bound 60 ms): max QPS 450 [450, —]" in lines and f"vs fp32: {SHORT}" in lines
    v = verdicts(records, gate(int8_tbe={"min_qps_ratio": 0.9}))[("int8_tbe", "server ≤60 ms, wait 2 ms ×1", "min_qps_ratio")]
    assert v.verdict != "pass" and NOT_ENOUGH in v.reason


def test_a_paired_job_whose_level_was_still_walking_says_so_beside_its_ratio(records, tmp_path):
    walking = ("fp32's level ended 11 steps up in a row: its limit was still moving when tracking stopped (the host's speed "
               "changed during the job), so the ratio mixes the host's states (a level settled at its limit ends 6 or more "
               "steps one way 1 time in 32)")
    rec = paired(records[2], 2.02, 0.91, 4.5)
    rec.metrics["paired"]["still_walking"] = walking
    records = [*records[:2], rec, records[3]]
    assert row(serve_table(records), "int8_tbe", "server").still_walking == walking
    write_report(records, tmp_path, title="serve fixture")
    text = (tmp_path / "serve.md").read_text()
    assert f"- int8_tbe: {walking}" in text and "| int8_tbe | 2.02x | [0.91, 4.50] |" in text  # said beside the ratio, kept
    assert pd.read_csv(tmp_path / "serve.csv").query("scenario == 'server' and backend == 'int8_tbe'").iloc[0].still_walking == walking


def test_the_run_to_run_spread_each_interval_carries_is_said_under_the_paired_table_and_in_the_csv(records, tmp_path):
    learned = "serve.rerun_spread (3 degrees of freedom) and 6 re-runs of 6 jobs on this machine"
    rec = paired(records[2], 2.02, 1.1, 3.7)
    rec.metrics["paired"].update(rerun_spread=0.1842, rerun_spread_from=learned)
    old = paired(records[2], 2.1, 1.9, 2.3)  # a record from before the spread was learned: it says nothing
    assert not isinstance(row(serve_table([*records[:2], old, records[3]]), "int8_tbe", "server").rerun_spread_from, str)
    records = [*records[:2], rec, records[3]]
    write_report(records, tmp_path, title="serve fixture")
    text = (tmp_path / "serve.md").read_text()
    assert f"- the intervals carry a run-to-run spread of 0.184 (SD of the log ratio), from {learned}: int8_tbe" in text
    got = pd.read_csv(tmp_path / "serve.csv").query("scenario == 'server' and backend == 'int8_tbe'").iloc[0]
    assert got.rerun_spread == 0.1842 and got.rerun_spread_from == learned


def test_a_paired_side_that_met_no_load_has_no_ratio_and_the_table_says_why(records, tmp_path):
    records = [*records[:2], paired(records[2], None, 0.0, 0.2, no_load="the candidate met no load, down to 60.5 QPS"), records[3]]
    int8 = row(serve_table(records), "int8_tbe", "server")
    assert int8.ratio_method == "paired" and int8.qps_ratio != int8.qps_ratio  # NaN: not 0
    write_report(records, tmp_path, title="serve fixture")
    assert "| int8_tbe | — (the candidate met no load, down to 60.5 QPS) | [0.00, 0.20] |" in (tmp_path / "serve.md").read_text()


@pytest.mark.parametrize("threshold,verdict", [(1.0, "pass"), (1.1, "inconclusive"), (1.25, "fail")])
def test_min_qps_ratio_rules_on_the_paired_ratio_and_its_interval(records, threshold, verdict):
    records = [*records[:2], paired(records[2], 1.2, 1.05, 1.3), records[3]]
    v = verdicts(records, gate(int8_tbe={"min_qps_ratio": threshold}))[("int8_tbe", "server ≤60 ms, wait 2 ms ×1", "min_qps_ratio")]
    assert v.verdict == verdict and v.value == 1.2
    # an open upper end (the backend never INVALID): a threshold below the point and above the low end cannot pass
    open_end = [*records[:2], paired(records[2], 1.2, 1.05, None), records[3]]
    w = verdicts(open_end, gate(int8_tbe={"min_qps_ratio": 1.1}))[("int8_tbe", "server ≤60 ms, wait 2 ms ×1", "min_qps_ratio")]
    assert w.verdict == "inconclusive" and "∞" in w.reason


def test_what_a_paired_ratio_is_made_of_batch_times_and_the_load_each_side_carried():
    # fp32 serves a one-request batch in 8 ms and carries 100 QPS (busy 0.8); the backend in 2 ms carries 400 QPS
    # (busy 0.8): the ratio 4 is all batch time. An INVALID run does not count toward the busy share; a run without
    # the SUT's clock counts for neither.
    from bench.results.serving_table import made_of

    def step(qps, ms, valid=True, per_batch=1.0):
        late = {"service_ms": {"p50": ms}} if ms else {}
        return {"target_qps": qps, "validity": "VALID" if valid else "INVALID", "late": late, "batching": {"samples_per_batch": per_batch}}

    steps = {"candidate": [step(400, 2.0), step(420, 2.0, valid=False), step(380, None)],
             "reference": [step(100, 8.0), step(50, 8.0, per_batch=0.5), step(105, 8.2, valid=False)]}
    m = made_of(steps)
    assert m["service_ratio"] == pytest.approx(4.0) and m["busy_at_limit"] == pytest.approx(0.8)
    assert m["fp32_busy_at_limit_paired"] == pytest.approx(0.8)
    assert all(v != v for v in made_of({}).values())  # no tracking runs: nothing to say (NaN)
