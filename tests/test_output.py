"""What a person reads: periodic progress lines without a terminal, library noise kept off the console."""

from __future__ import annotations

import io
import logging
import warnings

from bench.console import LibraryNoiseFilter, quiet_library_noise
from bench.progress import PlainProgress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_a_long_step_reports_every_interval_and_at_the_end():
    clock, lines = Clock(), []
    with PlainProgress(488, "train", "batch", interval=30, clock=clock, emit=lines.append) as bar:
        for _ in range(488):
            clock.now += 0.46  # 3 min 44 s in all
            bar.update(1)
            bar.set_postfix(loss="0.4712")
    assert len(lines) == 225 // 30 + 1  # one every 30 s, then "done"
    assert lines[0].startswith("train: 66/488 batch (14%), 30 s, about 3 min 14 s left, loss=0.4712")
    assert lines[-1] == "train: done, 488 batch in 3 min 44 s, loss=0.4712"


def test_a_short_step_stays_quiet_and_interval_zero_reports_every_update():
    clock, lines = Clock(), []
    with PlainProgress(10, "eval", "sample", interval=30, clock=clock, emit=lines.append) as bar:
        bar.update(10)
    assert lines == []
    bar = PlainProgress(3, "sweep", "job", interval=0, clock=clock, emit=lines.append)
    for _ in range(3):
        clock.now += 61
        bar.update(1)
    bar.close()
    assert lines[-1] == "sweep: 3/3 job (100%), 3 min 3 s" and len(lines) == 3
    assert duration(7300) == "2 h 1 min"


def test_library_noise_and_warnings_stay_off_the_console(tmp_path):
    console, logfile = io.StringIO(), tmp_path / "job.log"
    root = logging.getLogger()
    handlers = [logging.StreamHandler(console), logging.FileHandler(logfile)]
    saved = root.handlers[:], root.level
    root.handlers[:] = handlers
    root.setLevel(logging.INFO)
    try:
        logging.captureWarnings(False)  # a fresh start: an earlier in-process run may have set it
        quiet_library_noise()
        logging.info("[TBE=1] Feature Gates: [('TBE_V2', False)]")  # FBGEMM logs on the root logger
        logging.getLogger("torchrec.inference.modules").info("per_table_weight_dtype={...26 tables...}")
        logging.getLogger("bench.pipeline.guard").info("resume: fp32 already measured")
        for _ in range(3):
            warnings.warn_explicit("test_output's quantize_per_channel is deprecated", DeprecationWarning, "lib.py", 78)
    finally:
        root.handlers[:], root.level = saved
        logging.captureWarnings(False)
        for h in handlers:
            h.close()
    shown = console.getvalue()
    assert "Feature Gates" not in shown and "per_table_weight_dtype" not in shown
    assert "resume: fp32 already measured" in shown and "is deprecated" not in shown  # warnings: the log file only
    kept = logfile.read_text()
    assert "Feature Gates" in kept and "per_table_weight_dtype" in kept and "is deprecated" in kept


def test_the_filter_keeps_errors_of_libraries():
    f = LibraryNoiseFilter()
    record = logging.LogRecord("torchrec", logging.ERROR, "x", 1, "it broke", None, None)
    assert f.filter(record) and not f.filter(record)  # once


def test_the_time_left_counts_the_jobs_own_time_and_names_once_per_machine_steps_apart():
    from bench.progress import OncePerMachine

    clock, lines = Clock(), []
    once = OncePerMachine(clock)
    bar = PlainProgress(42, "sweep", "job", interval=0, clock=clock, emit=lines.append, once=once)
    with once.step("calibration"):
        clock.now += 131
    with once.step("training"):
        clock.now += 196
    clock.now += 10  # the first job's own work
    bar.update(1)
    assert lines[-1] == ("sweep: 1/42 job (2%), 5 min 37 s (5 min 27 s of it once per machine: calibration 2 min 11 s, "
                         "training 3 min 16 s), about 6 min 50 s left")
    clock.now += 10
    bar.update(1)  # the steps are cached now: the rate is 10 s a job
    assert lines[-1].endswith("about 6 min 40 s left")


def test_steps_before_the_bar_started_and_cached_reads_stay_out_of_its_line():
    from bench.progress import OncePerMachine

    clock, lines = Clock(), []
    once = OncePerMachine(clock)
    with once.step("training"):  # before the sweep's bar: not this bar's time
        clock.now += 100
    bar = PlainProgress(4, "sweep", "job", interval=0, clock=clock, emit=lines.append, once=once)
    with once.step("kernel probe"):  # read from its cache
        clock.now += 0.01
    clock.now += 20
    bar.update(1)
    assert lines[-1] == "sweep: 1/4 job (25%), 20 s, about 1 min left"


def test_jobs_known_to_be_skipped_stay_out_of_the_time_left():
    clock, lines = Clock(), []
    # 6 jobs, the last 3 on a CUDA device this machine lacks
    bar = PlainProgress(6, "sweep", "job", interval=0, clock=clock, emit=lines.append, expected_skips=3)
    clock.now += 10
    bar.update(1)
    assert lines[-1].endswith("about 20 s left")  # 2 more that run, 10 s each; the 3 skipped take none
    clock.now += 10
    bar.update(1)
    clock.now += 10
    bar.update(1)
    clock.now += 0.1
    bar.update(1, skipped=True)
    assert lines[-1].endswith("about 0 s left")


def test_the_sweep_expects_its_cuda_jobs_skipped_on_a_machine_without_cuda():
    from bench.config.compose import compose_dictconfig
    from bench.sweep import count_jobs, jobs_without_device, job_status

    hydra = compose_dictconfig(["+sweep=quant"], with_hydra=True)
    no_gpu, gpu = (lambda name: name != "cuda"), (lambda name: True)
    assert jobs_without_device(hydra, no_gpu) == count_jobs(hydra) // 2  # device: cpu,cuda
    assert jobs_without_device(hydra, gpu) == 0
    import torch

    here = torch.cuda.is_available()  # by default, the device says whether it is here
    assert jobs_without_device(hydra) == (0 if here else count_jobs(hydra) // 2)
    only_cpu = compose_dictconfig(["+sweep=quant", "device=cpu"], with_hydra=True)
    assert jobs_without_device(only_cpu, no_gpu) == 0

    class Returned:
        return_value = "skipped"

    class Raised:
        @property
        def return_value(self):
            raise RuntimeError("the job's own exception")

    assert job_status(Returned()) == "skipped" and job_status(Raised()) is None


def test_the_time_left_starts_with_the_first_job_not_with_composing_the_sweep():
    from bench.progress import OncePerMachine

    clock, lines = Clock(), []
    once = OncePerMachine(clock)
    bar = PlainProgress(42, "sweep", "job", interval=0, clock=clock, emit=lines.append, once=once)
    clock.now += 6  # Hydra composes the 42 jobs before the first starts
    bar.begin()
    clock.now += 5  # the first job's own work
    bar.update(1)
    assert lines[-1] == "sweep: 1/42 job (2%), 5 s, about 3 min 25 s left"
    bar.begin()  # a later job's start moves nothing
    clock.now += 5
    bar.update(1)
    assert lines[-1] == "sweep: 2/42 job (5%), 10 s, about 3 min 20 s left"
