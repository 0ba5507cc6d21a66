"""Throughput and latency of a module over prepared batches.

The timed region holds only the model call: batches are built and moved to the device before
timing starts. Warm-up first, then several trials; every per-batch latency is kept so a report can
recompute any statistic. On CPU the clock is wall time, or with `clock=thread_cpu` the CPU time of
the calling thread (one thread only): on a machine shared with other work it leaves out the time
spent waiting for a core. On CUDA, CUDA events bracket each call and the trial synchronises once.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from bench.errors import UserError

# The timing config's keys that drive the loop (`pool_samples` chose the inputs: the caller's business).
LOOP_KEYS = ("warmup_batches", "trials", "batches_per_trial", "min_trial_seconds", "clock")
CLOCKS = {"wall": time.perf_counter_ns, "thread_cpu": time.thread_time_ns}


def loop_options(timing_cfg) -> dict:
    return {key: getattr(timing_cfg, key) for key in LOOP_KEYS}


def check_timing(timing_cfg, threads: int | None) -> None:
    """One clear line for timing options that cannot work."""
    if timing_cfg.clock not in CLOCKS:
        raise UserError(f"timing.clock={timing_cfg.clock!r} is not a clock: choose one of {', '.join(CLOCKS)}")
    if timing_cfg.clock == "thread_cpu" and threads != 1:
        raise UserError("timing.clock=thread_cpu times the calling thread only: set threads=1 with it")
    if timing_cfg.pool_samples < 0:
        raise UserError(f"timing.pool_samples must be 0 or more, got {timing_cfg.pool_samples}")


@dataclass
class Timing:
    batch_size: int
    latency_ms: list[list[float]]  # [trial][batch]: the raw samples

    @property
    def trial_throughput(self) -> list[float]:
        """Samples per second in each trial: samples timed / time in the model calls."""
        return [self.batch_size * len(t) / (sum(t) / 1e3) for t in self.latency_ms]

    @property
    def throughput(self) -> float:
        return float(np.median(self.trial_throughput))

    def latency_percentiles(self) -> dict[str, float]:
        flat = np.concatenate([np.asarray(t) for t in self.latency_ms])
        return {f"p{q}": float(np.percentile(flat, q)) for q in (50, 90, 99)}


def time_module(
    module: nn.Module,
    inputs: Sequence[tuple],
    batch_size: int,
    device: torch.device,
    warmup_batches: int,
    trials: int,
    batches_per_trial: int,
    min_trial_seconds: float = 0.0,
    clock: str = "wall",
) -> Timing:
    """Call `module(*inputs[i])` in rounds; `inputs` already live on `device`.

    Each trial makes at least `batches_per_trial` calls, and more when the warm-up says that
    many would take less than `min_trial_seconds`. The calls cycle over `inputs` with one cursor
    that runs on from the warm-up through every trial, so every distinct batch is used before any
    is used again (trials do not each restart at the first batch).
    """
    if not inputs:
        raise ValueError("no timing batches")
    counter = CLOCKS[clock]
    timed = _cuda_clock if device.type == "cuda" else functools.partial(_cpu_clock, counter=counter)
    cursor = itertools.cycle(inputs)
    with torch.inference_mode():
        warm = timed(module, [next(cursor) for _ in range(max(1, warmup_batches))], device)
        per_call_s = float(np.median(warm)) / 1e3
        calls = max(batches_per_trial, math.ceil(min_trial_seconds / per_call_s) if per_call_s > 0 else 0)
        latency = [timed(module, [next(cursor) for _ in range(calls)], device) for _ in range(trials)]
    return Timing(batch_size=batch_size, latency_ms=latency)


def _cpu_clock(module: nn.Module, trial_inputs: list[tuple], device: torch.device, counter=time.perf_counter_ns) -> list[float]:
    out = []
    for args in trial_inputs:
        start = counter()
        module(*args)
        out.append((counter() - start) / 1e6)
    return out


def _cuda_clock(module: nn.Module, trial_inputs: list[tuple], device: torch.device) -> list[float]:
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in trial_inputs]
    for args, (start, end) in zip(trial_inputs, events):
        start.record()
        module(*args)
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) for start, end in events]
