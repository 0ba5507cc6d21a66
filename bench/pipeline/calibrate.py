"""The timing setting and the spread between processes, measured once per machine and cached.

A paired speedup measured in one process differs from the same measurement in another process by
more than its rounds show: each process places the libraries, FBGEMM's generated kernels and the
models anew in its address space, starts from another allocator state and meets other background
work. On the development machine one process's FBGEMM table lookups took 7.3 ms a call and
another's 10.8 ms, for the same job (docs/measuring.md). A re-run samples that level, so an
interval that claims to cover a re-run must carry it (Kalibera & Jones, "Rigorous benchmarking in
reasonable time", ISMM 2013: repeat at the level where the variance lives). Several processes per job would cost seconds of start-up each;
instead `calibration` samples a few processes once per machine (`Plan`): one fresh process imports the
libraries once, then forks each probe process from itself in turn, so the imports are paid once, not per
process (they were most of the calibration's minute on a slow machine). A forked process shares the
libraries' placement with its siblings but builds its models, allocates its memory and generates FBGEMM's
kernels anew, after the fork. Each builds the probe
pair (fp32 and int8_tbe on the default model with random weights) and times paired rounds at each
probe batch size, as a job times them (halves as long as a job's, as many rounds as a job's
minimum), under every candidate setting: all threads on the wall clock, and one thread, whose calls
are read on both its own CPU time and the wall clock at once. Per setting, the variance of
log(speedup) splits into rounds and processes (`bench.stats.variance_components`); the setting whose
re-run spread is smallest is picked (one thread on its own CPU time unless another is clearly
steadier, so that two calibrations of one machine pick alike), and its between-process standard
deviation is carried into every paired interval, refined by what re-runs of identical jobs on this
machine measured since (`bench.pipeline.reruns`). The same split is kept for the absolute
throughput. The result is cached in `<cache_dir>/timing/<machine>.json` (delete the file to
measure again).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from bench import hardware
from bench.io import write_json_atomic
from bench.measure.environment import stack_key
from bench.pipeline.reruns import Reruns, combined, path_for
from bench.progress import once_per_machine
from bench.stats import variance_components

log = logging.getLogger(__name__)

VERSION = 2
PROBE_BACKEND = "int8_tbe"


@dataclass(frozen=True)
class Plan:
    """How the calibration samples the machine: fresh processes, paired rounds in each, probe sizes."""

    processes: int = 4
    rounds: int = 4  # paired rounds per setting and probe size in each process: a job's minimum (timing.trials)
    batch_sizes: tuple[int, ...] = (256, 4096)
    half_seconds: float = 0.2  # each side of a round lasts at least this long, as a job's (timing.min_trial_seconds)
    overrides: tuple[str, ...] = ()  # of the probe's config (tests use a tiny workload)


@dataclass(frozen=True)
class Setting:
    """One way to time: the thread count of the timed calls and the clock that times them."""

    threads: int
    clock: str  # wall | thread_cpu

    def text(self) -> str:
        return f"{self.threads} thread{'s' if self.threads != 1 else ''}, {self.clock} clock"


@dataclass(frozen=True)
class Measured:
    """What the calibration found for one setting (standard deviations of logs: about relative)."""

    setting: Setting
    process_sd: float  # between processes, beyond what their rounds explain: carried into every interval
    round_sd: float  # between the rounds of one process
    rerun_sd: float  # expected spread of a re-run's speedup at the plan's rounds: what the pick minimizes
    throughput_process_sd: float  # the same split for the candidate's absolute throughput
    throughput_round_sd: float
    df: int = 0  # degrees of freedom behind process_sd (processes - 1, summed over the probe sizes)


def candidates(all_threads: int) -> list[Setting]:
    """The settings worth comparing here, in order of preference: one thread on its own CPU time (which
    leaves out the time the thread waited for a core), one thread on the wall clock, every thread."""
    return [Setting(1, "thread_cpu"), Setting(1, "wall")] + ([Setting(all_threads, "wall")] if all_threads > 1 else [])


# A setting later in the order of preference is picked only when its expected re-run spread is smaller
# by more than this share: two calibrations of one machine then pick alike (the setting is part of a
# job's identity, so a pick that flips between them would keep re-runs from being compared).
CLEARLY_STEADIER = 0.15


def machine_key() -> str:
    """The machine and stack a calibration holds for (`bench.measure.environment.stack_key`: CPU, versions,
    FBGEMM's instruction set, the cpuinfo fix, the kernels' environment variables; the thread count is
    what the calibration chooses, so not part of it)."""
    return stack_key(VERSION)


def cache_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / "timing" / f"{machine_key()}.json"


def rerun_log(cache_dir: str | Path) -> Path:
    """This machine's re-run log under `cache_dir`, beside the timing calibration (whether or not one was made)."""
    return path_for(cache_path(cache_dir))


@dataclass(frozen=True)
class Calibration:
    measured: tuple[Measured, ...]
    path: str
    processes: int
    rounds: int

    def best(self, threads: Optional[int] = None, clock: Optional[str] = None) -> Optional[Measured]:
        """Among the settings matching the given parts, the first in order of preference whose re-run
        spread is within `CLEARLY_STEADIER` of the smallest; None if none match."""
        fits = [m for m in self.measured if threads in (None, m.setting.threads) and clock in (None, m.setting.clock)]
        if not fits:
            return None
        smallest = min(m.rerun_sd for m in fits)
        return next(m for m in fits if m.rerun_sd <= smallest * (1 + CLEARLY_STEADIER))

    def summary(self) -> dict[str, Any]:
        """What a record keeps of the calibration its timing used."""
        return {"path": self.path, "processes": self.processes, "rounds": self.rounds,
                "settings": {m.setting.text(): {"process_sd": m.process_sd, "round_sd": m.round_sd, "rerun_sd": m.rerun_sd}
                             for m in self.measured}}


def calibration(cache_dir: str | Path, plan: Plan = Plan()) -> Calibration:
    """This machine's calibration from the cache, or measured now (about a minute) and cached."""
    path = cache_path(cache_dir)
    try:
        data = json.loads(path.read_text())
        if data.get("version") == VERSION:
            return _from_json(data, path)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    settings = candidates(torch.get_num_threads())
    log.info("timing: calibrating this machine's timing, once per machine (about a minute on an idle machine, longer "
             "when other work shares the cores): %d processes forked one after another x %s; cached in %s",
             plan.processes, ", ".join(s.text() for s in settings), path)
    start = time.perf_counter()
    with once_per_machine("calibration"):
        runs = _child_run(cache_dir, settings, plan)
    data = {"version": VERSION, "processes": plan.processes, "rounds": plan.rounds, "started": "forked",
            "probe": {"backend": PROBE_BACKEND, "batch_sizes": list(plan.batch_sizes), "half_seconds": plan.half_seconds},
            "seconds": time.perf_counter() - start, "runs": runs,
            "measured": [dataclasses.asdict(m) for m in split(runs, settings, plan)]}
    write_json_atomic(path, data)
    return _from_json(data, path)


def needs_calibration(cache_dir: str | Path) -> bool:
    """Whether `calibration` would measure now (no cached calibration of this version)."""
    try:
        return json.loads(cache_path(cache_dir).read_text()).get("version") != VERSION
    except (OSError, ValueError, AttributeError):
        return True


# A forked probe process's own building (the workload, the model, the int8 candidate, the fp32 reference and the timing
# inputs at both probe sizes), as a share of the CPU seconds starting a process cost (imports, plug-ins, the probe's
# configs): 2.0 s against 5.2 s (0.38) on a busy 2-vCPU AMD EPYC with AVX-512 (family 26, model 2).
BUILD_PER_STARTUP = 0.4


def calibration_seconds(startup_seconds: float, plan: Plan = Plan(), all_threads: Optional[int] = None,
                        wall_per_cpu: float = 1.0) -> float:
    """About how long `calibration` takes here: `startup_seconds` (the CPU seconds starting this process cost: the
    calibration's process imports the same libraries, once), then per forked probe process its building
    (`BUILD_PER_STARTUP` of that) and the paired rounds it times at least (each half `half_seconds`, per probe size
    and thread count); all of it times `wall_per_cpu` (bench.progress.wall_per_cpu, measured when the estimate is
    made: other work on the cores stretches every CPU second alike)."""
    thread_counts = {s.threads for s in candidates(all_threads or torch.get_num_threads())}
    timed = len(plan.batch_sizes) * len(thread_counts) * plan.rounds * 2 * plan.half_seconds
    return wall_per_cpu * (startup_seconds + plan.processes * (BUILD_PER_STARTUP * startup_seconds + timed))


def timing_setting(cfg, device: torch.device, backend, calibrated: Optional[Calibration], why_not: str = "",
                   reruns: Optional[Reruns] = None) -> tuple[Any, dict]:
    """(cfg with `timing.threads` and `timing.clock` resolved, what the record says of the setting).

    The parts the user fixed (`timing.threads` or `threads`, `timing.clock`) stay; the rest is the
    calibration's best setting among those that match them, and the spread between processes its
    intervals carry is the calibration's, refined by the machine's re-runs of identical jobs at this
    batch size (`bench.pipeline.reruns`). On CUDA, in a sharded job, or where no calibration is at hand
    (`why_not` says why), nothing is picked: the job's thread count on the wall clock, unless given,
    and the interval covers the rounds of one process only.
    """
    t = cfg.timing
    threads = t.threads if t.threads is not None else cfg.threads
    clock = None if t.clock == "auto" else t.clock
    if clock is None and backend.waits_off_cpu:
        clock = "wall"  # its calls wait off the CPU: the thread's CPU time would leave the wait out
    fixed = [f"threads={threads}"] * (threads is not None) + [f"timing.clock={clock}"] * (clock is not None)
    best = calibrated.best(threads, clock) if calibrated is not None and device.type == "cpu" and not why_not else None
    if best is not None:
        chosen = best.setting
        how = ("given: " + ", ".join(fixed)) if len(fixed) == 2 else (
            "picked by measurement on this machine" + (f" among settings with {fixed[0]}" if fixed else ""))
        spread = reruns.spread(chosen.text(), cfg.batch_size) if reruns is not None else None
        process_sd, source = combined(best.process_sd, best.df, spread)
        info = {"process_sd": process_sd, "process_df": best.df + (spread.df if spread else 0), "process_sd_from": source,
                "throughput_process_sd": best.throughput_process_sd, "throughput_process_df": best.df,
                "calibration": calibrated.summary()}
    else:
        count = threads or torch.get_num_threads()
        chosen = Setting(count, clock or ("thread_cpu" if count == 1 and device.type == "cpu" and not why_not else "wall"))
        reason = why_not or ("CUDA: timed by CUDA events" if device.type != "cpu" else f"{chosen.text()} was not calibrated here")
        how = ("given: " + ", ".join(fixed) if fixed else "default") + f" ({reason}: the interval covers one process's rounds)"
        info = {"process_sd": None, "process_df": None, "throughput_process_sd": None, "throughput_process_df": None}
    resolved = dataclasses.replace(cfg, timing=dataclasses.replace(t, threads=chosen.threads, clock=chosen.clock))
    return resolved, {"threads": chosen.threads, "clock": chosen.clock, "how": how, **info}


def split(runs: list[dict], settings: list[Setting], plan: Plan) -> list[Measured]:
    """Per setting, the between-process and within-process standard deviations of log(speedup) and
    log(throughput), pooled over the probe batch sizes (each size is its own set of processes)."""
    out = []
    for s in settings:
        name = s.text()
        parts: dict[str, list] = {"log_ratio": [], "log_throughput": []}
        for batch_size in plan.batch_sizes:
            for kind in parts:
                groups = [run[name][str(batch_size)][kind] for run in runs]
                parts[kind].append(variance_components(groups))
        ratio, tput = ({k: _pooled(v) for k, v in (("between", [c.between_sd for c in cs]), ("within", [c.within_sd for c in cs]))}
                       for cs in (parts["log_ratio"], parts["log_throughput"]))
        rerun = math.sqrt(ratio["between"] ** 2 + ratio["within"] ** 2 / plan.rounds)
        df = (len(runs) - 1) * len(plan.batch_sizes)
        out.append(Measured(s, ratio["between"], ratio["within"], rerun, tput["between"], tput["within"], df))
    return out


def _pooled(sds: list[float]) -> float:
    return math.sqrt(float(np.mean(np.square(sds))))


def _from_json(data: dict, path: Path) -> Calibration:
    measured = tuple(Measured(**{**m, "setting": Setting(**m["setting"])}) for m in data["measured"])
    return Calibration(measured, str(path), int(data["processes"]), int(data["rounds"]))


def _child_run(cache_dir: str | Path, settings: list[Setting], plan: Plan) -> list[dict]:
    """`plan.processes` probe processes, forked one after another from one fresh process (`_forked`); each times the
    probe pair under every setting, starting at a different one each time (the settings of one thread count are timed
    together, each on its own clock)."""
    orders = [settings[i % len(settings):] + settings[:i % len(settings)] for i in range(plan.processes)]
    args = json.dumps({"cache_dir": str(cache_dir), "orders": [[dataclasses.asdict(s) for s in order] for order in orders],
                       "plan": dataclasses.asdict(plan)})
    done = subprocess.run([sys.executable, "-m", "bench.pipeline.calibrate", args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"timing calibration process failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _forked(args: dict) -> list[dict]:
    """In the fresh process: the libraries imported once, then one forked process per order of the settings, each
    after the last has ended (none times beside another), each measuring with `_child`."""
    from bench.measure.timing import time_paired  # noqa: F401 - imported here, before the forks, not in each of them
    from bench.pipeline.shared import SharedWork  # noqa: F401

    plan = _plan(args)
    configs = _probe_configs(plan, args["cache_dir"])  # composed once (imports the plug-ins): alike in every process
    runs = []
    for order in args["orders"]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the probe process: its result to the pipe, nothing else of the parent's runs on
            os.close(read)
            code = 1
            try:
                with os.fdopen(write, "w") as out:
                    out.write(json.dumps(_child({**args, "settings": order}, configs)))
                code = 0
            except BaseException:  # noqa: BLE001 - its traceback reaches the calibration's error through stderr
                traceback.print_exc()
            finally:
                os._exit(code)  # noqa: PLW0150 - the fork never returns into the parent's code
        os.close(write)
        with os.fdopen(read) as result:
            text = result.read()
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"a timing calibration probe process failed (exit {os.waitstatus_to_exitcode(status)})")
        runs.append(json.loads(text))
    return runs


def _plan(args: dict) -> Plan:
    return Plan(**{**args["plan"], "batch_sizes": tuple(args["plan"]["batch_sizes"]), "overrides": tuple(args["plan"]["overrides"])})


def _probe_configs(plan: Plan, cache_dir: str) -> dict[int, tuple[Any, Any]]:
    """Per probe batch size, the candidate's job config and the fp32 reference's backend config."""
    from bench.config.compose import compose

    return {batch_size: (compose([*plan.overrides, f"backend={PROBE_BACKEND}", f"batch_size={batch_size}", "model.weights=random",
                                  f"cache_dir={cache_dir}"]),
                         compose([*plan.overrides, "backend=fp32", f"batch_size={batch_size}", "model.weights=random"]).backend)
            for batch_size in plan.batch_sizes}


def _child(args: dict, configs: Optional[dict[int, tuple[Any, Any]]] = None) -> dict:
    """In a probe process: per setting and probe batch size, paired rounds' log ratios and log throughputs.
    `configs`: `_probe_configs`, composed before the fork."""
    from bench import cpuinfo_fix, registry
    from bench.measure.timing import CLOCKS, time_paired
    from bench.pipeline.shared import SharedWork

    plan = _plan(args)
    configs = configs or _probe_configs(plan, args["cache_dir"])
    out: dict[str, dict] = {}
    shared = SharedWork()
    device = torch.device("cpu")
    for batch_size in plan.batch_sizes:
        cfg, fp32 = configs[batch_size]
        hardware.prepare_process(cfg.device, None)
        workload = shared.workload(cfg)
        model = shared.model(cfg, workload)
        candidate = shared.prepared(cfg, registry.get("backend", PROBE_BACKEND).factory(cfg.backend), model, workload, device)
        reference = shared.reference(cfg, registry.get("backend", "fp32").factory(fp32), model, device)
        inputs = shared.timing_inputs(cfg, workload, device)
        settings = [Setting(**s) for s in args["settings"]]
        for threads in dict.fromkeys(s.threads for s in settings):  # in the order given
            clocks = [s for s in settings if s.threads == threads][:2]  # one run reads both clocks of a thread count
            with hardware.timing_threads(threads):
                paired = time_paired(candidate, reference, inputs, batch_size, device, warmup_batches=cfg.timing.warmup_batches,
                                     trials=plan.rounds, batches_per_trial=1, min_trial_seconds=plan.half_seconds,
                                     clock=CLOCKS[clocks[0].clock], max_rounds=plan.rounds,
                                     second_clock=CLOCKS[clocks[1].clock] if len(clocks) > 1 else None)
            for setting, timed in zip(clocks, (paired, paired.second)):
                out.setdefault(setting.text(), {})[str(batch_size)] = {
                    "log_ratio": [math.log(r) for r in timed.ratios],
                    "log_throughput": [math.log(t) for t in timed.candidate.trial_throughput],
                }
    out["fbgemm"] = cpuinfo_fix.summary()  # the kernel path this child timed (kept in the cached calibration)
    return out


if __name__ == "__main__":
    given = json.loads(sys.argv[1])
    print(json.dumps(_forked(given) if "orders" in given else _child(given)))  # "settings": one probe, in this process
