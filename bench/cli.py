"""`python -m bench`: compose the config, run one job (or a sweep of them), write records.

Names are checked before Hydra composes anything, so an unknown backend or a bad batch size is
one line and exit code 2, with no traceback. Inside a sweep, a failing job becomes a record with
status `error` and the sweep goes on; a single run exits 2 for bad input and 1 for other errors,
after writing its record.

A record is written whole or not at all: a Ctrl-C stops the run before its record is saved (exit
130), and re-running the same command with `resume=true` measures only the jobs that have no ok
or skipped record yet. A resumed job's record goes to its job folder but not again to
`records.jsonl`, which keeps one line per measurement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench import preflight
from bench.config import CONF_DIR, Config, config_groups, group_options
from bench.config.compose import compose, to_config
from bench.config.job_folder import job_folder
from bench.config import register_configs
from bench.console import quiet_library_noise
from bench.errors import EXIT_GATE_FAILED, EXIT_HARNESS_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USER_ERROR, UserError, internal_error
from bench.metrics import MEASURE_AGAIN
from bench.record import RunRecord, measured_again_after
from bench.store import RECORDS, save_record

POSITIVE_INT_KEYS = ("batch_size", "eval_batch_size", "calibration_batch_size", "threads", "world_size")
log = logging.getLogger("bench")


def check_overrides(args: list[str]) -> None:
    """Reject unknown group options and non-positive sizes with a one-line UserError."""
    try:
        overrides = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])
    except HydraException:
        return  # a syntax error: Hydra's own message names it
    for override in overrides:
        key = override.key_or_group.split("@")[0]
        if isinstance(override.value(), Glob):  # glob(fp*): Hydra expands it against the group's options
            values = override.value().filter(group_options(key)) if key in config_groups() else []
            if key in config_groups() and not values:
                raise UserError(f"{override.input_line} matches no {key}: choose from {', '.join(group_options(key))}")
        elif override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        if key in config_groups() and not override.is_delete():
            known = group_options(key)
            for value in values:
                if value not in known:
                    close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
                    hint = f"did you mean {override.input_line.split('=')[0]}={close[0]}? " if close else ""
                    raise UserError(f"unknown {key} {value!r}: {hint}choose one of {', '.join(known)} ({key}=NAME)")
        if key in POSITIVE_INT_KEYS:
            for value in values:
                if not (value.isdigit() and int(value) > 0) and not (key == "threads" and value == "null"):
                    raise UserError(f"{key} must be a positive integer, got {value!r} ({key}=N)")


_errored: list[str] = []  # the jobs of a multirun without a sweep config (`-m ...`) that errored in this process


@functools.cache
def shared_session():
    """What the jobs of this process share (a sweep runs them here one after another): built once."""
    from bench.runner import Session

    return Session()


def task(cfg: DictConfig) -> str:
    """One job, as Hydra calls it. Exceptions do not reach Hydra, which would print a traceback and
    exit 1 for any of them: bad input exits 2, a failure of the harness itself 3, each one line."""
    try:
        return _task(cfg)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except Exception as exc:  # noqa: BLE001 - the harness failed outside the job's own error handling
        print(f"error: the harness failed: {internal_error(exc, _run_dir())}", file=sys.stderr)
        sys.exit(EXIT_HARNESS_ERROR)


def _run_dir() -> Path | None:
    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except Exception:  # noqa: BLE001 - no Hydra run: the traceback goes to a temporary file
        return None


def _task(cfg: DictConfig) -> str:
    config = to_config(cfg)
    quiet_library_noise()
    if config.tune is not None:  # +sweep=tune: one tune, not a job (bench.tune)
        from bench.tune import main as tune_main

        code = tune_main(config, shared_session().work)
        if code:
            sys.exit(code)
        return "ok"
    hydra_cfg = HydraConfig.get()
    record = measure_and_store(config, Path(hydra_cfg.runtime.output_dir))
    from bench.distributed import writes_records

    if not writes_records():  # a rank other than 0 of a multi-process job: rank 0 wrote the record
        if record.status == "error":
            sys.exit(EXIT_GATE_FAILED)
        return record.status
    from bench.report.summary import summary  # pandas: imported after the pre-flight checks

    if hydra_cfg.mode == RunMode.MULTIRUN:
        log.info(summary(record).splitlines()[0])
        if record.status == "error":
            _errored.append(f"{record.backend} {record.device} bs={record.batch_size}")
        return record.status
    print(summary(record))
    if record.resumed_from:
        print(f"resumed: the stored record {record.resumed_from} of this job on this machine (resume=true); nothing was measured")
    stored = "already in" if record.resumed_from else "also appended to"
    print(f"record: {Path(hydra_cfg.runtime.output_dir) / 'record.json'} ({stored} {Path(config.reports_dir) / RECORDS})")
    if record.status == "error":
        print(f"error: {record.error}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR if record.user_error else EXIT_GATE_FAILED)
    return record.status


def measure_and_store(config: Config, output_dir: Path, again_after: RunRecord | None = None) -> RunRecord:
    """Measure one job (or, with resume, hand back its stored record) under this host's job lock, and store its
    record in the store and in `output_dir` (rank 0 of a multi-process job stores it, the other ranks do not).
    `again_after`: the record of the same job whose answer the host withheld, named in the new one."""
    from bench.distributed import one_job_per_host, writes_records
    from bench.runner import run_job  # torch and the plug-ins: imported after the pre-flight checks

    session = shared_session()
    # resume's claim on the job is held until its record is stored: a concurrent identical sweep
    # waits for it, then finds the record instead of measuring the job again
    with session.claims:
        with one_job_per_host(config) as window:
            record, _ = run_job(config, session)
        if record.status == "ok" and not record.resumed_from:
            record.metrics["job_window"] = window.span()
        if again_after is not None:
            measured_again_after(record, again_after.record_id)
        if writes_records():
            save_record(record, output_dir, Path(config.reports_dir), store=record.resumed_from is None)
    return record


def measure_again(sweep_dir: Path, passes: int) -> None:
    """Once a sweep's jobs are done, measure again each job whose answer the host withheld (a paired Server job
    whose rounds were set aside as slow or stolen, so no ratio: bench.record.withheld), up to `passes` times
    (`measure_again`). The host has had the rest of the sweep to leave its slow phase. Each measurement is the job's
    own config (composed from `<job>/.hydra/overrides.yaml`) without resume, its record stored beside the others and in
    `<job>/again-<n>/` (bench.sweep.job_record: the job's record from then on); the withheld record stays as it was."""
    from bench.report.summary import summary  # pandas: imported after the pre-flight checks
    from bench.sweep import again_dir, withheld_jobs

    for n in range(1, passes + 1):
        jobs = withheld_jobs(sweep_dir)
        if not jobs:
            return
        names = ", ".join(f"{r.backend} {r.device} bs={r.batch_size}" for _, r in jobs)
        log.info("measure again (%d of %d, measure_again): %d job(s) the host left without an answer: %s", n, passes, len(jobs), names)
        for job, withheld in jobs:
            # the job's own overrides (the sweep's values for it included), composed as Hydra composed them
            config = dataclasses.replace(compose(list(OmegaConf.load(job / ".hydra" / "overrides.yaml"))), resume=False)
            out = again_dir(job, n)
            with job_folder(out):
                record = measure_and_store(config, out, again_after=withheld)
            log.info("measured again after %s (%s): %s", withheld.record_id, withheld.metrics[MEASURE_AGAIN],
                     summary(record).splitlines()[0])


def _preflight_failed(exc: Exception) -> int:
    """A failure of the pre-flight checks themselves (not a refusal): one line and exit 3, as a job's, so
    that a CI reading exit 1 as a failed gate is not misled by a traceback's exit 1; nothing has run."""
    print(f"error: the harness failed in its pre-flight check, before any work: {internal_error(exc)}", file=sys.stderr)
    return EXIT_HARNESS_ERROR


def recommend(argv: list[str]) -> int:
    """`python -m bench recommend ARGS`: bad input is one line and exit 2 before any work; then the funnel."""
    if {"--help", "-h"} & set(argv):
        from bench.help import recommend_help

        print(recommend_help())
        return EXIT_OK
    try:
        if any(a.startswith("-") for a in argv):
            raise UserError(f"recommend takes KEY=VALUE overrides only, got {next(a for a in argv if a.startswith('-'))!r} "
                            "(python -m bench recommend --help)")
        args = ["+sweep=recommend", *argv]
        check_overrides(args)
        from bench.recommend.ranges import check_ranges  # no torch: the ranges are checked before it loads

        preflight.check(args, early=check_ranges, command="recommend")
        register_configs()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the checks themselves failed
        return _preflight_failed(exc)
    from bench.recommend.command import main as recommend_main  # torch: imported after the pre-flight checks

    return recommend_main(argv)


def main() -> None:
    try:
        code = run(sys.argv[1:])
    except Exception as exc:  # noqa: BLE001 - a subcommand (store, timing, dashboard) failed in the harness itself
        print(f"error: the harness failed: {internal_error(exc)}", file=sys.stderr)
        code = EXIT_HARNESS_ERROR
    sys.exit(code)


def run(argv: list[str]) -> int:
    """`python -m bench ARGS`; returns the exit code (bench.errors), or exits with a job's."""
    if argv[:1] == ["store"]:
        from bench.store import main as store_main

        return store_main(argv[1:])
    if argv[:1] == ["timing"]:  # the machine's timing caches: calibration, re-run log, kernel probe
        from bench.pipeline.timing_cache import main as timing_main

        return timing_main(argv[1:])
    if argv[:1] == ["dashboard"]:  # a subcommand word, not a Hydra run (bench.report.dashboard)
        from bench.report.dashboard import main as dashboard

        return dashboard(argv[1:])
    if argv[:1] == ["recommend"]:  # a command word: the funnel composes its own jobs (bench.recommend)
        return recommend(argv[1:])
    if {"--help", "-h"} & set(argv):
        from bench.help import help_text

        print(help_text())
        return EXIT_OK
    try:
        if any(a.lstrip("+") == "sweep=recommend" for a in argv):
            raise UserError("recommend is a command, not a sweep: python -m bench recommend slo.p99_ms=60 accuracy.max_auc_drop=0.001")
        check_overrides(argv)
        sequential = preflight.sequential_sweep(argv)  # +sweep=scale on model=hstu: its own axes
        if sequential != argv:
            argv = sys.argv[1:] = sequential  # what hydra.main parses
        checked = preflight.check(argv)  # bad keys, values, combinations, inputs and output places: refused before any work
        ready = preflight.sweep_ready(argv)  # a backend.KEY beside a swept backend group: applied in each job
        if ready != argv:
            argv = sys.argv[1:] = ready  # what hydra.main parses
        register_configs()
        from bench.distributed import enter_rank  # torch: imported after the pre-flight checks

        enter_rank(argv)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the checks themselves failed
        return _preflight_failed(exc)
    from bench.sweep import ended_sweep, finish

    try:
        with preflight.sweep_checked() if checked else contextlib.nullcontext():  # each job composed once, not twice
            hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")(task)()
        ended = ended_sweep()
        if ended is not None and ended.get("measure_again"):
            measure_again(Path(ended.hydra.sweep.dir), ended.measure_again)
    except KeyboardInterrupt:
        print("interrupted: the running job left no record; re-run the same command with resume=true to finish", file=sys.stderr)
        return EXIT_INTERRUPTED
    if ended is not None:
        return finish(ended)  # a sweep config's report, gate and history; 1 when a job errored
    if _errored:  # a bare multirun (`-m`): no report, but an errored job still fails the run
        print(f"error: {len(_errored)} jobs errored ({', '.join(_errored[:3])}{' ...' if len(_errored) > 3 else ''}): "
              "their records say why", file=sys.stderr)
        return EXIT_GATE_FAILED
    return EXIT_OK
