"""The machine's re-run log: pooled between-run spread of identical jobs, its combination with the
calibration, and the runner's part (a paired job joins the log; a later run of it learns from it)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from bench.pipeline import calibrate, reruns
from bench.pipeline.reruns import MIN_DF, RECENT, Reruns, Spread, combined, entry, pooled_spread
from bench.measure.environment import code_state, kernel_path
from bench.runner import Session, run_job

SETTING = "1 thread, thread_cpu clock"
KERNELS = "fbgemm avx512_vnni, cpuinfo fix applied"


def planted(path, between: float, within: float, jobs: int, runs: int, batch_size: int = 256, seed: int = 0,
            setting: str = SETTING, kernels: str = KERNELS) -> None:
    """`jobs` jobs measured `runs` times each: a true log speedup per job, a run offset of sd `between`,
    and each run's own rounds' standard error `within` (its scatter around the run offset)."""
    rng = np.random.default_rng(seed)
    for j in range(jobs):
        truth = rng.normal(-0.3, 0.2)
        for _ in range(runs):
            value = truth + rng.normal(0, between) + rng.normal(0, within)
            reruns.append(path, entry(f"job{j}-{batch_size}", "abc", setting, kernels, batch_size, "int8_tbe", value, within, 4))


def test_the_pooled_spread_finds_the_between_run_part_beyond_the_rounds(tmp_path):
    path = tmp_path / "m-reruns.jsonl"
    planted(path, between=0.03, within=0.01, jobs=80, runs=4)
    found = Reruns(path).spread(SETTING, 256)
    assert found.df == 80 * 3 and found.jobs == 80
    assert found.sd == pytest.approx(0.03, rel=0.2)  # the rounds' own 1% is taken out, not counted twice


def test_no_repeat_no_estimate_and_other_settings_do_not_count(tmp_path):
    path = tmp_path / "m-reruns.jsonl"
    assert Reruns(path).spread(SETTING, 256) is None  # no log yet
    planted(path, 0.03, 0.01, jobs=5, runs=1)
    assert Reruns(path).spread(SETTING, 256) is None  # each job once: nothing to compare
    planted(path, 0.03, 0.01, jobs=5, runs=3, setting="2 threads, wall clock", seed=1)
    assert Reruns(path).spread(SETTING, 256) is None and Reruns(path).spread("2 threads, wall clock", 256).df == 10


def test_a_batch_size_with_enough_reruns_has_its_own_estimate(tmp_path):
    path = tmp_path / "m-reruns.jsonl"
    planted(path, between=0.01, within=0.005, jobs=MIN_DF, runs=2, batch_size=4096, seed=2)
    planted(path, between=0.08, within=0.005, jobs=3, runs=2, batch_size=256, seed=3)
    log = Reruns(path)
    assert log.spread(SETTING, 4096).df == MIN_DF  # its own jobs only
    assert log.spread(SETTING, 256).df == MIN_DF + 3  # too few of its own: every batch size pooled
    assert log.spread(SETTING, 4096).sd < log.spread(SETTING, 256).sd


def test_only_recent_reruns_of_a_job_count(tmp_path):
    path = tmp_path / "m-reruns.jsonl"
    for value in [0.5] * 20 + [0.0, 0.01] * (RECENT // 2):  # a changed machine: the old runs drop out
        reruns.append(path, entry("job", "abc", SETTING, KERNELS, 256, "int8_tbe", value, 0.0, 4))
    found = Reruns(path).spread(SETTING, 256)
    # every successive difference of the recent runs is 0.01: median |d| / (0.6745 sqrt 2)
    assert found.df == RECENT - 1 and found.sd == pytest.approx(0.01 / (0.6745 * math.sqrt(2)))


def test_other_kernel_paths_do_not_count(tmp_path):
    """Re-runs on FBGEMM's reference kernels (a blank ISA) are another population: a job on the JIT kernels
    learns nothing from them, and `timing show` (no kernel path given) still lists them."""
    path = tmp_path / "m-reruns.jsonl"
    planted(path, between=0.01, within=0.0, jobs=6, runs=3, seed=4)
    planted(path, between=0.3, within=0.0, jobs=6, runs=3, seed=5, kernels="fbgemm anyarch, cpuinfo fix disabled")
    mine = Reruns(path, KERNELS)
    assert mine.spread(SETTING, 256).df == 12 and mine.skipped == 18
    assert mine.spread(SETTING, 256).sd < 0.03
    assert Reruns(path).spread(SETTING, 256).df == 24


def test_one_outlying_rerun_does_not_widen_the_spread(tmp_path):
    """Ten jobs re-run steadily (1%), one of them once at 0.5x its speed: the robust spread barely moves,
    where the variance of the same lines would grow several times."""
    path = tmp_path / "m-reruns.jsonl"
    planted(path, between=0.01, within=0.0, jobs=10, runs=4, seed=6)
    steady = Reruns(path, KERNELS).spread(SETTING, 256).sd
    reruns.append(path, entry("job0-256", "abc", SETTING, KERNELS, 256, "int8_tbe", math.log(0.5), 0.0, 4))
    found = Reruns(path, KERNELS).spread(SETTING, 256)
    logs = [json.loads(x)["log_speedup"] for x in path.read_text().splitlines() if json.loads(x)["job"] == "job0-256"]
    assert found.sd < 1.5 * steady
    assert np.std(np.diff(logs), ddof=1) > 5 * steady  # what a plain variance would have taken in


def test_damaged_lines_and_other_versions_are_skipped(tmp_path):
    path = tmp_path / "m-reruns.jsonl"
    planted(path, 0.02, 0.0, jobs=3, runs=2)
    with open(path, "a") as f:
        f.write("not json\n" + json.dumps({**entry("job0-256", "abc", SETTING, KERNELS, 256, "x", 9.0, 0.0, 4), "version": 99}) + "\n")
        f.write(json.dumps({**entry("job0-256", "abc", SETTING, KERNELS, 256, "x", 1.0, 0.0, 4), "log_speedup": None}) + "\n")
    assert Reruns(path).spread(SETTING, 256).df == 3


def test_combined_weighs_by_degrees_of_freedom():
    assert combined(0.02, 4, None) == (0.02, "the timing calibration (4 degrees of freedom)")
    sd, words = combined(0.02, 4, Spread(0.05, 36, 18))
    assert sd == pytest.approx(math.sqrt((4 * 0.02**2 + 36 * 0.05**2) / 40))
    assert words == "the timing calibration (4 degrees of freedom) and 36 re-runs of 18 jobs on this machine"
    assert pooled_spread([]) == Spread(0.0, 0, 0)


def test_a_paired_server_ratio_weighs_serve_rerun_spread_with_the_machines_reruns_of_paired_server_jobs(tmp_path):
    path = tmp_path / "m-reruns.jsonl"
    assert reruns.serve_spread(path, KERNELS, 0.03, 1024) == (0.03, "serve.rerun_spread (3 degrees of freedom)")  # no log yet
    planted(path, between=0.01, within=0.005, jobs=20, runs=3)  # offline speedups: another setting, not counted
    planted(path, between=0.2, within=0.03, jobs=6, runs=2, batch_size=1024, setting=reruns.SERVED, kernels="fbgemm avx2")
    assert reruns.serve_spread(path, KERNELS, 0.03, 1024)[0] == 0.03  # another kernel path: not counted
    planted(path, between=0.2, within=0.03, jobs=6, runs=2, batch_size=1024, setting=reruns.SERVED, seed=4)
    sd, words = reruns.serve_spread(path, KERNELS, 0.03, 1024)
    learned = Reruns(path, KERNELS).spread(reruns.SERVED, 1024)
    assert learned.df == 6 and learned.sd > 0.1
    assert sd == pytest.approx(math.sqrt((3 * 0.03**2 + 6 * learned.sd**2) / 9)) and 0.1 < sd < learned.sd
    assert words == "serve.rerun_spread (3 degrees of freedom) and 6 re-runs of 6 jobs on this machine"


def planted_calibration(cache_dir, process_sd: float = 0.02, df: int = 4) -> None:
    """A calibration file as a real one reads, so a tiny job is timed on a calibrated setting."""
    rows = [calibrate.Measured(calibrate.Setting(1, "thread_cpu"), process_sd, 0.03, 0.025, 0.05, 0.03, df),
            calibrate.Measured(calibrate.Setting(1, "wall"), process_sd, 0.03, 0.025, 0.05, 0.03, df)]
    path = calibrate.cache_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": calibrate.VERSION, "processes": 3, "rounds": 4,
                                "measured": [dataclasses.asdict(m) for m in rows]}))


@pytest.mark.slow
def test_a_job_joins_the_log_and_its_later_runs_learn_from_it(tiny_cfg, tmp_path):
    """Three real runs of one paired job in fresh sessions: each appends a line; the third carries the
    spread of the first two, weighed with the calibration, and its record says so."""
    cfg = tiny_cfg("backend=int8_tbe", "timing.calibrate=true")
    planted_calibration(cfg.cache_dir)
    log_path = reruns.path_for(calibrate.cache_path(cfg.cache_dir))
    records = [run_job(cfg, Session())[0] for _ in range(3)]
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert len(lines) == 3 and {line["job"] for line in lines} == {records[0].config_hash}
    assert {line["source"] for line in lines} == {code_state()}
    assert {line["kernels"] for line in lines} == {kernel_path()} and lines[0]["kernels"].startswith("fbgemm ")
    assert lines[0]["setting"] == SETTING and lines[0]["log_speedup"] == pytest.approx(math.log(records[0].metrics["speedup"]))
    first, third = (r.metrics["timing_setting"] for r in (records[0], records[2]))
    assert first["process_sd"] == 0.02 and first["process_df"] == 4 and "re-runs" not in first["process_sd_from"]
    assert third["process_df"] == 5 and "1 re-runs of 1 jobs on this machine" in third["process_sd_from"]
    assert records[2].metrics["speedup_process_sd"] == pytest.approx(third["process_sd"])


def test_the_code_state_follows_the_code_not_the_commit(tmp_path, monkeypatch):
    """Two checkouts whose bench/ and conf/ agree are the same code; an edit to bench/ is other code, an
    edit elsewhere is not."""
    import shutil
    import subprocess

    from bench.measure import environment as env

    def state_of(repo):
        env.code_state.cache_clear()
        monkeypatch.setattr(env, "REPO", repo)
        return env.code_state()

    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / "conf").mkdir()
    (repo / "bench" / "x.py").write_text("A = 1\n")
    (repo / "conf" / "c.yaml").write_text("a: 1\n")
    (repo / "README.md").write_text("hello\n")
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    if shutil.which("git") is None:
        pytest.skip("no git")
    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x", "--allow-empty")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "code")
    first = state_of(repo)
    (repo / "README.md").write_text("edited\n")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "docs")
    assert state_of(repo) == first and first.startswith("code ")
    (repo / "bench" / "x.py").write_text("A = 2\n")  # uncommitted
    edited = state_of(repo)
    assert edited != first
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "code again")
    assert state_of(repo) == edited  # committing the same edit is the same code
    env.code_state.cache_clear()


def test_an_unpaired_or_uncalibrated_job_stays_out_of_the_log(tiny_cfg):
    cfg = tiny_cfg("backend=fp32", "timing.calibrate=true")
    planted_calibration(cfg.cache_dir)
    assert run_job(cfg, Session())[0].status == "ok"
    cfg = tiny_cfg("backend=int8_tbe")  # +preset=tiny: timing.calibrate=false
    assert run_job(cfg, Session())[0].status == "ok"
    assert not reruns.path_for(calibrate.cache_path(cfg.cache_dir)).exists()
