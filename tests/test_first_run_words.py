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


def test_a_cached_calibration_is_not_measured_again(tmp_path):
    assert calibrate.needs_calibration(tmp_path)
    path = calibrate.cache_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 0}')
    assert calibrate.needs_calibration(tmp_path)  # another version is measured again
    path.write_text(f'{{"version": {calibrate.VERSION}}}')
    assert not calibrate.needs_calibration(tmp_path)


def test_the_first_run_line_names_each_step_and_their_sum():
    from bench.runner import first_run_words

    assert first_run_words({"calibration": 45.6, "training": 60.2}) == (
        "first run on this machine: about 106 s more for calibration and training (cached after)")
    assert first_run_words({"training": 9.6}) == "first run on this machine: about 10 s more for training (cached after)"


def test_the_first_job_says_once_what_the_wait_is_for_and_a_cached_model_says_nothing(tmp_path, caplog):
    import torch

    from bench.config.compose import compose
    from bench.models.train import model_cache_key, needs_training
    from bench.hashing import plain
    from bench.routes import route_for
    from bench.runner import Session

    cfg = compose(["+preset=tiny", "model.train.samples=32768", "model.train.batch_size=512", f"cache_dir={tmp_path}"])
    session = Session()
    with caplog.at_level(logging.INFO, logger="bench.runner"):
        session.announce_first_run(cfg, torch.device("cpu"), route_for(cfg))
        session.announce_first_run(cfg, torch.device("cpu"), route_for(cfg))  # once per process
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("first run on this machine")]
    assert len(said) == 1 and said[0].endswith("s more for training (cached after)"), said  # +preset=tiny: timing.calibrate=false
    assert not list(tmp_path.glob("models/*"))  # the estimate trains a throwaway copy: nothing is cached

    workload = session.work.workload(cfg)
    assert needs_training(cfg.model, workload, cfg.seed, tmp_path)
    key = model_cache_key(plain(workload.cfg), plain(cfg.model), cfg.seed, workload.data_identity(), {})
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / f"{key}.pt").write_bytes(b"")
    assert not needs_training(cfg.model, workload, cfg.seed, tmp_path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bench.runner"):
        Session().announce_first_run(cfg, torch.device("cpu"), route_for(cfg))
    assert not [r for r in caplog.records if "first run" in r.getMessage()]
