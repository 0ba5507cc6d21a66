"""The per-machine timing calibration: the split between processes and rounds, the pick, the cache,
and how a job's timing setting is resolved from it (planted figures; one real, tiny calibration)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from bench.backends.backend import Backend
from bench.pipeline import calibrate
from bench.pipeline.calibrate import Calibration, Measured, Plan, Setting, split, timing_setting
from bench.config.quick import TINY_OVERRIDES

PLAN = Plan(processes=6, rounds=40, batch_sizes=(256, 4096))
SETTINGS = [Setting(2, "wall"), Setting(1, "wall"), Setting(1, "thread_cpu")]


def planted_runs(between: dict[str, float], within: dict[str, float], seed: int = 0) -> list[dict]:
    """Runs as the child processes report them: per setting and batch size, log ratios whose process
    offsets have sd `between[setting]` and whose rounds scatter by `within[setting]`."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(PLAN.processes):
        run = {}
        for s in SETTINGS:
            name = s.text()
            run[name] = {str(bs): {kind: list(rng.normal(rng.normal(0.2, between[name]), within[name], PLAN.rounds))
                                   for kind in ("log_ratio", "log_throughput")} for bs in PLAN.batch_sizes}
        runs.append(run)
    return runs


def test_split_finds_the_between_process_spread_and_the_pick_minimizes_a_reruns_spread():
    between = {"2 threads, wall clock": 0.08, "1 thread, wall clock": 0.03, "1 thread, thread_cpu clock": 0.01}
    within = {"2 threads, wall clock": 0.2, "1 thread, wall clock": 0.1, "1 thread, thread_cpu clock": 0.02}
    measured = {m.setting.text(): m for m in split(planted_runs(between, within), SETTINGS, PLAN)}
    for name, m in measured.items():
        assert m.round_sd == pytest.approx(within[name], rel=0.2)
        assert m.process_sd < 3 * between[name] + 0.01 and m.rerun_sd >= m.process_sd
    cal = Calibration(tuple(measured.values()), "x.json", PLAN.processes, PLAN.rounds)
    assert cal.best().setting == Setting(1, "thread_cpu")
    assert cal.best(clock="wall").setting == Setting(1, "wall")
    assert cal.best(threads=2).setting == Setting(2, "wall") and cal.best(threads=3) is None


def test_the_preferred_setting_stays_unless_another_is_clearly_steadier():
    """Two calibrations of one machine should pick alike: a setting later in the order of preference wins
    only by more than CLEARLY_STEADIER, whatever order the settings were measured in."""
    def cal(two_threads_rerun: float) -> Calibration:
        rows = [Measured(s, 0.02, 0.03, rerun, 0.0, 0.0, 4) for s, rerun in
                ((Setting(1, "thread_cpu"), 0.030), (Setting(1, "wall"), 0.029), (Setting(2, "wall"), two_threads_rerun))]
        return Calibration(tuple(rows), "x.json", 3, 4)

    assert calibrate.candidates(2) == [Setting(1, "thread_cpu"), Setting(1, "wall"), Setting(2, "wall")]
    assert cal(0.028).best().setting == Setting(1, "thread_cpu")  # 7% steadier: not clearly
    assert cal(0.020).best().setting == Setting(2, "wall")  # a third steadier: clearly
    assert cal(0.020).best(threads=1).setting == Setting(1, "thread_cpu")


def fake_calibration(process_sd: float = 0.02) -> Calibration:
    rows = [Measured(Setting(2, "wall"), 0.08, 0.2, 0.09, 0.3, 0.2), Measured(Setting(1, "wall"), 0.03, 0.1, 0.04, 0.1, 0.1),
            Measured(Setting(1, "thread_cpu"), process_sd, 0.02, process_sd + 0.001, 0.05, 0.03)]
    return Calibration(tuple(rows), "/cache/timing/m.json", 4, 12)


class Plain(Backend):
    pass


class WaitsOnServer(Backend):
    waits_off_cpu = "a server round trip"


def resolve(tiny_cfg, *overrides, device="cpu", backend=Plain, calibrated=None, why_not=""):
    cfg = tiny_cfg(*overrides)
    return timing_setting(cfg, torch.device(device), backend(cfg.backend), calibrated, why_not)


def test_nothing_given_takes_the_calibrations_pick_and_its_spread(tiny_cfg):
    cfg, setting = resolve(tiny_cfg, calibrated=fake_calibration())
    assert (cfg.timing.threads, cfg.timing.clock) == (1, "thread_cpu")
    assert setting["how"] == "picked by measurement on this machine" and setting["process_sd"] == 0.02
    assert setting["calibration"]["path"] == "/cache/timing/m.json" and "1 thread, thread_cpu clock" in setting["calibration"]["settings"]


def test_given_parts_stay_and_the_rest_is_picked_among_them(tiny_cfg):
    cfg, setting = resolve(tiny_cfg, "timing.clock=wall", calibrated=fake_calibration())
    assert (cfg.timing.threads, cfg.timing.clock) == (1, "wall") and "among settings with timing.clock=wall" in setting["how"]
    cfg, setting = resolve(tiny_cfg, "threads=2", calibrated=fake_calibration())
    assert (cfg.timing.threads, cfg.timing.clock) == (2, "wall") and setting["process_sd"] == 0.08
    cfg, setting = resolve(tiny_cfg, "timing.threads=1", "timing.clock=thread_cpu", calibrated=fake_calibration())
    assert setting["how"].startswith("given: ") and setting["process_sd"] == 0.02


def test_a_setting_the_calibration_never_timed_covers_one_process_and_says_so(tiny_cfg):
    cfg, setting = resolve(tiny_cfg, "threads=3", calibrated=fake_calibration())
    assert (cfg.timing.threads, cfg.timing.clock) == (3, "wall") and setting["process_sd"] is None
    assert "3 threads, wall clock was not calibrated here" in setting["how"] and "one process's rounds" in setting["how"]


def test_without_a_calibration_the_default_setting_and_the_reason(tiny_cfg):
    cfg, setting = resolve(tiny_cfg, why_not="timing.calibrate=false")
    assert cfg.timing.clock == "wall" and cfg.timing.threads == torch.get_num_threads() and setting["process_sd"] is None
    assert setting["how"] == "default (timing.calibrate=false: the interval covers one process's rounds)"
    cfg, setting = resolve(tiny_cfg, device="cuda", calibrated=fake_calibration())
    assert cfg.timing.clock == "wall" and "CUDA" in setting["how"]


def test_a_backend_that_waits_off_the_cpu_is_timed_on_the_wall_clock(tiny_cfg):
    cfg, setting = resolve(tiny_cfg, backend=WaitsOnServer, calibrated=fake_calibration())
    assert (cfg.timing.threads, cfg.timing.clock) == (1, "wall") and setting["process_sd"] == 0.03


def test_the_cache_is_read_back_and_an_old_version_is_measured_again(tmp_path, monkeypatch):
    path = calibrate.cache_path(tmp_path)
    path.parent.mkdir(parents=True)
    measured = [dataclasses.asdict(m) for m in fake_calibration().measured]
    path.write_text(json.dumps({"version": calibrate.VERSION, "processes": 4, "rounds": 12, "measured": measured}))
    assert calibrate.calibration(tmp_path).best().setting == Setting(1, "thread_cpu")  # read, nothing started
    path.write_text(json.dumps({"version": calibrate.VERSION - 1, "measured": []}))
    started = []
    monkeypatch.setattr(calibrate, "_child_run", lambda *a, **k: started.append(a) or pytest.fail("measures anew"))
    with pytest.raises(pytest.fail.Exception):
        calibrate.calibration(tmp_path)
    assert started


@pytest.mark.slow
def test_a_real_calibration_in_fresh_processes(tmp_path):
    """Two real processes time a tiny probe pair under every setting; the cache holds what they found."""
    tiny = Plan(processes=2, rounds=4, batch_sizes=(128,), half_seconds=0.0,
                overrides=tuple(TINY_OVERRIDES))
    cal = calibrate.calibration(tmp_path, tiny)
    names = {m.setting for m in cal.measured}
    assert Setting(1, "thread_cpu") in names and Setting(1, "wall") in names
    assert all(math.isfinite(m.process_sd) and m.process_sd >= 0 and m.round_sd >= 0 for m in cal.measured)
    assert all(m.df == 1 for m in cal.measured)  # two processes, one probe size
    data = json.loads(calibrate.cache_path(tmp_path).read_text())
    assert data["processes"] == 2 and len(data["runs"]) == 2 and cal.best() is not None
    assert calibrate.calibration(tmp_path, tiny).measured == cal.measured  # read back, not measured again
