"""What the first run's cost is measured and estimated with: the wall seconds a CPU second takes right now (the estimate
before the wait), the sweep's closing line naming its once-per-machine steps, and the breakdown script's reading of a
sweep's output (benchmarks/scripts/first_run_breakdown.py)."""

from __future__ import annotations

import pytest

from bench.pipeline import calibrate
from bench.progress import OncePerMachine, PlainProgress, wall_per_cpu
from tests.conftest import REPO
from tests.support.load_file import load_file


class Shared:
    """A thread that gets `share` of a core: each read of its CPU clock follows 10 ms of its CPU time."""

    def __init__(self, share: float) -> None:
        self.share, self.wall_now, self.cpu_now = share, 0.0, 0.0

    def cpu(self) -> float:
        self.cpu_now += 0.01
        self.wall_now += 0.01 / self.share
        return self.cpu_now

    def wall(self) -> float:
        return self.wall_now


def test_wall_per_cpu_is_how_much_longer_a_cpu_second_takes_now():
    for share, factor in ((1 / 3, 3.0), (1.0, 1.0)):
        machine = Shared(share)
        assert wall_per_cpu(0.2, wall=machine.wall, cpu=machine.cpu) == pytest.approx(factor, rel=0.1)


def test_the_calibration_estimate_is_one_start_then_each_forked_process_build_and_rounds():
    plan = calibrate.Plan(processes=4, rounds=4, batch_sizes=(256, 4096), half_seconds=0.2)
    # two thread counts (1, 2) x two sizes x 4 rounds x 2 halves x 0.2 s = 6.4 s timed per process
    build = calibrate.BUILD_PER_STARTUP * 5.0
    assert calibrate.calibration_seconds(5.0, plan, all_threads=2) == pytest.approx(5.0 + 4 * (build + 6.4))
    assert calibrate.calibration_seconds(5.0, plan, all_threads=1) == pytest.approx(5.0 + 4 * (build + 3.2))
    assert calibrate.calibration_seconds(5.0, plan, all_threads=2, wall_per_cpu=2.5) == pytest.approx(2.5 * (5.0 + 4 * (build + 6.4)))


def test_a_long_sweep_says_at_its_end_which_once_per_machine_steps_it_ran():
    now = [0.0]
    once = OncePerMachine(clock=lambda: now[0])
    lines: list[str] = []
    bar = PlainProgress(2, "sweep", "job", interval=30, clock=lambda: now[0], emit=lines.append, once=once)
    with once.step("calibration"):
        now[0] += 50
    now[0] += 20
    bar.update(2)
    bar.close()
    assert lines[-1] == "sweep: done, 2 job in 1 min 10 s (50 s of it once per machine: calibration 50 s)"


def _script():
    return load_file("first_run_breakdown", REPO / "benchmarks" / "scripts" / "first_run_breakdown.py")


def test_the_breakdown_script_reads_the_steps_and_the_estimate_from_a_sweeps_lines():
    script = _script()
    assert script.seconds("2 min 5 s") == 125 and script.seconds("1 h 2 min") == 3720
    assert script.step_seconds("kernel probe 2 s") == ("kernel probe", 2.0)
    once = dict(script.step_seconds(p) for p in script._parts(script.ONCE.search(
        "sweep: done, 42 job in 3 min (1 min 40 s of it once per machine: calibration 1 min 1 s, training 30 s, roofline 5 s, "
        "kernel probe 4 s)").group(1)))
    assert once == {"calibration": 61.0, "training": 30.0, "roofline": 5.0, "kernel probe": 4.0}
    said = script.ESTIMATE.search("[bench.runner] first run on this machine: about 120 s more for calibration and training (cached after)")
    run = {"wall": 180.0, "job0": 8.0, "once": once, "last_job": 175.0, "estimate": (float(said.group(1)), said.group(2).split(" and "))}
    lines = script.report("cold", run)
    assert "  start-up to job 0: 8.0 s" in lines and "  jobs: 67 s" in lines[6]
    assert lines[-1] == "  estimate before the wait: 120 s for calibration and training; they took 91 s (estimate/actual 1.32x)"
