"""`run_job(cfg, session) -> (RunRecord, exception)`: the one code path from a typed config to a record.

The same steps for every route (bench.routes): check the values, resolve the device and the
backend, ask the route why it cannot run here, claim the job and reuse its stored record
(`resume=true`), estimate its memory, then let the route measure, and turn what it measured into
the record.

It never raises for a job that fails: the failure becomes a record with status `error` (or
`skipped`, with a reason, when the device or backend cannot run here, or the job would not fit in
memory), so a sweep goes on and nothing measured is lost. An exception, a NaN or inf score, or
running out of memory fails the job, not the sweep; after an out-of-memory the shared work is
dropped so the next job starts clean. The backend's `close()` and the route's `teardown()` run
after every job.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from bench import devices, registry
from bench.backends.backend import NotApplicable
from bench.config import NOT_THE_JOB, Config, workload_label
from bench.errors import UserError, one_line
from bench.hardware import prepare_process
from bench.hashing import config_hash
from bench.measure.environment import code_state, environment, kernel_path
from bench.measure.memory import memory_skip_reason
from bench.metrics import MEASURE_AGAIN, SPEEDUP
from bench.models.train import input_identity, needs_training, training_seconds
from bench.pipeline import reruns
from bench.pipeline.calibrate import (Calibration, Setting, calibration, calibration_seconds, needs_calibration, rerun_log,
                                      timing_setting)
from bench.pipeline.guard import memory_estimate
from bench.pipeline.shared import SharedWork
from bench.progress import wall_per_cpu
from bench.record import NOT_APPLICABLE, USER, RunRecord, measured_again_after
from bench.routes import route_for
from bench.store import RECORDS, Claims, StoreIndex
from bench.config.identity import job_identity
from bench.config.validation import check_values

log = logging.getLogger(__name__)

OUT_OF_MEMORY = (MemoryError, torch.OutOfMemoryError)


def job_hash(resolved: dict[str, Any]) -> str:
    """The job's identity: its config less what does not change what it measures (NOT_THE_JOB, and added
    keys at their legacy values, bench.config.identity)."""
    return config_hash(job_identity({k: v for k, v in resolved.items() if k not in NOT_THE_JOB}))


class ResumeIndex:
    """Stored records by store path, read incrementally (one index per records.jsonl)."""

    def __init__(self) -> None:
        self._stores: dict[str, StoreIndex] = {}

    def _index(self, reports_dir: str) -> StoreIndex:
        path = os.path.abspath(Path(reports_dir) / RECORDS)
        if path not in self._stores:
            self._stores[path] = StoreIndex(Path(path))
        return self._stores[path]

    def stored(self, reports_dir: str, config_hash: str, fingerprint: str) -> RunRecord | None:
        return self._index(reports_dir).latest(config_hash, fingerprint)

    def withheld(self, reports_dir: str, config_hash: str, fingerprint: str) -> RunRecord | None:
        """The job's last ok record whose answer the host withheld (bench.record.reusable): measured again."""
        return self._index(reports_dir).withheld(config_hash, fingerprint)


def resumed(prior: RunRecord, record: RunRecord) -> RunRecord:
    """The stored measurement, re-emitted for this run: its results and environment, this run's config."""
    record.status, record.error, record.error_kind = prior.status, prior.error, prior.error_kind  # the kind too: a NotApplicable skip stays one
    record.metrics, record.env = prior.metrics, prior.env
    record.resumed_from = prior.record_id
    log.info("resume: %s %s bs=%s already measured (record %s)", record.backend, record.device, record.batch_size, prior.record_id)
    return record


@dataclasses.dataclass
class Session:
    """What the jobs of one process share: built work and the resume index."""

    work: SharedWork = dataclasses.field(default_factory=SharedWork)
    resume: ResumeIndex = dataclasses.field(default_factory=ResumeIndex)
    # resume's claims on jobs; the caller holds them (`with session.claims:`) until the record is stored
    claims: Claims = dataclasses.field(default_factory=Claims)
    # cache_dir -> this machine's timing calibration, or why there is none (kept across clear())
    calibrations: dict[str, Calibration | str] = dataclasses.field(default_factory=dict)
    # (cache_dir, probe or not, the device, whether it is here) -> this machine's and stack's kernel health (Device.kernel_health)
    kernel_checks: dict[tuple[str, bool, str, bool], dict] = dataclasses.field(default_factory=dict)
    announced: bool = False  # the first-run line (`announce_first_run`) was considered

    def __post_init__(self) -> None:
        # What exists now (the imported libraries: about half a million objects) lives as long as the
        # process: moved out of the collector's reach, a full collection between jobs and the automatic
        # collections while a job runs cost milliseconds instead of half a second each.
        gc.collect()
        gc.freeze()

    def clear(self) -> None:
        self.work.clear()
        self.resume = ResumeIndex()

    def calibration(self, cfg: Config) -> tuple[Calibration | None, str]:
        """This machine's timing calibration (bench.pipeline.calibrate), measured at most once per process;
        (None, why) when it cannot be had. A failure leaves the jobs timed without it, not failed."""
        if cfg.cache_dir not in self.calibrations:
            try:
                self.calibrations[cfg.cache_dir] = calibration(cfg.cache_dir)
            except Exception as exc:  # noqa: BLE001 - the jobs go on, timed on the rounds alone
                log.warning("timing calibration failed, jobs are timed without it: %s", one_line(exc))
                self.calibrations[cfg.cache_dir] = f"the timing calibration failed ({one_line(exc)})"
        found = self.calibrations[cfg.cache_dir]
        return (found, "") if isinstance(found, Calibration) else (None, found)


    def announce_first_run(self, cfg: Config, device: torch.device, route) -> None:
        """Once per process, before the first job's once-per-machine work: what the wait is for and about how
        long it is, from this machine's own figures (`first_run_words`)."""
        if self.announced:
            return
        self.announced = True
        calibrate = (devices.get(cfg.device).calibrated_timing and cfg.timing.calibrate and not route.uncalibrated
                     and needs_calibration(cfg.cache_dir))
        try:
            workload = self.work.workload(cfg)
            # a training of a few steps (+preset=tiny's) is over before an estimate would be worth its probe
            train = (cfg.model.train.samples // cfg.model.train.batch_size >= MIN_ESTIMATED_STEPS
                     and needs_training(cfg.model, workload, cfg.seed, Path(cfg.cache_dir)))
            if not (calibrate or train):
                return
            steps = {}
            if calibrate:  # this process's CPU time so far is what starting it cost: each probe process starts alike
                steps["calibration"] = calibration_seconds(time.process_time(), wall_per_cpu=wall_per_cpu())
            if train:
                steps["training"] = training_seconds(cfg.model, workload)
        except Exception as exc:  # noqa: BLE001 - the estimate is extra: the job goes on without it
            log.warning("no estimate of the first run's once-per-machine work: %s", one_line(exc))
            return
        log.info(first_run_words(steps))

    def kernel_health(self, cfg: Config) -> dict:
        """What a record keeps of the kernel health check of the job's device (`Device.kernel_health`): its probe's
        verdicts (`kernel_health=true`, once per machine and stack, cached) or what stands without them. A CUDA job
        is judged by the GPU's probe, never by the host CPU's. A failed probe says why; the job goes on."""
        device = devices.get(cfg.device)
        key = (cfg.cache_dir, bool(cfg.kernel_health), cfg.device.type, device.available())
        if key not in self.kernel_checks:
            where = device.torch_device()
            self.kernel_checks[key] = device.kernel_health(cfg.cache_dir, bool(cfg.kernel_health), where,
                                                           environment(where) if device.available() else {})
        return self.kernel_checks[key]


MIN_ESTIMATED_STEPS = 30  # a training this long or longer is estimated up front (3 of its steps timed)


def first_run_words(steps: dict[str, float]) -> str:
    """`first run on this machine: about 95 s more for calibration and training (cached after)`."""
    names = " and ".join(steps)
    return f"first run on this machine: about {sum(steps.values()):.0f} s more for {names} (cached after)"


def device_of(cfg: Config) -> tuple[torch.device | None, str | None]:
    """The process set up for the job (threads, allocator) and its device resolved: (device, None), or (None or the
    device, why it cannot run here). Every job takes this path, and the tune too."""
    prepare_process(cfg.device, cfg.threads)
    return devices.resolve(cfg.device)


def memory_skip(cfg: Config, backend, device: torch.device, work: SharedWork) -> str | None:
    """Why the job's model would not fit in `memory_fraction` of the memory available (None: it fits, or no
    fraction is set). Earlier jobs' leftovers are freed first, and a prepared module already held is reused, not
    estimated again. Every job takes this path, and the tune for its fp32 model too."""
    if cfg.memory_fraction is None:
        return None
    work.release_leftovers(cfg, backend, device)  # earlier jobs' leftovers are not in the way
    workload = work.workload(cfg)
    if work.prepared_resident(cfg, backend, device):  # a held module is reused, not built again
        return None
    estimate = memory_estimate(cfg, backend, workload, work.model_resident(cfg), device)
    return memory_skip_reason(estimate, device, cfg.memory_fraction, devices.get(cfg.device))


def run_one(cfg: Config, session: Session | None = None) -> RunRecord:
    return run_job(cfg, session)[0]


def run_job(cfg: Config, session: Session | None = None) -> tuple[RunRecord, Exception | None]:
    """The record, and the exception behind an `error` record (None otherwise)."""
    session = session or Session()
    resolved = dataclasses.asdict(cfg)
    record = RunRecord(
        status="ok",
        workload=workload_label(cfg.workload),
        backend=cfg.backend.name,
        device=cfg.device.type,
        batch_size=cfg.batch_size,
        config=resolved,
        config_hash=job_hash(resolved),
        env={},
    )
    device = backend = again = None
    route = route_for(cfg)
    try:
        check_values(cfg)
        # The user's data and code join the job's identity, so resume never hands back a record measured
        # on another version of them (bench.models.train.input_identity; {} for generated data and DLRM).
        inputs = input_identity(cfg.model, session.work.workload(cfg))
        if inputs:
            record.config["inputs"] = inputs
            record.config_hash = job_hash(record.config)
        device, skip = device_of(cfg)
        if skip is None:
            backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)
            record.backend = backend.record_name()
            # The backend's config as it resolved it (a per_table_file's mapping joins per_table), so the
            # record says what ran and resume tells two contents of one file apart.
            record.config["backend"] = dataclasses.asdict(backend.cfg)
            record.config_hash = job_hash(record.config)
            skip = backend.unsupported_reason(device) or route.skip_reason(cfg, backend, device, session.work)
        if skip is None:
            # The timing setting the job is measured with (picked on this machine unless given) is part of
            # its identity: resume never hands back a record timed with another one.
            session.announce_first_run(cfg, device, route)
            cfg, setting = _timing_setting(cfg, device, backend, route, session)
            record.config["timing"] = dataclasses.asdict(cfg.timing)
            record.config_hash = job_hash(record.config)
        else:
            device = None  # not usable here: describe the machine without it
        if cfg.resume:
            fingerprint = environment(device)["fingerprint"]
            session.claims.take(cfg.reports_dir, f"{record.config_hash}-{fingerprint}")  # waits while another process runs this job
            prior = session.resume.stored(cfg.reports_dir, record.config_hash, fingerprint)
            if prior is not None:
                return resumed(prior, record), None
            again = session.resume.withheld(cfg.reports_dir, record.config_hash, fingerprint)
            if again is not None:  # kept in the store as it was; this job's record is a new one beside it
                log.info("resume: %s %s bs=%s measured again: record %s withheld its answer (%s)", record.backend, record.device,
                         record.batch_size, again.record_id, again.metrics[MEASURE_AGAIN])
        if skip is None:
            skip = memory_skip(cfg, backend, device, session.work)
        if skip is not None:
            record.status, record.error = "skipped", skip
        else:
            record.metrics = route.measure(cfg, backend, device, session.work, setting)
            if again is not None:
                measured_again_after(record, again.record_id)
            record.error = route.fault(record.metrics)  # it ran, but what it measured fails the job
            record.status = "error" if record.error else "ok"
            if record.status == "ok":
                _log_rerun(record, setting)
        return record, None
    except NotApplicable as exc:  # this backend cannot apply to this model: nothing failed
        record.status, record.error, record.error_kind = "skipped", str(exc), NOT_APPLICABLE
        return record, None
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        record.status = "error"
        if isinstance(exc, OUT_OF_MEMORY):
            session.clear()  # the next job starts without this one's leftovers
            record.error = f"out of memory ({type(exc).__name__}: {exc}); the shared caches were dropped"
        else:
            record.error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
            record.error_kind = USER if isinstance(exc, UserError) else None
        log.debug("job failed", exc_info=True)
        return record, exc
    finally:
        route.teardown()
        if backend is not None:
            _close(backend, record)
        if not record.resumed_from:
            record.env = environment(device)
            record.env["kernel_health"] = session.kernel_health(cfg)


def _timing_setting(cfg: Config, device: torch.device, backend, route, session: Session) -> tuple[Config, dict[str, Any]]:
    """The config with its timing setting resolved (bench.pipeline.calibrate), and what the record says of it; for a
    paired Server job also `serve_rerun`, the run-to-run spread its ratio's interval carries (bench.pipeline.reruns)."""
    why_not, calibrated = route.uncalibrated or "", None  # a route that times its own way says why
    if not why_not and not cfg.timing.calibrate:
        why_not = "timing.calibrate=false"
    job_device = devices.get(cfg.device)
    if not why_not and not job_device.calibrated_timing:  # its own clock (CUDA events): the CPU's calibration does not apply
        why_not = job_device.uncalibrated or f"{job_device.name}: timed on its own clock"
    if not why_not:
        calibrated, why_not = session.calibration(cfg)
    # read before every job: a sweep's earlier jobs, re-runs of jobs measured before, already count for its later ones
    machine_reruns = reruns.Reruns(reruns.path_for(calibrated.path), kernel_path()) if calibrated is not None else None
    cfg, setting = timing_setting(cfg, device, backend, calibrated, why_not, machine_reruns)
    if _paired_server(cfg):  # its interval's run-to-run spread, weighed with the machine's re-runs of paired Server jobs
        setting["serve_rerun"] = reruns.serve_spread(rerun_log(cfg.cache_dir), kernel_path(), cfg.serve.rerun_spread, cfg.batch_size)
    return cfg, setting


def _paired_server(cfg: Config) -> bool:
    return cfg.serve is not None and cfg.serve.scenario == "server" and cfg.serve.paired


def _log_rerun(record: RunRecord, setting: dict[str, Any]) -> None:
    """A paired speedup timed with a calibrated setting, or a paired Server job's QPS ratio to fp32, joins the
    machine's re-run log, from which later runs of the same job learn the spread between runs (bench.pipeline.reruns)."""
    m = record.metrics
    calibration_file = (setting.get("calibration") or {}).get("path")
    paired = m.get("paired") or {}
    if calibration_file and m.get(SPEEDUP) and m.get("speedup_round_se") is not None:
        timed_with = Setting(record.config["timing"]["threads"], record.config["timing"]["clock"]).text()
        where = reruns.path_for(calibration_file)
        line = reruns.entry(record.config_hash, code_state(), timed_with, kernel_path(), record.batch_size, record.backend,
                            math.log(m[SPEEDUP]), m["speedup_round_se"], len(m.get("speedup_rounds") or []))
    elif "serve_rerun" in setting and paired.get("qps_ratio") and paired.get("ratio_log_se") is not None:
        where = rerun_log(record.config["cache_dir"])
        line = reruns.entry(record.config_hash, code_state(), reruns.SERVED, kernel_path(), record.batch_size, record.backend,
                            math.log(paired["qps_ratio"]), paired["ratio_log_se"], paired.get("used_rounds") or 0)
    else:
        return
    try:
        reruns.append(where, line)
    except OSError as exc:  # the cache is extra: the record stands without it
        log.warning("the re-run log %s was not written: %s", where, one_line(exc))


def _close(backend, record: RunRecord) -> None:
    try:
        backend.close()
    except Exception as exc:  # noqa: BLE001 - what was measured stays; the record says what failed
        log.warning("backend %s: close() failed: %s", record.backend, exc)
        record.metrics["close_error"] = f"{type(exc).__name__}: {exc}"
