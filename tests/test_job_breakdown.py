"""benchmarks/scripts/job_breakdown.py's readings: each job's seconds from a sweep's lines, and the comparison of two
runs' results.csv (the untimed figures and verdicts a cut of fixed costs must leave as they were)."""

import csv
from pathlib import Path

from tests.support.load_file import load_file

REPO = Path(__file__).resolve().parents[1]


def _script():
    return load_file("job_breakdown", REPO / "benchmarks" / "scripts" / "job_breakdown.py")


def test_each_jobs_seconds_run_from_its_launch_line_to_the_next_and_the_last_to_the_last_progress_line():
    lines = [
        "[2026-11-29 09:00:00,000][HYDRA] Launching 3 jobs locally",
        "[2026-11-29 09:00:01,000][HYDRA] \t#0 : device=cpu backend=fp32 batch_size=256 +sweep=quant cache_dir=/c",
        "[2026-11-29 09:00:03,500][bench.progress][INFO] - sweep: 1/3 job (33%), 3 s",
        "[2026-11-29 09:00:04,250][HYDRA] \t#1 : device=cpu backend=fp32 batch_size=1024 +sweep=quant cache_dir=/c",
        "[2026-11-29 09:00:06,000][HYDRA] \t#2 : device=cuda backend=fp32 batch_size=256 +sweep=quant cache_dir=/c",
        "[2026-11-29 09:00:06,125][bench.progress][INFO] - sweep: 3/3 job (100%), 6 s",
        "report: /tmp/r/report.md",
    ]
    jobs = _script().job_seconds(lines)
    assert [words for words, _ in jobs] == ["device=cpu backend=fp32 batch_size=256", "device=cpu backend=fp32 batch_size=1024",
                                            "device=cuda backend=fp32 batch_size=256"]
    assert [round(s, 3) for _, s in jobs] == [3.25, 1.75, 0.125]


def _results(path: Path, rows: list[dict]) -> str:
    columns = ["workload", "backend", "device", "batch_size", *sorted({k for r in rows for k in r} - {"workload", "backend", "device", "batch_size"})]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({"workload": "synthetic", "device": "cpu", **r})
    return str(path)


def test_two_runs_compare_equal_on_untimed_figures_and_a_gain_loss_flip_fails(tmp_path, capsys):
    script = _script()
    row = {"backend": "uint4", "batch_size": 256, "auc_delta": -0.0003, "budget_verdict": "within budget",
           "speed_verdict": "gain", "speedup": 1.5, "speedup_lo": 1.2, "speedup_hi": 1.8}
    a = _results(tmp_path / "a.csv", [row])
    assert script.compare(a, _results(tmp_path / "b.csv", [{**row, "speedup": 1.4}])) == 0  # a timed figure moved: fine
    assert "gain/loss flips: 0" in capsys.readouterr().out
    inconclusive = {**row, "speed_verdict": "inconclusive", "speedup_lo": 0.9}
    assert script.compare(a, _results(tmp_path / "c.csv", [inconclusive])) == 0  # a verdict near its edge: listed, no flip
    assert "speed verdict differs: synthetic uint4 cpu 256" in capsys.readouterr().out
    loss = {**row, "speed_verdict": "loss", "speedup": 0.8, "speedup_lo": 0.7, "speedup_hi": 0.9}
    assert script.compare(a, _results(tmp_path / "d.csv", [loss])) == 1
    assert "(a gain/loss flip)" in capsys.readouterr().out
    assert script.compare(a, _results(tmp_path / "e.csv", [{**row, "auc_delta": -0.0004}])) == 1  # an untimed figure moved
    assert "untimed differs: synthetic uint4 cpu 256: auc_delta -0.0003 -> -0.0004" in capsys.readouterr().out
