"""The fitted limits of a paired Server job (bench.serve.limit_fit): a logistic function of load with a host state
shared by a round's runs, fitted to both sides' verdicts; its jackknife and prediction interval."""

import math
import random

import pytest

from bench.serve.limit_fit import Fit, Run, fit_limits, jackknife, prediction_half_width
from tests.conftest import run_bench


def drawn(limits, width, host_sd, rounds, seed, spread=0.15):
    """Runs from the model itself: in each round both sides run at loads up to `spread` either side of their
    limits, under one host state of that round."""
    rng = random.Random(seed)
    runs = []
    for n in range(rounds):
        host = rng.gauss(0.0, host_sd)
        for side, limit in enumerate(limits):
            load = limit * math.exp(rng.uniform(-spread, spread))
            valid = rng.random() < 1 / (1 + math.exp(-(math.log(limit) + host - math.log(load)) / width))
            runs.append(Run(n, side, load, valid))
    return runs


def test_the_fit_finds_the_limits_the_verdicts_were_drawn_from():
    fits = [fit_limits(drawn((400.0, 100.0), 0.04, 0.05, 200, seed)) for seed in range(5)]
    for fit in fits:
        assert fit.limits[0] == pytest.approx(400, rel=0.03) and fit.limits[1] == pytest.approx(100, rel=0.03)
        assert fit.ratio == pytest.approx(4.0, rel=0.03) and fit.runs == 400
        assert 0.02 < fit.width < 0.08 and fit.host_sd < 0.12


def test_separated_verdicts_put_each_limit_in_its_gap():
    # Every run up to 100 (candidate) and 200 (fp32) VALID, every run past 104 and 208 INVALID: the limits land
    # between, and the ratio is 0.5 within the gap's width.
    runs = [Run(n, side, load * scale, load <= 1.0) for n, load in enumerate([0.9, 0.96, 1.0, 1.04, 1.0, 1.04, 0.96, 1.0])
            for side, scale in enumerate((100.0, 200.0))]
    fit = fit_limits(runs)
    assert 100 <= fit.limits[0] <= 104 and 200 <= fit.limits[1] <= 208 and fit.ratio == pytest.approx(0.5, rel=0.01)


def test_no_fit_without_both_verdicts_on_each_side():
    assert fit_limits([Run(0, 0, 100, True), Run(0, 1, 200, True), Run(1, 1, 210, False)]) is None
    assert fit_limits([Run(0, 0, 100, True), Run(1, 0, 110, False), Run(0, 1, 200, False)]) is None
    assert fit_limits([]) is None


def test_a_round_that_fails_both_sides_is_read_as_the_host():
    # Both sides at their limits' 0.9 every round, VALID, except three rounds in which both fail together: a slow
    # host, not a lower limit of either side. Their ratio stays where the VALID runs put it, and the host's spread
    # takes the failures (tau grows), where one side failing alone in those rounds moves that side's limit down.
    def runs(both):
        out = []
        for n in range(12):
            slow = n in (3, 7, 10)
            out += [Run(n, 0, 90.0 * (1.1 if n % 2 else 1.0), not slow), Run(n, 1, 180.0 * (1.1 if n % 2 else 1.0), not (slow and both))]
            out += [Run(n, 1, 180.0 * 1.2, False), Run(n, 0, 90.0 * 1.2, False)]
        return out
    together, alone = fit_limits(runs(True)), fit_limits(runs(False))
    assert together.ratio == pytest.approx(0.5, rel=0.05)
    assert alone.ratio < together.ratio and together.host_sd > alone.host_sd


def test_the_jackknife_and_the_interval_widen_with_the_spread_of_the_estimates():
    assert jackknife([1, 2, 3], lambda b: {1: 0.0, 2: 0.0, 3: 0.0}[b]) == (0.0, 3)
    variance, count = jackknife([1, 2, 3, 4], lambda b: {1: 0.1, 2: -0.1, 3: 0.1, 4: -0.1}[b])
    assert count == 4 and variance == pytest.approx(3 / 4 * 4 * 0.01)
    assert jackknife([1, 2], lambda b: None if b == 2 else 0.0) == (math.inf, 1)
    floor = prediction_half_width(0.0, 5, 0.0, 0.04, 0.95)
    assert floor == pytest.approx(math.log(1.04))  # a staircase resolves a level to a step
    assert prediction_half_width(0.001, 5, 0.03, 0.04, 0.95) < prediction_half_width(0.004, 5, 0.03, 0.04, 0.95)
    assert prediction_half_width(0.001, 3, 0.03, 0.04, 0.95) > prediction_half_width(0.001, 12, 0.03, 0.04, 0.95)
    assert prediction_half_width(math.inf, 1, 0.03, 0.04, 0.95) == math.inf


def test_a_fit_is_a_frozen_record():
    fit = Fit((400.0, 100.0), 0.05, 0.02, 10)
    assert fit.ratio == 4.0
    with pytest.raises(AttributeError):
        fit.width = 1.0


def test_a_bad_ratio_fit_is_one_line_and_exit_2(tmp_path):
    result = run_bench("+sweep=serve", "backend=fp32", "serve.ratio_fit=median", f"reports_dir={tmp_path / 'r'}",
                       f"cache_dir={tmp_path / 'c'}", timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr[-2000:]
    assert "serve.ratio_fit='median': choose logistic" in result.stderr and not (tmp_path / "r").exists()
