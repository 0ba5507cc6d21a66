"""Baseline comparison and `python -m bench.report`: verdicts, outputs, exit codes."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.config import CompareConfig
from bench.store import read_records
from bench.report import compare_table, publish_report
from bench.report.baseline import summary
from bench.report.__main__ import main

FIXTURES = Path(__file__).parent / "fixtures" / "records"
SWEEP_A, SWEEP_B = FIXTURES / "sweep_a", FIXTURES / "sweep_b"
REPO = Path(__file__).resolve().parents[1]


def probed(records, scale: float = 1.0):
    """The records with the machine probes a run now takes at each job's start and end (bench.measure.noise.
    reference_speed's figures, µs), the machine `scale` times as slow as the reference."""
    reading = {f"{p}_{c}_us": base * scale for p, base in (("gemm", 1300.0), ("gather", 200.0)) for c in ("cpu", "wall")}
    for r in records:
        if r.status == "ok":
            r.metrics["machine"] = {"reference_start": dict(reading), "reference_end": dict(reading)}
    return records


def sweep(folder: Path, scale: float = 1.0):
    return probed(read_records(folder / "records.jsonl"), scale)


@pytest.fixture(scope="module")
def compared() -> pd.DataFrame:
    return compare_table(sweep(SWEEP_B), sweep(SWEEP_A))


def verdict(df, backend, batch_size, workload="synthetic", device="cpu") -> str:
    sel = df[(df.workload == workload) & (df.device == device) & (df.backend == backend) & (df.batch_size == batch_size)]
    assert len(sel) == 1
    return sel.iloc[0].verdict


def row(df, backend, batch_size, workload="synthetic"):
    return df[(df.workload == workload) & (df.backend == backend) & (df.batch_size == batch_size)].iloc[0]


# ------------------------------------------------------------------------------ compare


def test_compare_verdicts(compared):
    assert verdict(compared, "int8_tbe", 2048) == "samples/s lower"  # 212k -> 180k on a machine whose probes did not move
    assert verdict(compared, "int8_tbe", 256) == "same"
    assert verdict(compared, "uint4", 2048) == "same"  # ΔAUC -0.0016 [-0.0027, -0.0005]: reaches the tolerance
    assert verdict(compare_table(sweep(SWEEP_B), sweep(SWEEP_A), CompareConfig(auc_tolerance=0.0)), "uint4", 2048) == "auc lower"
    assert verdict(compared, "fake_quant", 256) == "missing"
    assert verdict(compared, "fp32", 8192) == "new"
    assert verdict(compared, "uint4", 8192) == "still error"
    assert verdict(compared, "fp32", 2048, device="cuda") == "still skipped"


def test_rows_from_another_machine_are_marked_not_compared(compared):
    rows = compared[compared.workload == "criteo_kaggle_sample"]
    assert set(rows.verdict) == {"machine differs"}
    assert not rows.comparable.any() and rows.throughput_ratio.isna().all()
    assert rows.notes.str.contains("c3a91f0e -> 5be2d771").all()


def test_normalized_throughput_interval_brackets_point(compared):
    r = row(compared, "int8_tbe", 2048)
    assert r.throughput_judged and r.throughput_ratio == pytest.approx(179375.5 / 212088.1)
    assert r.throughput_normalized_lo <= r.throughput_normalized <= r.throughput_normalized_hi < 0.95


def test_a_host_that_moved_leaves_samples_per_second_not_judged():
    """Issue 53: absolute throughput moved 0.61-1.13x between identical runs because the host did. The probes
    see the host move, and the row says so instead of calling the backend slower."""
    df = compare_table(sweep(SWEEP_B, scale=1.25), sweep(SWEEP_A))
    r = row(df, "int8_tbe", 2048)
    assert r.verdict == "same" and not r.throughput_judged
    assert "not judged: the machines' probes differ by +25%" in r.throughput_note
    unprobed = compare_table(read_records(SWEEP_B / "records.jsonl"), read_records(SWEEP_A / "records.jsonl"))
    assert verdict(unprobed, "int8_tbe", 2048) == "same"  # records from before the probes: shown, not judged
    assert "no machine probe recorded" in row(unprobed, "int8_tbe", 2048).throughput_note


def test_the_speedup_change_is_the_backends_speed_verdict():
    base = sweep(SWEEP_A)
    for r in base:
        if r.status == "ok" and r.backend != "fp32":
            r.metrics.update(speedup=1.22, speedup_lo=1.19, speedup_hi=1.25)
    new = copy.deepcopy(base)
    target = next(r for r in new if (r.backend, r.batch_size, r.workload) == ("fp32_tbe", 256, "synthetic"))
    target.metrics.update(speedup=1.22 / 1.2, speedup_lo=1.22 / 1.2 / 1.025, speedup_hi=1.22 / 1.2 * 1.025)
    df = compare_table(new, base)
    assert verdict(df, "fp32_tbe", 256) == "slower"
    r = row(df, "fp32_tbe", 256)
    assert r.speedup_change == pytest.approx(1 / 1.2) and r.speedup_change_hi < 0.95
    assert "the new and base speedup intervals cover one process's rounds (timing.calibrate=false)" in r.notes
    assert set(df[df.comparable].verdict) == {"same", "slower"} and (df.verdict == "slower").sum() == 1
    assert "1 flagged (1 slower)" in summary(df)


def test_auc_change_must_beat_the_noise_and_the_tolerance():
    base = sweep(SWEEP_A)
    new = copy.deepcopy(base)
    target = next(r for r in new if (r.backend, r.batch_size, r.workload) == ("int8_tbe", 256, "synthetic"))
    # noise: both runs' paired ΔAUC half-widths combined, hypot(0.00042, 0.00042) = 0.00059 here
    target.metrics["auc_delta"] += 0.0005  # inside the noise, whatever the tolerance
    assert verdict(compare_table(new, base), "int8_tbe", 256) == "same"
    assert verdict(compare_table(new, base, CompareConfig(auc_tolerance=0.0)), "int8_tbe", 256) == "same"
    target.metrics["auc_delta"] += 0.0007  # +0.0012: its interval clears the noise and the default tolerance 0.0005
    assert verdict(compare_table(new, base), "int8_tbe", 256) == "auc higher"
    assert verdict(compare_table(new, base, CompareConfig(auc_tolerance=0.001)), "int8_tbe", 256) == "same"
    r = row(compare_table(new, base), "int8_tbe", 256)
    assert r.auc_compared == "ΔAUC"
    assert r.auc_change == pytest.approx(0.0012) and r.auc_change_lo == pytest.approx(0.0012 - math.hypot(0.00042, 0.00042))


def test_config_change_is_noted_and_status_change_is_a_verdict():
    base = sweep(SWEEP_A)
    new = copy.deepcopy(base)
    new[0].config_hash = "000000000000"
    new[1].status, new[1].error, new[1].metrics = "error", "boom", {}
    df = compare_table(new, base)
    first = df[(df.backend == new[0].backend) & (df.batch_size == new[0].batch_size) & (df.workload == new[0].workload)]
    assert "config hash" in first.iloc[0].notes and first.iloc[0].verdict == "same"
    assert verdict(df, new[1].backend, new[1].batch_size) == "status changed"


# ---------------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_report_and_compare(tmp_path, capsys):
    for name, folder in (("new", SWEEP_B), ("base", SWEEP_A)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "records.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in sweep(folder)))
    assert main([str(tmp_path / "new"), "--baseline", str(tmp_path / "base"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "compare: 15 rows, 9 compared, 1 flagged (1 samples/s lower); not compared: 2 machine differs, 1 missing, 1 new" in out
    for name in ("report.md", "results.csv", "records.jsonl", "compare.md", "compare.csv"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "| synthetic | cpu | int8_tbe | 2048 | **samples/s lower** |" in md
    # rows not judged are never set in bold
    assert "| criteo_kaggle_sample | cpu | fp32 | 2048 | machine differs |" in md and "**machine differs**" not in md
    assert "fingerprint c3a91f0e -> 5be2d771): not compared" in md
    assert "| synthetic | cpu | fp32 | 8192 | new | absent -> ok |" in md
    assert "tolerances from `conf/compare/`" in md and "Machine probes (the reference GEMM and gather" in md
    assert "GEMM +0%, gather +0%: agree within 10%" in md


def test_a_compare_that_compares_nothing_exits_1_and_says_why(tmp_path, capsys):
    base = [r for r in read_records(SWEEP_A / "records.jsonl") if r.batch_size != 2048]
    new = [r for r in read_records(SWEEP_B / "records.jsonl") if r.batch_size == 2048]  # no key on both sides
    for name, records in (("base", base), ("new", new)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "records.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    assert main([str(tmp_path / "new"), "--baseline", str(tmp_path / "base"), "--out", str(tmp_path / "out")]) == 1
    out, err = capsys.readouterr()
    assert ", 0 compared, 0 flagged; not compared:" in out
    [line] = err.strip().splitlines()
    assert line.startswith("python -m bench.report: error: 0 of ") and "no workload, device, backend and batch size is on both sides" in line


@pytest.mark.slow
def test_cli_tolerance_flags_override_the_compare_config(tmp_path, capsys):
    args = [str(SWEEP_B), "--baseline", str(SWEEP_A), "--out", str(tmp_path)]
    assert main([*args, "--throughput-tolerance", "0.5", "--auc-tolerance", "0.0"]) == 0
    assert "compare: 15 rows, 9 compared, 2 flagged (2 auc lower); not compared: 2 machine differs, 1 missing, 1 new" in capsys.readouterr().out
    assert "1 ± 50%" in (tmp_path / "compare.md").read_text()
    loose = tmp_path / "loose.yaml"
    loose.write_text("throughput_tolerance: 0.5\nauc_tolerance: 0.01\nalpha: 0.05\n")
    assert main([*args, "--compare", str(loose)]) == 0
    assert "0 flagged; not compared: 2 machine differs, 1 missing, 1 new" in capsys.readouterr().out
    assert main([*args, "--compare", str(loose), "--auc-threshold", "0.0"]) == 0  # the old flag name still works
    assert "2 flagged (2 auc lower)" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_accepts_a_records_file_and_merges_dirs(tmp_path):
    assert main([str(SWEEP_A / "records.jsonl"), str(SWEEP_B), "--out", str(tmp_path)]) == 0
    assert len(read_records(tmp_path / "records.jsonl")) == 29


@pytest.mark.slow
def test_cli_renders_in_place_without_touching_the_records(tmp_path):
    sweep = tmp_path / "sweep"
    shutil.copytree(SWEEP_A, sweep)
    before = (sweep / "records.jsonl").read_bytes()
    assert main([str(sweep)]) == 0
    assert (sweep / "report.md").is_file() and (sweep / "records.jsonl").read_bytes() == before


@pytest.mark.slow
def test_cli_follows_latest(tmp_path):
    publish_report(read_records(SWEEP_A / "records.jsonl"), tmp_path, "quant")
    assert main([str(tmp_path / "quant"), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "report.md").is_file()


@pytest.mark.slow
def test_a_torn_last_line_is_named_and_the_rest_reported(tmp_path, capsys, caplog):
    lines = (SWEEP_A / "records.jsonl").read_text().splitlines()
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + "\n" + lines[0][:50])
    assert main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert len(read_records(tmp_path / "out" / "records.jsonl")) == len(lines)
    assert f"a torn last line at byte offset" in caplog.text


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    empty = tmp / "empty"
    empty.mkdir()
    (empty / "records.jsonl").write_text("\n")
    alien = tmp / "alien"
    alien.mkdir()
    (alien / "records.jsonl").write_text(json.dumps({"schema_version": 1, "hello": 1}) + "\n")
    nothing = tmp / "nothing"
    nothing.mkdir()
    old_tree = tmp / "reports" / "nightly"  # a report tree from before every sweep moved latest
    shutil.copytree(SWEEP_A, old_tree / "20250101-000000")
    os.symlink("20250101-000000", old_tree / "latest-_preset=tiny")
    return {
        "missing dir": ([str(tmp / "absent")], "no such file or directory"),
        "no records file": ([str(nothing)], "no records.jsonl"),
        "latest absent, variants beside": ([str(old_tree / "latest")], f"latest: no such file or directory; beside it: {old_tree / 'latest-_preset=tiny'}"),
        "no records": ([str(empty)], "holds no records"),
        "newer schema": ([str(FIXTURES / "newer_schema")], "holds no records this harness can read (1 record(s) of a newer schema (99)"),
        "not a record": ([str(alien)], "not a bench run record"),
        "missing baseline": ([str(SWEEP_A), "--baseline", str(tmp / "absent"), "--out", str(tmp / "o")], "absent"),
        "several dirs, no --out": ([str(SWEEP_A), str(SWEEP_B)], "give --out"),
        "bad alpha": ([str(SWEEP_A), "--baseline", str(SWEEP_A), "--out", str(tmp / "o"), "--alpha", "2"], "compare.alpha"),
        "unknown compare config": ([str(SWEEP_A), "--baseline", str(SWEEP_A), "--out", str(tmp / "o"), "--compare", "nope"], "no compare config"),
    }


@pytest.mark.parametrize(
    "case",
    ["missing dir", "no records file", "latest absent, variants beside", "no records", "newer schema", "not a record",
     "missing baseline", "several dirs, no --out", "bad alpha", "unknown compare config"],  # fmt: skip
)
def test_cli_bad_input_is_one_line_and_exit_2(case, tmp_path, capsys):
    argv, message = _bad_inputs(tmp_path)[case]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m bench.report: error: ") and message in err


@pytest.mark.slow
def test_cli_as_a_process(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    ok = subprocess.run([sys.executable, "-m", "bench.report", str(SWEEP_A), "--out", str(tmp_path)],
                        capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "bench.report", str(FIXTURES / "newer_schema")],
                         capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and "of a newer schema (99)" in bad.stderr and "upgrade bench" in bad.stderr


@pytest.mark.slow
def test_an_internal_failure_is_one_line_and_exit_3(tmp_path):
    (tmp_path / "out" / "report.md").mkdir(parents=True)  # the report cannot be written where a folder stands
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "bench.report", str(SWEEP_A), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 3 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("python -m bench.report: error: the harness failed: IsADirectoryError") and "(traceback: " in line
    assert Path(line.rsplit("(traceback: ", 1)[1].rstrip(")")).read_text().startswith("Traceback")
