"""Report views over fixture records: results table, report.md, CSV, plots, publishing."""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from bench.record import SCHEMA_VERSION, RunRecord
from bench.store import read_records
from bench.report import fmt, publish_report, write_report
from bench.results.table import COLUMNS, results_table
from bench.results.readable import unreadable

FIXTURES = Path(__file__).parent / "fixtures" / "records"
REQUIRED = ["workload", "device", "backend", "batch_size", "status", "auc", "auc_delta", "auc_delta_lo",
            "auc_delta_hi", "throughput", "speedup", "speedup_lo", "speedup_hi", "latency_p50_ms",
            "latency_p99_ms", "embedding_bytes", "model_bytes", "compression", "peak_rss_bytes", "error",
            "oracle_auc", "fidelity_gap", "config_hash", "fingerprint"]  # fmt: skip


@pytest.fixture(scope="module")
def sweep_a() -> list[RunRecord]:
    return read_records(FIXTURES / "sweep_a" / "records.jsonl")


@pytest.fixture(scope="module")
def table(sweep_a) -> pd.DataFrame:
    return results_table(sweep_a)


@pytest.fixture(scope="module")
def report_dir(sweep_a, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    write_report(sweep_a, out, title="Fixture sweep A")
    return out


def row(df: pd.DataFrame, workload="synthetic", device="cpu", backend="fp32", batch_size=2048) -> pd.Series:
    sel = df[(df.workload == workload) & (df.device == device) & (df.backend == backend) & (df.batch_size == batch_size)]
    assert len(sel) == 1
    return sel.iloc[0]


# --------------------------------------------------------------------------------- table


def test_results_table_columns_and_one_row_per_key(table, sweep_a):
    assert list(table.columns) == COLUMNS
    assert set(REQUIRED) <= set(table.columns)
    keys = table[["workload", "device", "backend", "batch_size"]].apply(tuple, axis=1)
    assert keys.is_unique
    assert len(table) == len(sweep_a) - 1  # one older duplicate in the fixture


def test_newest_record_wins(table, sweep_a):
    dups = [r for r in sweep_a if (r.backend, r.batch_size, r.workload) == ("int8_tbe", 2048, "synthetic")]
    newest = max(dups, key=lambda r: r.created_at)
    assert len(dups) == 2 and newest is not dups[0]
    assert row(table, backend="int8_tbe").throughput == newest.metrics["throughput"]


def test_equal_times_keep_the_later_record(sweep_a):
    a = copy.deepcopy(sweep_a[0])
    b = copy.deepcopy(a)
    b.metrics["throughput"] = 1.0
    assert row(results_table([a, b]), batch_size=a.batch_size).throughput == 1.0


def test_fp32_rows_first_in_each_group(table):
    for _, g in table.groupby(["workload", "device"]):
        backends = list(g.backend)
        assert backends[: backends.count("fp32")] == ["fp32"] * backends.count("fp32")


def test_speedup_and_compression_against_fp32(table):
    fp32, int8 = row(table), row(table, backend="int8_tbe")
    assert fp32.speedup == 1.0 and fp32.compression == 1.0
    assert int8.speedup == pytest.approx(int8.throughput / fp32.throughput)
    assert int8.speedup_lo <= int8.speedup <= int8.speedup_hi
    assert int8.compression == pytest.approx(64_000_000 / 20_000_000)
    assert row(table, backend="uint4").compression == pytest.approx(64 / 12)


def test_error_and_skipped_rows_keep_their_reason(table):
    err = row(table, backend="uint4", batch_size=8192)
    assert err.status == "error" and "not enough memory" in err.error
    assert math.isnan(err.throughput) and math.isnan(err.speedup) and math.isnan(err.auc)
    skip = row(table, device="cuda")
    assert skip.status == "skipped" and "no CUDA device" in skip.error


def test_results_table_accepts_dicts_and_empty_input(sweep_a):
    from_dicts = results_table([r.to_dict() for r in sweep_a])
    pd.testing.assert_frame_equal(from_dicts, results_table(sweep_a))
    empty = results_table([])
    assert empty.empty and list(empty.columns) == COLUMNS


def test_no_fp32_row_means_no_speedup(sweep_a):
    df = results_table([r for r in sweep_a if r.backend != "fp32"])
    r = row(df, backend="int8_tbe")
    assert math.isnan(r.speedup) and math.isnan(r.compression)


def test_missing_trials_give_point_speedup_without_interval(sweep_a):
    records = copy.deepcopy(sweep_a)
    for r in records:
        r.metrics.pop("throughput_trials", None)
    r = row(results_table(records), backend="int8_tbe")
    assert r.speedup > 1 and math.isnan(r.speedup_lo) and math.isnan(r.speedup_hi)


# ------------------------------------------------------------------------------ report.md


@pytest.mark.slow
def test_report_files(report_dir, table, sweep_a):
    csv = pd.read_csv(report_dir / "results.csv")
    assert list(csv.columns) == COLUMNS and len(csv) == len(table)
    assert [r.to_dict() for r in read_records(report_dir / "records.jsonl")] == [r.to_dict() for r in sweep_a]
    pngs = sorted(p.name for p in report_dir.glob("*.png"))
    assert pngs == [
        "frontier_criteo_kaggle_sample_cpu.png",
        "frontier_synthetic_cpu.png",
        "throughput_criteo_kaggle_sample_cpu.png",
        "throughput_synthetic_cpu.png",
    ]
    for p in report_dir.glob("*.png"):
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    umask = os.umask(0)
    os.umask(umask)
    assert (report_dir / "report.md").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_report_md_contents(report_dir):
    md = (report_dir / "report.md").read_text()
    assert md.startswith("# Fixture sweep A\n")
    assert "## synthetic on cpu" in md and "## criteo_kaggle_sample on cpu" in md
    # deltas and ratios formatted for reading
    assert "−0.0002 [−0.0006, +0.0002]" in md
    assert "−0.0019 [−0.0027, −0.0011]" in md
    assert "1.79× [" in md
    # sentences in words
    # read against the one budget (compare.max_auc_drop, 0.001); the fixture's records carry no gate rules, so the
    # gate's margin is compare's 0.0005, and differing from the budget, its reading (by the same rule) follows
    assert ("**int8_tbe** (batch sizes 256, 2048): ΔAUC −0.0002 [−0.0006, +0.0002]: within the 0.001 budget (its whole "
            "interval lies at or above −0.001); inconclusive against int8_tbe's 0.0005 gate rule; it cannot be told from zero") in md
    assert ("**uint4** (batch sizes 256, 2048): ΔAUC −0.0019 [−0.0027, −0.0011]: outside the 0.001 budget (its whole interval "
            "lies below −0.001); over uint4's 0.0005 gate rule; it differs from zero") in md
    # oracle AUC only for the synthetic workload
    assert md.count("Oracle AUC") == 1 and "0.7712" in md
    assert "AUC over 200,000 eval samples, each scored once." in md
    # errors and skips with reasons
    errors = md.split("## Errors and skips")[1].split("## Environment")[0]
    assert "uint4 / batch 8192: **error**: RuntimeError: [enforce fail" in errors
    assert "Traceback" not in errors  # first line only
    assert "**skipped**: no CUDA device" in errors
    # environment block
    env = md.split("## Environment")[1]
    assert "torch 2.13.0+cpu" in env and "fingerprint c3a91f0e" in env and "fbgemm_gpu 1.8.0" in env
    # what a sample is; the fp32_tbe split, with numbers where the three rows exist
    assert "A **sample** is one row: one user-item pair" in md
    assert "fp32_tbe / fp32 (batching)" in md and "int8_tbe / fp32_tbe (quantization)" in md
    assert "![throughput_synthetic_cpu](throughput_synthetic_cpu.png)" in md


def test_report_md_fp32_row_first_in_each_table(report_dir):
    md = (report_dir / "report.md").read_text()
    checked = 0
    for section in md.split("\n## ")[1:]:
        lines = section.splitlines()
        if "| backend | batch |" in section:
            header = next(i for i, line in enumerate(lines) if line.startswith("| backend | batch |"))
            assert lines[header + 2].startswith("| fp32 |"), lines[0]
            checked += 1
    assert checked == 3  # synthetic/cpu, synthetic/cuda (skipped fp32), criteo_kaggle_sample/cpu


@pytest.mark.slow
def test_speedup_that_cannot_be_told_from_one_gets_a_sentence(sweep_a, tmp_path):
    records = copy.deepcopy(sweep_a)
    fp32 = next(r for r in records if (r.backend, r.batch_size, r.device) == ("fp32", 256, "cpu"))
    fq = next(r for r in records if (r.backend, r.batch_size) == ("fake_quant", 256))
    fq.metrics["throughput_trials"] = [t * 1.001 for t in fp32.metrics["throughput_trials"]][::-1]
    fq.metrics["throughput"] = fp32.metrics["throughput"] * 1.001
    md = write_report(records, tmp_path).read_text()
    assert "**fake_quant** (batch 256): speedup 1.00× [" in md and "cannot be told from no change" in md


@pytest.mark.slow
def test_no_problems_and_single_machine(sweep_a, tmp_path):
    ok = [r for r in sweep_a if r.status == "ok" and r.workload == "synthetic"]
    md = write_report(ok, tmp_path).read_text()
    assert "None: every run finished." in md
    assert "different machine fingerprints" not in md


@pytest.mark.slow
def test_two_fingerprints_are_called_out(sweep_a, tmp_path):
    records = copy.deepcopy(sweep_a)
    records[0].env = dict(records[0].env, fingerprint="ffff0000", threads=4)
    md = write_report(records, tmp_path).read_text()
    assert "**2 different machine fingerprints**" in md


def test_formatting_helpers():
    assert fmt.delta_ci(0.0012, -0.0003, 0.0027) == "+0.0012 [−0.0003, +0.0027]"
    assert fmt.ratio_ci(1.8412, 1.8, 1.88) == "1.84× [1.80, 1.88]"
    assert fmt.delta_ci(float("nan"), 0, 0) == fmt.DASH and fmt.ratio_ci(2.0, None, None) == "2.00×"
    assert fmt.megabytes(64_000_000) == "64.0" and fmt.megabytes(104e9) == "104,000"
    assert fmt.markdown_table(["a", "b"], [["x|y", 1]], "lr") == "| a | b |\n| --- | ---: |\n| x\\|y | 1 |"


# ------------------------------------------------------------------------------ publish


@pytest.mark.slow
def test_publish_report_timestamps_and_latest_link(sweep_a, tmp_path):
    first = publish_report(sweep_a, tmp_path, "quant")
    second = publish_report(sweep_a[:5], tmp_path, "quant")
    assert first != second and first.parent == second.parent == tmp_path / "quant"
    latest = tmp_path / "quant" / "latest"
    assert latest.is_symlink() and os.readlink(latest) == second.name  # relative: the tree can move
    assert (latest / "report.md").is_file()
    assert len(read_records(latest / "records.jsonl")) == 5
    assert sorted(p.name for p in (tmp_path / "quant").iterdir()) == sorted([first.name, second.name, "latest"])
    with pytest.raises(ValueError):
        publish_report(sweep_a, tmp_path, "../elsewhere")


def test_records_written_are_valid_json_lines(report_dir):
    for line in (report_dir / "records.jsonl").read_text().splitlines():
        assert json.loads(line)["schema_version"] == SCHEMA_VERSION  # v1 fixtures are written back migrated


def _tput_record(trials, backend="int8_tbe"):
    return {
        "schema_version": 2, "status": "ok", "workload": "synthetic", "backend": backend, "device": "cpu",
        "batch_size": 1024, "config": {}, "config_hash": "h", "env": {"fingerprint": "m"}, "record_id": "r",
        "metrics": {"auc": 0.8, "auc_delta": 0.0, "auc_delta_lo": 0.0, "auc_delta_hi": 0.0,
                    "throughput": sorted(trials)[len(trials) // 2], "throughput_trials": trials},
    }  # fmt: skip


def test_small_steady_throughput_change_is_within_the_tolerance():
    from bench.config import CompareConfig
    from bench.report.baseline import compare_table

    def probed(record):  # the machine probes a job takes at its start and end: the same machine on both sides
        reading = {"gemm_cpu_us": 1300.0, "gather_cpu_us": 200.0, "gemm_wall_us": 1300.0, "gather_wall_us": 200.0}
        record["metrics"]["machine"] = {"reference_start": reading, "reference_end": reading}
        return [record]

    base = probed(_tput_record([100.0, 100.5, 99.5, 100.2, 99.8]))
    new = probed(_tput_record([97.0, 97.4, 96.6, 97.2, 96.8]))  # 3% slower, tight trials
    assert compare_table(new, base).verdict.tolist() == ["same"]
    assert compare_table(new, base, CompareConfig(throughput_tolerance=0.0)).verdict.tolist() == ["samples/s lower"]
    slower = probed(_tput_record([80.0, 80.5, 79.5, 80.2, 79.8]))
    assert compare_table(slower, base).verdict.tolist() == ["samples/s lower"]
    unprobed = [_tput_record([80.0, 80.5, 79.5, 80.2, 79.8])]
    assert compare_table(unprobed, base).verdict.tolist() == ["same"]  # no probe on the new side: shown, not judged


def test_a_slower_backend_on_agreeing_probes_is_flagged_on_its_speedup_and_its_samples_per_second():
    """What tests/test_compare_runs.py's planted slowdown reads when both runs' probes agree: both verdicts, one row."""
    from bench.report.baseline import compare_table, summary

    def probed(trials, speedup):
        record = _tput_record(trials)
        reading = {"gemm_cpu_us": 1300.0, "gather_cpu_us": 200.0, "gemm_wall_us": 1300.0, "gather_wall_us": 200.0}
        record["metrics"].update(machine={"reference_start": reading, "reference_end": reading},
                                 speedup=speedup, speedup_lo=speedup * 0.97, speedup_hi=speedup * 1.03)
        return [record]

    df = compare_table(probed([66.0, 66.5, 65.5, 66.2, 65.8], 1.2), probed([100.0, 100.5, 99.5, 100.2, 99.8], 1.8))
    assert df.verdict.tolist() == ["slower, samples/s lower"]
    assert summary(df) == "1 rows, 1 compared, 1 flagged (1 slower, 1 samples/s lower)"


# ------------------------------------------------------------- paired timing, noise, verdicts (issue 11)


def _paired(sweep_a, backend="int8_tbe", **metrics):
    rec = copy.deepcopy(next(r for r in sweep_a if r.backend == backend and r.batch_size == 2048))
    rec.created_at = "2999-01-01T00:00:00+00:00"  # newest: wins its key
    rec.metrics.update(metrics)
    return rec


def test_a_paired_speedup_in_the_record_is_the_row_s_speedup(sweep_a):
    rec = _paired(sweep_a, speedup=1.7, speedup_lo=1.6, speedup_hi=1.8, stable=True, speedup_rounds=[1.7] * 12, speedup_stop="target")
    r = row(results_table([*sweep_a, rec]), backend="int8_tbe")
    assert (r.speedup, r.speedup_lo, r.speedup_hi, r.speedup_method) == (1.7, 1.6, 1.8, "paired")
    assert (r.speedup_rounds, r.speedup_stop) == (12, "target")
    assert r.speed_verdict == "gain" and bool(r.stable) is True
    unpaired = row(results_table(sweep_a), backend="int8_tbe")
    assert unpaired.speedup_method == "unpaired"


@pytest.mark.slow
def test_a_speedup_is_judged_on_its_own_interval_whatever_the_throughput_flag_says(sweep_a, tmp_path):
    """Trials that swung 42% flag the absolute samples/s; a paired interval of [1.50, 1.60] still decides the speedup."""
    rec = _paired(sweep_a, speedup=1.55, speedup_lo=1.50, speedup_hi=1.60, stable=False,
                  unstable_reason="throughput varied 42% between trials (limit 10%)", noise={"trial_cv": 0.42})
    df = results_table([*sweep_a, rec])
    r = row(df, backend="int8_tbe")
    assert r.speed_verdict == "gain" and r.trial_cv == 0.42 and bool(r.stable) is False
    md = Path(write_report([*sweep_a, rec], tmp_path)).read_text()
    assert "⚠ **int8_tbe** (batch 2048): the absolute samples/s is not a finding: throughput varied 42%" in md
    assert "the paired speedup is judged on its own interval" in md and "⚠ unstable" not in md
    from bench.config import GateConfig, RuleSet
    from bench.gate import evaluate_gate

    def speed_verdict(df, threshold):
        verdicts = evaluate_gate(df, GateConfig(rules={"int8_tbe": RuleSet(min_speedup=threshold)})).verdicts
        return next(v for v in verdicts if (v.workload, v.backend, v.batch_size, v.rule) == (rec.workload, "int8_tbe", 2048, "min_speedup"))

    assert speed_verdict(df, 1.1).verdict == "pass"  # the whole interval is above 1.1
    assert speed_verdict(df, 100.0).verdict == "fail" and "whole interval" in speed_verdict(df, 100.0).reason


def test_an_undecided_speedup_reads_inconclusive_in_words_and_in_the_gate(sweep_a, tmp_path):
    rec = _paired(sweep_a, speedup=1.08, speedup_lo=0.96, speedup_hi=1.21, stable=True)
    df = results_table([*sweep_a, rec])
    assert row(df, backend="int8_tbe").speed_verdict == "inconclusive"
    md = Path(write_report([*sweep_a, rec], tmp_path)).read_text()
    assert "speedup 1.08× [0.96, 1.21]: inconclusive: [0.96, 1.21] straddles the ±5% margin." in md
    from bench.config import GateConfig, RuleSet
    from bench.gate import evaluate_gate

    def speed(threshold, **gate):
        verdicts = evaluate_gate(df, GateConfig(rules={"int8_tbe": RuleSet(min_speedup=threshold)}, **gate)).verdicts
        return next(v for v in verdicts if (v.workload, v.backend, v.batch_size, v.rule) == (rec.workload, "int8_tbe", 2048, "min_speedup"))

    assert speed(1.0).verdict == "inconclusive" and "undecided" in speed(1.0).reason  # point above, interval straddles
    assert speed(1.1).verdict == "inconclusive"  # point below 1.1, but the interval reaches past it: not a failure either
    assert speed(0.9).verdict == "pass" and speed(1.3).verdict == "fail"
    assert speed(1.1, inconclusive_fails=True).verdict == "fail"


def test_unreadable_intervals_are_named_by_the_bound():
    assert unreadable(1.2, 0.0, 3.3e8) and unreadable(42179, 32, 31_837_527)  # the figures issue 35 saw
    assert unreadable(1.0, 0.3, 1.8)  # hi/lo past 5x, though each bound is within 5x of the point
    assert unreadable(2.0, 1.9, 10.5) and unreadable(2.0, 0.39, 2.1)  # a bound over 5x its point, either side
    assert not unreadable(1.84, 1.80, 1.88) and not unreadable(1.0, 0.5, 2.4)
    assert not unreadable(2.0, None, None) and not unreadable(float("nan"), 1, 2)  # no interval: nothing to judge
    assert fmt.ratio_ci(0.19, 0.0, 3.3e8, calls=48) == "too short to judge (48 calls)"
    assert fmt.ratio_ci(0.19, 0.0, 3.3e8) == "too short to judge"


def test_a_speedup_interval_too_wide_to_read_says_so_in_the_csv_the_report_and_the_cli(sweep_a, tmp_path):
    from bench.report.summary import summary

    rec = _paired(sweep_a, speedup=0.19, speedup_lo=0.0, speedup_hi=330511609.22, throughput_lo=32.0, throughput_hi=31_837_527.0,
                  latency_calls=48, speedup_method="paired: 3 ABBA rounds")
    r = row(results_table([*sweep_a, rec]), backend="int8_tbe")
    assert r.speed_verdict == "too short to judge (48 calls)"
    write_report([*sweep_a, rec], tmp_path)
    csv = pd.read_csv(tmp_path / "results.csv")
    mine = (csv.workload == rec.workload) & (csv.device == rec.device) & (csv.backend == "int8_tbe") & (csv.batch_size == 2048)
    assert csv[mine].speed_verdict.item() == "too short to judge (48 calls)"
    md = (tmp_path / "report.md").read_text()
    assert "| too short to judge (48 calls) | too short to judge (48 calls) |" in md  # the speedup cell and its verdict
    assert "**int8_tbe** (batch 2048): speedup too short to judge (48 calls): its interval spans more than 5x." in md
    assert "330511609" not in md and "[0.00," not in md
    text = summary(rec)
    assert "speedup vs fp32 too short to judge (48 calls) (paired: 3 ABBA rounds; its interval spans more than 5x)" in text
    assert "samples/s, too short to judge (48 calls);" in text and "31,837,527" not in text


@pytest.mark.slow
def test_auc_verdicts_are_practical_and_never_print_zero(sweep_a, tmp_path):
    rec = _paired(sweep_a, backend="int8_tbe", auc_delta=-6e-7, auc_delta_lo=-8e-7, auc_delta_hi=-4e-7, auc_delta_p=0.0004)
    rec.config.setdefault("gate", {}).setdefault("rules", {})["int8_tbe"] = {"max_auc_drop": 0.001}
    r = row(results_table([*sweep_a, rec]), backend="int8_tbe")
    assert r.auc_verdict == "equivalent" and r.auc_margin == 0.001
    md = Path(write_report([*sweep_a, rec], tmp_path)).read_text()
    line = next(x for x in md.splitlines() if x.startswith("- **int8_tbe**") and "e−07" in x)
    assert "0.0000" not in line and "e−07" in line and "within the 0.001 budget" in line
    assert "a loss" not in line and "gate rule" not in line  # the gate's margin is the budget: one reading


@pytest.mark.slow
def test_int2s_verdict_names_the_budget_and_its_gate_rule_apart(sweep_a, tmp_path):
    """A ΔAUC within a loose gate rule (int2_tbe's 0.008) but past the reader's budget reads as over budget, with the
    gate rule's reading (the same rule, `budget_verdict`, at the rule's margin) beside it; a looser budget reads it within."""
    rec = _paired(sweep_a, backend="int8_tbe", auc_delta=-0.0042, auc_delta_lo=-0.0047, auc_delta_hi=-0.0037, auc_delta_p=0.0001)
    rec.backend, rec.config = "int2_tbe", {**rec.config, "backend": {"name": "int2_tbe"}}
    rec.config.setdefault("gate", {}).setdefault("rules", {})["int2_tbe"] = {"max_auc_drop": 0.008}
    r = row(results_table([*sweep_a, rec]), backend="int2_tbe")
    assert (r.auc_verdict, r.budget_verdict, r.auc_budget) == ("equivalent", "over budget", 0.001)
    md = Path(write_report([*sweep_a, rec], tmp_path)).read_text()
    assert "| over budget (gate rule 0.008: within budget) |" in md
    assert ("**int2_tbe** (batch 2048): ΔAUC −0.0042 [−0.0047, −0.0037]: outside the 0.001 budget (its whole interval lies "
            "below −0.001); within int2_tbe's 0.008 gate rule;") in md
    assert row(results_table([*sweep_a, rec], budget=0.01), backend="int2_tbe").budget_verdict == "within budget"


def test_p99_says_how_many_calls_make_its_tail():
    from types import SimpleNamespace

    from bench.report.markdown import TAIL_CALLS, p99_cell

    def row(calls, tail):
        return SimpleNamespace(latency_p99_ms=78.4, latency_p99_lo_ms=2.1, latency_p99_hi_ms=80.2,
                               latency_calls=calls, latency_p99_calls=tail)

    assert p99_cell(row(300, 3)) == "78.40 [2.10, 80.20] (slowest 3 of 300 calls)"  # a few preemptions, named as such
    assert p99_cell(row(3000, 30)) == "78.40 [2.10, 80.20]"
    assert TAIL_CALLS == 10
    assert p99_cell(SimpleNamespace(latency_p99_ms=float("nan"))) == fmt.DASH


def test_samples_per_s_and_a_paired_speedup_pointing_opposite_ways_get_one_line(sweep_a, tmp_path):
    """Issue 35: int8_tbe at 21,393 samples/s against fp32's 9,976 with a speedup of 0.19x, and no word on why.
    The report now says the cause (too few rounds, different timing modes) or flags the row."""
    rec = _paired(sweep_a)  # made the newest int8_tbe record of its key, with its own samples/s
    workload = rec.workload
    ratio = rec.metrics["throughput"] / row(results_table(sweep_a), workload, backend="fp32").throughput
    assert abs(ratio - 1) > 0.1  # the fixture's samples/s point one way
    against = 0.5 if ratio > 1 else 2.0
    said = f"**int8_tbe** (batch 2048): its samples/s are {ratio:.2f}x fp32's but its paired speedup is {against:.2f}x"

    def paired(rounds: int):
        return _paired(sweep_a, speedup=against, speedup_lo=against * 0.95, speedup_hi=against * 1.05, speedup_rounds=[against] * rounds)

    few, many = paired(2), paired(12)
    assert row(results_table([*sweep_a, few]), workload, backend="int8_tbe").speed_disagreement == "only 2 paired rounds (fewer than 4)"
    text = (write_report([*sweep_a, few], tmp_path / "few")).read_text()
    assert f"- {said}: only 2 paired rounds (fewer than 4). The samples/s come from two jobs timed apart" in text
    assert row(results_table([*sweep_a, many]), workload, backend="int8_tbe").speed_disagreement == "unexplained"
    text = (write_report([*sweep_a, many], tmp_path / "many")).read_text()
    assert f"- ⚠ {said}, with no known cause (same timing mode, 12 paired rounds)" in text
    agree = _paired(sweep_a, speedup=ratio, speedup_lo=ratio * 0.95, speedup_hi=ratio * 1.05, speedup_rounds=[ratio] * 2)
    assert pd.isna(row(results_table([*sweep_a, agree]), workload, backend="int8_tbe").speed_disagreement)
    assert "its samples/s are" not in (write_report([*sweep_a, agree], tmp_path / "agree")).read_text()


@pytest.mark.slow
def test_a_paired_speedup_and_an_unpaired_ratio_of_one_pair_are_labelled_apart(sweep_a, tmp_path):
    """The batching-vs-quantization table takes the main table's paired speedups; where the unpaired ratio of
    the two jobs' trials differs from one, both are printed, labelled with how each was made."""
    from bench.results.table import trials
    from bench.stats import ratio_interval

    fp32 = next(r for r in sweep_a if (r.workload, r.backend, r.batch_size) == ("synthetic", "fp32", 2048) and r.status == "ok")
    tbe = _paired(sweep_a, backend="fp32_tbe")
    unpaired, _, _ = ratio_interval(trials(tbe), trials(fp32))
    paired = round(unpaired * 0.7, 2)  # 30% apart: past the 5% speed margin
    tbe.metrics.update(speedup=paired, speedup_lo=paired - 0.04, speedup_hi=paired + 0.04, speedup_rounds=[paired] * 12)
    int8 = _paired(sweep_a, backend="int8_tbe", speedup=1.5, speedup_lo=1.45, speedup_hi=1.55, speedup_rounds=[1.5] * 12)
    md = Path(write_report([*sweep_a, tbe, int8], tmp_path)).read_text()
    cell = f"{paired:.2f}× [{paired - 0.04:.2f}, {paired + 0.04:.2f}]"
    split = md.split("Table batching vs quantization")[1].split("\n\n")[1]
    assert f"| 2048 | {cell} | {1.5 / paired:.2f}× | 1.50× [1.45, 1.55] |" in split  # the main table's paired figures
    assert f"| {cell} |" in md.split("Table batching vs quantization")[0]  # the same cell in the main table
    [note] = [x for x in md.splitlines() if x.startswith("- Made another way: fp32_tbe / fp32 at batch 2048")]
    assert f"the paired speedup is {cell}" in note and f"the unpaired ratio of the two jobs' median samples/s is {unpaired:.2f}×" in note
    assert "read the paired one" in note
    assert not any(x.startswith("- Made another way: int8_tbe") and "batch 2048" in x for x in md.splitlines()) or \
        abs(ratio_interval(trials(int8), trials(fp32))[0] / 1.5 - 1) > 0.05  # a note only where the two differ


def test_one_thread_is_singular_in_the_summary(sweep_a):
    from bench.report.summary import summary

    rec = _paired(sweep_a, backend="int8_tbe", threads=1, timing_setting={"threads": 1, "clock": "wall", "how": "default"})
    text = summary(rec)
    assert "1 threads" not in text and "thread(s)" not in text and "timed with 1 thread on the wall clock" in text


def test_the_parameter_server_table_finds_each_rows_in_memory_twin_at_its_own_point():
    from bench.report.paramserver import ps_section
    from bench.results.table import latest_records

    def rec(backend, batch, throughput, twin=None):
        m = {"throughput": throughput, "throughput_trials": [throughput * f for f in (0.99, 1.0, 1.01)]}
        if twin:
            m.update(ps_twin=twin, ps_cache_fraction=0.1, ps_precision="fp32")
        return RunRecord(status="ok", workload="synthetic", backend=backend, device="cpu", batch_size=batch, metrics=m, config={}, env={},
                         config_hash=f"{backend}{batch}", record_id=f"{backend}-{batch}")

    records = [rec("fp32", 256, 1000.0), rec("fp32", 1024, 3000.0), rec("ps_redis", 256, 500.0, "fp32"), rec("ps_redis", 1024, 600.0, "fp32")]
    lines = ps_section(latest_records(records), "synthetic", "cpu")
    rows = [line for line in "\n".join(lines).splitlines() if line.startswith("| ps_redis |")]
    assert [r.split(" | ")[1] for r in rows] == ["256", "1024"]  # by batch size
    assert "0.50×" in rows[0] and "0.20×" in rows[1]  # each against fp32 at its own batch size
