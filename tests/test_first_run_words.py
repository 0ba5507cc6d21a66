"""The first run's long steps say what they are before they start (issue 35): the timing calibration
(once per machine) and the model's training (once per model, then cached), each with a rough time."""

from __future__ import annotations

import logging

import pytest

from bench.models.train import MINUTES_FROM_SAMPLES, training_time_words
from bench.pipeline import calibrate
from tests.conftest import run_bench
from tests.support.models import FAST

TRAINING = "model: training it once, then cached ("


@pytest.mark.slow
def test_the_first_run_says_it_trains_and_the_next_run_does_not(tmp_path):
    args = ["backend=fp32", *FAST, f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}"]
    first = run_bench(*args, f"hydra.run.dir={tmp_path / 'one'}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    said = [line for line in (first.stdout + first.stderr).splitlines() if TRAINING in line]
    assert len(said) == 1 and "training samples in" in said[0] and "on 2 cores" in said[0], said
    assert "model: trained in " in first.stdout + first.stderr
    again = run_bench(*args, f"hydra.run.dir={tmp_path / 'two'}", cwd=tmp_path)
    assert again.returncode == 0 and TRAINING not in again.stdout + again.stderr  # cached: nothing to say


def test_the_calibration_says_it_runs_once_and_about_how_long_before_it_starts(tmp_path, monkeypatch, caplog):
    def stop(*args, **kwargs):
        raise RuntimeError("stopped before the first process")

    monkeypatch.setattr(calibrate, "_child_run", stop)
    with caplog.at_level(logging.INFO, logger="bench.pipeline.calibrate"), pytest.raises(RuntimeError):
        calibrate.calibration(tmp_path)
    line = next(r.getMessage() for r in caplog.records if r.name == "bench.pipeline.calibrate")
    assert line.startswith("timing: calibrating this machine's timing, once per machine (about a minute on an idle machine")


def test_the_rough_training_time_follows_the_samples():
    assert training_time_words(1_000_000) == "minutes on 2 cores"  # the default model's budget (TrainConfig.samples)
    assert training_time_words(16_384) == "seconds to a minute on 2 cores"  # +preset=tiny's
    assert training_time_words(MINUTES_FROM_SAMPLES - 1) != training_time_words(MINUTES_FROM_SAMPLES)
