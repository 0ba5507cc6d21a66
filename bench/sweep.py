"""Sweep-level work that Hydra's launcher does not do: a progress bar over the jobs, and after the
sweep its report, the gate for sweeps that ask for it (`run_gate: true`) and the nightly history.
A job that failed is a record with status `error`: the sweep goes on, the report lists it, the gate
fails on it, and the sweep exits 1 (a `skipped` job is not an error), so `python -m bench +sweep=quant &&
publish` never publishes a partial report. With `resume=true` a re-run of an interrupted sweep still has one record per job
(see bench.pipeline.guard).

The sweep configs (`conf/sweep/*.yaml`) install `SweepCallback`; `python -m bench` calls `finish`
once Hydra has returned, outside Hydra's callback error handling. The report reads only the
records the jobs wrote; nothing is measured here.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bench.config import NOT_THE_JOB
from bench.config.files import as_compare_config as compare_settings
from bench.distributed import overlapping
from bench.errors import EXIT_GATE_FAILED, EXIT_HARNESS_ERROR, EXIT_OK, internal_error
from bench.progress import progress
from bench.record import MEASURED_AGAIN_AFTER, RunRecord, is_serving, withheld
from bench.store import read_record

if TYPE_CHECKING:  # pandas is imported after the pre-flight checks
    from bench.results.assemble import Results

T = TypeVar("T")

log = logging.getLogger("bench.sweep")


def swept_values(config: DictConfig) -> dict[str, list[str]]:
    """Each swept key's values as the basic sweeper reads them (sweeper params, then the command line: later keys win)."""
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    overrides = OverridesParser.create().parse_overrides(params + list(config.hydra.overrides.task))
    values = {}
    for o in overrides:
        values[o.get_key_element()] = list(o.sweep_string_iterator()) if o.is_sweep_override() else [str(o.value())]
    return values


def count_jobs(config: DictConfig) -> int:
    """Jobs the basic sweeper will launch: the product of the swept values, later keys winning."""
    return math.prod(len(v) for v in swept_values(config).values())


def jobs_without_device(config: DictConfig, here: Callable[[str], bool] | None = None) -> int:
    """The sweep's jobs on a device this machine does not have (`here(name)`: whether it has it; by default the
    device's own answer, `Device.missing`): each is skipped in about no time, so the time left is estimated without them."""
    here = here or _device_here
    values = swept_values(config)
    names = values.get("device") or [str(config.get("device", {}).get("type", "cpu"))]
    missing = sum(not here(name) for name in names)
    return count_jobs(config) * missing // len(names)


def _device_here(name: str) -> bool:
    """Whether the device named is on this machine (a name no device has counts as here: the job says what is wrong)."""
    from bench import devices  # noqa: PLC0415 - torch, imported once a sweep starts, not for `--help`
    from bench.config import DeviceConfig  # noqa: PLC0415

    return name not in devices.names() or devices.get(DeviceConfig(type=name)).missing() is None


# Command-line keys that do not change a sweep's jobs: the config's own (NOT_THE_JOB), Hydra's
# settings and the sweep choice itself.
NOT_THE_JOBS = (*NOT_THE_JOB, "hydra", "sweep")


def sweep_variant(task_overrides) -> str | None:
    """The command-line overrides that change a sweep's jobs, or None for the sweep as configured."""
    kept = [o for o in task_overrides if re.split(r"[.=/@]", o.lstrip("+~"), maxsplit=1)[0] not in NOT_THE_JOBS]
    return " ".join(kept) or None


AGAIN = "again-"  # <job>/again-<n>/: the job measured again the n-th time after the host withheld its answer


def again_dir(job_dir: Path, n: int) -> Path:
    return Path(job_dir) / f"{AGAIN}{n}"


def job_record(job_dir: Path) -> RunRecord:
    """A job's record: its last measurement after the host withheld its answer (`<job>/again-<n>/record.json`,
    bench.cli.measure_again, each naming the one before it), else its own (`<job>/record.json`). A folder left by an
    earlier run into the same sweep folder names another record and is not read."""
    record = read_record(Path(job_dir) / "record.json")
    n = 1
    while (path := again_dir(job_dir, n) / "record.json").is_file():
        again = read_record(path)
        if (again.metrics or {}).get(MEASURED_AGAIN_AFTER) != record.record_id:
            break
        record, n = again, n + 1
    return record


def sweep_records(sweep_dir: Path) -> list[RunRecord]:
    """The records the sweep's jobs left in their folders (`<sweep dir>/<job>/record.json`), each job's last (`job_record`)."""
    return [job_record(p.parent) for p in sorted(Path(sweep_dir).glob("*/record.json"))]


def withheld_jobs(sweep_dir: Path) -> list[tuple[Path, RunRecord]]:
    """The sweep's jobs whose record withheld its answer because the host disturbed them (bench.record.withheld), with that record."""
    jobs = [(p.parent, job_record(p.parent)) for p in sorted(Path(sweep_dir).glob("*/record.json"))]
    return [(job, record) for job, record in jobs if withheld(record)]


_ended: list[DictConfig] = []  # the config of the sweep Hydra finished in this process, for `finish`


def ended_sweep() -> DictConfig | None:
    """The config of the sweep that ended in this process (and forget it), or None."""
    return _ended.pop() if _ended else None


def job_label(config: DictConfig) -> str:
    """A job as the progress line names it: `int8_tbe bs=1024 cpu`, with the scenario of a serving job."""
    serve = config.get("serve")
    scenario = f" {serve.scenario}" if serve is not None and serve.get("scenario") else ""
    return f"{config.backend.name} bs={config.batch_size} {config.device.type}{scenario}"


def job_status(job_return: Any) -> str | None:
    """The status the job's task returned (`ok`, `skipped`, `error`), or None when it raised or returned none."""
    try:
        value = job_return.return_value
    except Exception:  # noqa: BLE001 - Hydra re-raises the job's own exception here: no status
        return None
    return value if isinstance(value, str) else None


class SweepCallback(Callback):
    """Hydra's hooks do only what cannot fail the run: the progress bar, and noting that the sweep
    ended. Hydra turns an exception raised in a callback into a warning, so the post-sweep work
    (report, gate, history), whose exit code a CI job relies on, runs after Hydra returns (`finish`)."""

    def __init__(self) -> None:
        self.bar = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _ended.clear()
        self.bar = progress(total=count_jobs(config), desc="sweep", unit="job", interval=0)  # without a terminal: a line per job
        if hasattr(self.bar, "expected_skips"):
            self.bar.expected_skips = jobs_without_device(config)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.bar is not None:  # the clock of the time left starts with the first job, not with composing the sweep
            self.bar.begin()

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if self.bar is not None:  # the job just finished, named on the line its count makes
            self.bar.set_postfix_str(job_label(config))
            self.bar.update(1, skipped=job_status(job_return) == "skipped")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.close()
        _ended.append(config)


class Stages:
    """Runs the post-sweep stages; a stage that raises is one line on stderr naming the stage and
    the cause (its traceback saved beside the report), and the exit code becomes EXIT_HARNESS_ERROR."""

    def __init__(self, traceback_dir: Path) -> None:
        self.code = EXIT_OK
        self.traceback_dir = traceback_dir

    def run(self, name: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every stage failure is reported and turns the exit non-zero
            print(f"error: the {name} stage failed: {internal_error(exc, self.traceback_dir, f'error-{name}.txt')}", file=sys.stderr)
            self.code = max(self.code, EXIT_HARNESS_ERROR)
            return None


def console_bottom_line(results: Results) -> list[str]:
    """report.md's bottom line as the console prints it after a sweep (markdown bold left out)."""
    from bench.report.pick import bottom_line

    return [line.replace("**", "") for line in bottom_line(results.jobs, results.budget)]


def finish(config: DictConfig) -> int:
    """The post-sweep phase: the sweep's report folder, its results, its gate verdict, the rendered
    report, the history. The results (`bench.results.assemble`) are built once, from the report folder's
    stored records at `compare.alpha` and `compare.max_auc_drop`, and handed to the gate, then the
    report, then the history. The verdict (gate.md, gate.xml, the exit code) is decided and written
    before anything optional runs. Returns the exit code: 0, 1 when a job errored or the gate failed,
    3 when a stage failed (the highest applies)."""
    from bench.report.publish import finish_report, start_report
    from bench.results.assemble import build_results
    from bench.results.key import record_label
    from bench.results.load import load_records

    sweep_dir = Path(config.hydra.sweep.dir)
    stages = Stages(sweep_dir)
    records = stages.run("records", lambda: sweep_records(sweep_dir))
    if records is None:
        return stages.code
    name = config.get("sweep_name") or "sweep"
    variant = sweep_variant(config.hydra.overrides.task)
    counts = {s: sum(r.status == s for r in records) for s in ("ok", "error", "skipped")}
    resumed = sum(bool(r.resumed_from) for r in records)
    again = sum(bool((r.metrics or {}).get(MEASURED_AGAIN_AFTER)) and not r.resumed_from for r in records)
    still = sum(withheld(r) for r in records)
    user = sum(r.user_error for r in records)
    note = (f"; {resumed} resumed from stored records" if resumed else "") + (f"; {user} of the errors bad input" if user else "")
    note += f"; {again} measured again after the host withheld an answer" if again else ""
    note += f"; {still} still without an answer, the host's doing (resume=true measures again)" if still else ""
    print(f"sweep {name}: {len(records)} jobs ({counts['ok']} ok, {counts['error']} error, {counts['skipped']} skipped{note})")
    for r in records:
        if r.status == "error":
            reason = next(iter((r.error or "").strip().splitlines()), "no reason recorded")
            print(f"  {'bad input' if r.user_error else 'error'}: {record_label(r)} {r.device} bs={r.batch_size}: {reason}")
    if overlapping(records):  # parallel launchers without the host lock (one_job_per_host=false)
        print(f"warning: {len(overlapping(records))} pairs of jobs ran at the same time on one host: their timings disturbed each other")
    report_dir = stages.run("report", lambda: start_report(records, Path(config.reports_dir), name))
    if report_dir is None:
        return stages.code
    stages.traceback_dir = report_dir
    compare = compare_settings(config.get("compare") or {})
    # the report folder's stored records (what the gate judges), built into tables once, at compare.alpha
    results = stages.run("results", lambda: build_results(load_records(report_dir), alpha=compare.alpha, budget=compare.max_auc_drop))
    if results is None:
        return stages.code
    gate_code, verdict = EXIT_OK, None
    if config.get("run_gate"):
        from bench.gate.stored import judge_sweep

        # the configs are stored beside the records; the verdict is written before anything is rendered
        verdict = stages.run("gate", lambda: judge_sweep(report_dir, config.gate, config.get("compare"), results))
        gate_code = None if verdict is None else verdict.exit_code
        if verdict is not None:
            print(f"gate: {'FAILED' if gate_code else 'passed'} ({report_dir / 'gate.md'})")
    title = f"Sweep {name}" + (f" with {variant}" if variant else "")
    if stages.run("report", lambda: finish_report(results.records, report_dir, title, variant, results=results)) is not None:
        for line in stages.run("report", lambda: console_bottom_line(results)) or []:
            print(line)
        from bench.report.zoo import console_lines as zoo_lines

        for line in stages.run("report", lambda: zoo_lines(results.jobs)) or []:
            print(line)
        print(f"report: {report_dir / 'report.md'}")
    if any(is_serving(r) for r in records):
        from bench.report.serve import console_lines

        served = stages.run("report", lambda: console_lines(results.records, results.serving))
        if served:
            print("served (max QPS at the p99 bound [highest VALID, lowest INVALID]; Offline: samples/s):", *served, sep="\n")
    if verdict is not None and any(not is_serving(r) for r in records):  # the history follows the results table: no serving rows
        from bench.gate.stored import history_fields
        from bench.report.history import HISTORY_FILE, history_path, update_history

        gate = config.gate
        path = history_path(gate.get("history_file"), Path(config.reports_dir), gate.get("history_name") or HISTORY_FILE)
        history_md = stages.run("history", lambda: update_history(results.records, path, compare, runs=gate.history_runs,
                                                                  results=results, **history_fields(report_dir, verdict)))
        if history_md is not None:
            print(f"history: {path} ({history_md})")
    jobs_code = EXIT_GATE_FAILED if counts["error"] else EXIT_OK
    if counts["error"]:
        print(f"exit 1: {counts['error']} of {len(records)} jobs errored (listed above)", file=sys.stderr)
    return max(stages.code, gate_code or EXIT_OK, jobs_code)
