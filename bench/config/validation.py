"""The one validation pass over a composed config, before any work: values, combinations, places.

`python -m bench` runs `validate_config` on every variant of the command line (bench.preflight)
after the keys and types have been checked by composition; the first problem is one line naming
the key and the fix, exit code 2, and nothing is built, measured or stored. A job started by other
code (`run_one`, the suites) checks the same values again (`check_values`), so bad input there is
an `error` record marked as bad input, not a crash.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable

from bench import registry
from bench.config import MEASURES, RECORDS_FILE, Config
from bench.errors import UserError

CLOCKS = ("auto", "wall", "thread_cpu")


def validate_config(cfg: Config, run_dirs: Iterable[tuple[str, str]] = ()) -> None:
    """Every check below; `run_dirs` are (key, folder) pairs of the run's own output folders."""
    check_values(cfg)
    check_places(cfg, run_dirs)


# ------------------------------------------------------------------------------------ values


def check_values(cfg: Config) -> None:
    """Ranges and combinations of the config's values (no file system)."""
    for key in ("batch_size", "eval_batch_size", "calibration_batch_size", "world_size"):
        _positive_int(getattr(cfg, key), key)
    fraction = cfg.memory_fraction
    if fraction is not None and not (isinstance(fraction, (int, float)) and fraction > 0):
        raise UserError(f"memory_fraction must be a positive number (or null to turn the memory check off), got {fraction!r}")
    if not isinstance(cfg.measure_again, int) or isinstance(cfg.measure_again, bool) or cfg.measure_again < 0:
        raise UserError(f"measure_again must be 0 or more (how many times a sweep measures again a job the host left "
                        f"without an answer; 0: none), got {cfg.measure_again!r}")
    check_timing(cfg.timing, cfg.threads)
    if cfg.measure is not None and cfg.measure not in MEASURES:
        raise UserError(f"measure must be one of {', '.join(MEASURES)} (or null: the whole job), got {cfg.measure!r}")
    _check_backend(cfg)
    cfg.gate.validate()
    cfg.compare.validate()


def _positive_int(value, key: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{key} must be a positive integer, got {value!r} ({key}=N)")


def check_timing(timing, threads: int | None) -> None:
    """One clear line for timing options that cannot work."""
    if timing.warmup_batches < 0:
        raise UserError(f"timing.warmup_batches must be 0 or more, got {timing.warmup_batches}")
    for key in ("trials", "batches_per_trial", "max_rounds"):
        value = getattr(timing, key)
        if value < 1:
            raise UserError(f"timing.{key} must be at least 1, got {value} (timing.{key}=N)")
    if timing.min_trial_seconds < 0:
        raise UserError(f"timing.min_trial_seconds must be 0 or more, got {timing.min_trial_seconds}")
    if timing.clock not in CLOCKS:
        raise UserError(f"timing.clock={timing.clock!r} is not a clock: choose one of {', '.join(CLOCKS)}")
    if timing.threads is not None:
        _positive_int(timing.threads, "timing.threads")
    fixed = timing.threads if timing.threads is not None else threads
    if timing.clock == "thread_cpu" and fixed not in (None, 1):
        key = "timing.threads" if timing.threads is not None else "threads"
        raise UserError(f"timing.clock=thread_cpu times the calling thread only: it needs one thread, not {key}={fixed} "
                        f"(set {key}=1, or leave the thread count out)")
    if timing.test_delay < 0:
        raise UserError(f"timing.test_delay must be 0 or more (0.2: each timed call takes 20% longer), got {timing.test_delay}")
    if timing.pool_samples < 0:
        raise UserError(f"timing.pool_samples must be 0 or more, got {timing.pool_samples}")
    if not timing.target_spread > 0:
        raise UserError(f"timing.target_spread must be above 0 (0.05: stop when the speedup's interval spans 5% of it), got {timing.target_spread}")
    if not timing.max_trial_cv > 0:
        raise UserError(f"timing.max_trial_cv must be above 0, got {timing.max_trial_cv}")


def _check_backend(cfg: Config) -> None:
    backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)  # cheap: nothing is built
    backend.check()
    planted = getattr(cfg.backend, "planted_slowdown", None)
    if planted is not None and not planted >= 1:
        raise UserError(f"backend.planted_slowdown (testing only) is a factor of 1 or more (1.2: 20% slower), got {planted}")
    if cfg.sharding.name == "none":
        return
    refusal = backend.not_shardable
    if refusal:
        raise UserError(f"backend={cfg.backend.name} cannot be sharded ({refusal}): use sharding=none with it")
    if cfg.batch_size % cfg.world_size:
        raise UserError(f"batch_size {cfg.batch_size} is the global batch and must split evenly over world_size={cfg.world_size} ranks")


# ------------------------------------------------------------------------------------ places


def check_places(cfg: Config, run_dirs: Iterable[tuple[str, str]] = ()) -> None:
    """The folders the run writes to can be written (for root too: a path under a regular file, or
    on a read-only file system, cannot), and the files it appends to are regular files."""
    writable_folder(cfg.reports_dir, "reports_dir")
    appendable_file(Path(cfg.reports_dir) / RECORDS_FILE, "reports_dir", what="the record store")
    writable_folder(cfg.cache_dir, "cache_dir")
    if cfg.run_gate:
        history = Path(cfg.gate.history_file) if cfg.gate.history_file else Path(cfg.reports_dir) / cfg.gate.history_name
        key = "gate.history_file" if cfg.gate.history_file else "reports_dir"
        writable_folder(history.parent, key, what=f"the history {history}")
        appendable_file(history, "gate.history_file", what="the history")
    for key, folder in run_dirs:
        writable_folder(folder, key)


def writable_folder(path: str | Path, key: str, what: str = "") -> None:
    """A folder that exists and can be written, or can be created in the nearest folder that exists."""
    fix = f"{key} PATH" if key.startswith("--") else f"{key}=PATH"
    target = Path(path).expanduser()
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    name = what or str(path)
    if not probe.is_dir():
        raise UserError(f"{key}: cannot write {name}: {probe} is a file, not a folder; give a folder you can write ({fix})")
    try:  # a real probe: permissions, read-only file systems and special ones (/proc) all answer it
        os.rmdir(tempfile.mkdtemp(prefix=".bench-probe-", dir=probe))
    except OSError as exc:
        raise UserError(f"{key}: cannot write {name}: cannot create a folder in {probe} ({exc.strerror}); "
                        f"give a folder you can write ({fix})") from None


def appendable_file(path: Path, key: str, what: str) -> None:
    """A file the run appends to is a regular file that can be written (an immutable file cannot, for root too)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_file():
        raise UserError(f"{what} {path} is not a regular file (a folder?): move it away, or set {key}=PATH")
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"{what} {path} cannot be written (read-only or immutable): make it writable, or set {key}=PATH")
