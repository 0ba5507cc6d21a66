"""Throughput and latency of a module over prepared batches, alone or paired with a reference.

The timed region holds only the model call: batches are built and moved to the device before
timing starts. Warm-up first, then several trials; every per-batch latency is kept so a report can
recompute any statistic. The job's device reads the clock (bench.devices: `Device.call_timer`). On CPU
it is wall time, or with `timing.clock=thread_cpu` the CPU time of the calling thread (one thread only):
on a machine shared with other work it leaves out the time spent waiting for a core. On CUDA, CUDA
events bracket each call and the trial synchronises once.

Fresh data: calls walk through the distinct timing batches in order across trials (they never
restart at the first batch), so with enough distinct batches no timed call replays ids whose rows
are still in cache from the call before; `Timing.calls_per_batch` says how often each was reused.
Every call gets a KJT of its own, built before the clock starts (`bench.batch.fresh_inputs`): a
replayed KJT carries what the last call computed from it, which a request does not.

Paired timing (`time_paired`): the speedup of a candidate over a reference (fp32) is measured in
the same process and time window, in rounds that alternate the order (ABBA: ref-cand, cand-ref,
...). Both sides of a round run over the same batches, and each side takes the second place in
half the rounds, so neither gains from the other's warm caches on average. The speedup is the
median of per-round ratios: background load that changes between rounds hits both sides of each
ratio alike. Its interval adds two variances on the log scale: the median's over rounds (bootstrap)
and `process_sd`, the spread that separate processes add on top (measured once per machine,
`bench.pipeline.calibrate`), so it is a claim about what a re-run would measure. The number of
rounds adapts: past the minimum (`trials`), rounds go on until the interval is as narrow as asked
(`target_spread`), or until the rounds' own share is no larger than `process_sd`'s (more rounds
could not narrow it much), or until it decides what the job is judged on (the verdict against the
practical margin, and any speed threshold), or `max_rounds` are done.

The clock is injectable (`clock`: nanoseconds, `time.perf_counter_ns` by default), so the logic is
tested without timing anything.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from bench import devices
from bench.batch import fresh_inputs
from bench.devices import Device
from bench.stats import Quantile, RatioInterval, log_median_interval, log_se, quantile_interval

Clock = Callable[[], int]  # nanoseconds
# The timing config's keys that drive the loop (`pool_samples` chose the inputs: the caller's business).
LOOP_KEYS = ("warmup_batches", "trials", "batches_per_trial", "min_trial_seconds", "target_spread", "max_rounds", "test_delay")
CLOCKS = {"wall": time.perf_counter_ns, "thread_cpu": time.thread_time_ns}


def loop_options(timing_cfg, device_cfg=None) -> dict:
    """The loop's keyword arguments from a TimingConfig, `timing.clock` turned into the clock it names
    (an `auto` clock that nothing resolved is the wall clock), and the job's device (`device_cfg`: its
    `device` config; by default, the device of the torch device the calls run on) that reads the clock."""
    job_device = {"job_device": devices.get(device_cfg)} if device_cfg is not None else {}
    return {**{key: getattr(timing_cfg, key) for key in LOOP_KEYS}, "clock": CLOCKS.get(timing_cfg.clock, time.perf_counter_ns), **job_device}


@dataclass
class Timing:
    batch_size: int
    latency_ms: list[list[float]]  # [trial][batch]: the raw samples
    distinct_batches: int = 0  # distinct timing batches the calls walked through

    @property
    def trial_throughput(self) -> list[float]:
        """Samples per second in each trial: samples timed / time in the model calls."""
        return [self.batch_size * len(t) / (sum(t) / 1e3) for t in self.latency_ms]

    @property
    def throughput(self) -> float:
        return float(np.median(self.trial_throughput))

    @property
    def timed_calls(self) -> int:
        return sum(len(t) for t in self.latency_ms)

    @property
    def calls_per_batch(self) -> float:
        """How often each distinct batch was timed on average (1.0: every timed call saw fresh data)."""
        return self.timed_calls / self.distinct_batches if self.distinct_batches else math.nan

    @property
    def trial_cv(self) -> float:
        """Coefficient of variation of the trial throughputs (std / mean)."""
        t = np.asarray(self.trial_throughput)
        return float(t.std(ddof=1) / t.mean()) if t.size > 1 else 0.0

    def throughput_interval(self, process_sd: float = 0.0, alpha: float = 0.05, process_df: float | None = None) -> RatioInterval:
        """The median trial throughput with its interval over trials, widened by `process_sd` (log scale)."""
        return log_median_interval(self.trial_throughput, process_sd, alpha, process_df)

    def latency_percentiles(self) -> dict[str, float]:
        """p50, p90, p99 of every timed call, and the p99's distribution-free interval (ms)."""
        flat = np.concatenate([np.asarray(t) for t in self.latency_ms])
        out = {f"p{q}": float(np.percentile(flat, q)) for q in (50, 90, 99)}
        tail = self.latency_tail()
        return {**out, "p99_lo": tail.lo, "p99_hi": tail.hi}

    def latency_tail(self, q: float = 0.99) -> Quantile:
        """The q-quantile of every timed call with its interval, the number of calls, and how many make the tail."""
        return quantile_interval(np.concatenate([np.asarray(t) for t in self.latency_ms]), q)


@dataclass
class PairedTiming:
    """Rounds of reference and candidate halves over the same batches, alternating order."""

    candidate: Timing  # one trial per round
    reference: Timing
    first: list[str]  # per round, which side ran first ("reference" or "candidate")
    # Why the rounds stopped: "fixed" (trials rounds), "target" (the interval narrowed to the target
    # spread), "process" (the rounds' share of the interval is small beside the between-process
    # spread: more rounds could not narrow it much), "decided" (the interval decides the verdict and
    # every speed threshold the job is judged on), or "max_rounds" (none of these happened).
    stopped: str = "fixed"
    process_sd: float = 0.0  # the between-process standard deviation of log(speedup) the interval carries
    process_df: float | None = None  # the degrees of freedom behind process_sd (None: taken as known)
    second: "PairedTiming | None" = None  # the same calls read on a second clock (`time_paired(second_clock=)`)

    @property
    def ratios(self) -> list[float]:
        """Per-round candidate / reference throughput."""
        return [c / r for c, r in zip(self.candidate.trial_throughput, self.reference.trial_throughput)]

    @property
    def round_se(self) -> float:
        """The rounds' standard error of log(speedup): the part of the interval more rounds can shrink."""
        return log_se(self.ratios)

    def speedup(self, alpha: float = 0.05) -> tuple[float, float, float]:
        """Median per-round ratio with its (1 - alpha) interval over rounds and processes."""
        return log_median_interval(self.ratios, self.process_sd, alpha, self.process_df)

    @property
    def spread(self) -> float:
        """Width of the speedup's 95% interval as a share of the speedup."""
        point, lo, hi = self.speedup()
        return (hi - lo) / point


class _Calls:
    """The next `n` timing inputs, continuing where the last call stopped (fresh data across trials)."""

    def __init__(self, inputs: Sequence[tuple]) -> None:
        if not inputs:
            raise ValueError("no timing batches")
        self.inputs, self.next = inputs, 0

    def positions(self, n: int) -> list[int]:
        out = [(self.next + j) % len(self.inputs) for j in range(n)]
        self.next = (self.next + n) % len(self.inputs)
        return out

    def take(self, n: int) -> list[tuple]:
        return [self.inputs[i] for i in self.positions(n)]


@contextmanager
def _timed_region():
    """Inference mode, with Python's automatic garbage collection off (as `timeit` does): a collection
    that happens to fall inside a timed call is the collector's time, not the model's."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.inference_mode():
            yield
    finally:
        if enabled:
            gc.enable()


def _clock_fn(device: torch.device, clock: Clock | str, test_delay: float = 0.0, second: Clock | None = None,
              job_device: Device | None = None):
    """`timed(module, inputs, device) -> ms per call`, read by the job's device (`job_device`; by default the torch
    device's); with `second` (CPU only), (ms, ms on `second`) per call."""
    clock = CLOCKS[clock] if isinstance(clock, str) else clock  # a name: timing.clock's
    return (job_device or devices.of(device)).call_timer(clock, test_delay, second)


def _calls_per_trial(warm_ms: list[float], batches_per_trial: int, min_trial_seconds: float) -> int:
    per_call_s = float(np.median(warm_ms)) / 1e3
    return max(batches_per_trial, math.ceil(min_trial_seconds / per_call_s) if per_call_s > 0 else 0)


def time_module(
    module: nn.Module,
    inputs: Sequence[tuple],
    batch_size: int,
    device: torch.device,
    warmup_batches: int,
    trials: int,
    batches_per_trial: int,
    min_trial_seconds: float = 0.0,
    clock: Clock = time.perf_counter_ns,
    agree_calls: Callable[[int], int] | None = None,
    test_delay: float = 0.0,
    job_device: Device | None = None,
    **_unused,
) -> Timing:
    """Call `module(*inputs[i])` in trials; `inputs` already live on `device`.

    Each trial makes at least `batches_per_trial` calls, and more when the warm-up says that
    many would take less than `min_trial_seconds`, walking on through `inputs`. `agree_calls` turns
    this process's count into the one every rank of a sharded job uses (their calls meet in collectives).
    """
    calls, timed = _Calls(inputs), _clock_fn(device, clock, test_delay, job_device=job_device)
    with _timed_region():
        warm = timed(module, calls.take(max(1, warmup_batches)), device)
        n = _calls_per_trial(warm, batches_per_trial, min_trial_seconds)
        if agree_calls is not None:
            n = agree_calls(n)
        latency = [timed(module, calls.take(n), device) for _ in range(trials)]
    return Timing(batch_size=batch_size, latency_ms=latency, distinct_batches=len(inputs))


def time_paired(
    candidate: nn.Module,
    reference: nn.Module,
    inputs: Sequence[tuple],
    batch_size: int,
    device: torch.device,
    warmup_batches: int,
    trials: int,
    batches_per_trial: int,
    min_trial_seconds: float = 0.0,
    clock: Clock = time.perf_counter_ns,
    target_spread: float = 0.05,
    max_rounds: int = 0,
    test_delay: float = 0.0,
    process_sd: float = 0.0,
    process_df: float | None = None,
    second_clock: Clock | None = None,
    decided: Callable[[float, float], bool] | None = None,
    candidate_inputs: Sequence[tuple] | None = None,
    job_device: Device | None = None,
    **_unused,
) -> PairedTiming:
    """At least `trials` rounds; in each, both modules run the same next batches, in ABBA order.

    Each half starts with one untimed call (on a batch of its own, the same for both sides): the
    first call after the other model ran pays for refilling the caches, a cost a model serving
    alone does not have, and one that would pull short halves' ratios towards 1. The number of
    timed calls per half is sized from the slower side's warm-up, so every half lasts at least
    `min_trial_seconds`. With `max_rounds` above `trials`, rounds go on two at a time
    (as many of each order) until the speedup's interval (rounds and `process_sd`) spans at most
    `target_spread` of it, or the rounds' standard error has fallen to `process_sd` (the rounds'
    share of the interval's variance is at most half: more rounds could narrow it by at most 30%),
    or `decided(lo, hi)` says the interval already decides what the job is judged on.
    `second_clock` (the timing calibration's): the same calls read on a second clock too, as `.second`.
    `candidate_inputs`: the same batches in the candidate's own input format (`Backend.timed_inputs`),
    position for position; by default the candidate takes `inputs` as the reference does.
    """
    if candidate_inputs is not None and len(candidate_inputs) != len(inputs):
        raise ValueError(f"{len(candidate_inputs)} candidate inputs for {len(inputs)} timing batches")
    calls, timed = _Calls(inputs), _clock_fn(device, clock, test_delay, second_clock, job_device)
    sides = {"candidate": candidate, "reference": reference}
    side_inputs = {"candidate": candidate_inputs or inputs, "reference": inputs}

    def of(side: str, positions: list[int]) -> list[tuple]:
        return [side_inputs[side][i] for i in positions]

    def untimed(module: nn.Module, batches: list[tuple]) -> None:
        for args in batches:
            module(*fresh_inputs(args))

    lat: dict[str, list[list[float]]] = {"candidate": [], "reference": []}
    lat2: dict[str, list[list[float]]] = {"candidate": [], "reference": []}  # the same halves on second_clock
    first: list[str] = []

    def time_half(side: str, batches: list[tuple], keep: bool = True) -> list[float]:
        ms = timed(sides[side], batches, device)
        if second_clock is None:
            return ms
        if keep:
            lat2[side].append([b for _, b in ms])
        return [a for a, _ in ms]

    def paired(halves: dict[str, list[list[float]]]) -> PairedTiming:
        return PairedTiming(Timing(batch_size, halves["candidate"], len(inputs)),
                            Timing(batch_size, halves["reference"], len(inputs)), first, process_sd=process_sd,
                            process_df=process_df)

    with _timed_region():
        warm_batches = calls.positions(max(1, warmup_batches))
        warm = [time_half(side, of(side, warm_batches), keep=False) for side in sides]
        n = max(_calls_per_trial(w, batches_per_trial, min_trial_seconds) for w in warm)
        while True:
            r = len(first)
            order = ("reference", "candidate") if r % 4 in (0, 3) else ("candidate", "reference")  # ABBA
            settle, batch_window = calls.positions(1), calls.positions(n)
            for side in order:
                untimed(sides[side], of(side, settle))  # the switch from the other model's caches is not the model's speed
                lat[side].append(time_half(side, of(side, batch_window)))
            first.append(order[0])
            result = paired(lat)
            if second_clock is not None:
                result.second = paired(lat2)
            if len(first) < trials:
                continue
            if max_rounds <= trials:
                return result
            if len(first) % 2 == 0:  # the interval is looked at after whole ABBA pairs: as many rounds of each order
                point, lo, hi = result.speedup()
                if (hi - lo) / point <= target_spread:
                    result.stopped = "target"
                    return result
                if process_sd > 0 and result.round_se <= process_sd:
                    result.stopped = "process"
                    return result
                if decided is not None and decided(lo, hi):
                    result.stopped = "decided"
                    return result
            if len(first) >= max_rounds:
                result.stopped = "max_rounds"
                return result
