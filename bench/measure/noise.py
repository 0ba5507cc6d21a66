"""How steady was the absolute throughput? Load, steal and dispersion per job.

`LoadWatch` records the machine's load average and CPU steal over the timed window. `stability`
flags the absolute throughput: its trials varied more than `timing.max_trial_cv` between each
other, or the hypervisor stole more than 5% of the CPU time. That flag (`stable=false`, with the
reason in words) belongs to the samples/s figure only. A paired speedup is judged on its own
interval: variation common to both sides of a round cancels in the ratio, so a busy machine with
steady paired ratios still supports its speedup, and the trials' variation is reported beside it
(`noise.trial_cv`), not a veto on it. The paired ratios' spread is recorded too (`ratio_spread`).

`reference_speed` times one fixed fp32 GEMM and one fixed gather of random rows from a table larger
than the caches, each on one thread: the machine's own speed at that moment (its cores, its memory),
independent of any backend. A job that takes it at its start and end (the serving jobs do) lets a
reader tell a backend that got slower from a machine that did, between the jobs of one sweep and
between runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from bench import hardware
from bench.config.schema import MAX_STEAL
from bench.measure.timing import PairedTiming, Timing

REFERENCE_GEMM = (256, 512, 512)  # M, K, N: about 0.13 GFLOP, a few ms on one core
REFERENCE_GATHER = (262_144, 64, 16_384)  # table rows, row width (fp32: a 64 MiB table, past the caches), rows gathered
REFERENCE_CALLS = 9


@dataclass
class LoadWatch:
    """Load average and steal over a `with` block."""

    figures: dict[str, Any] = field(default_factory=dict)

    def __enter__(self) -> "LoadWatch":
        self._ticks = hardware.cpu_ticks()
        self.figures["load_start"] = hardware.load_average()
        return self

    def __exit__(self, *exc) -> None:
        self.figures["load_end"] = hardware.load_average()
        self.figures["cpus"] = hardware.cpu_count()
        end = hardware.cpu_ticks()
        if self._ticks and end and end[1] > self._ticks[1]:
            self.figures["steal_share"] = (end[0] - self._ticks[0]) / (end[1] - self._ticks[1])


def stability(timing: Timing, paired: PairedTiming | None, load: dict[str, Any], max_trial_cv: float) -> dict[str, Any]:
    """`stable` (the absolute throughput's flag), the reasons when not, and the noise figures behind them."""
    figures = {**load, "trial_cv": timing.trial_cv}
    reasons = []
    if figures["trial_cv"] > max_trial_cv:
        reasons.append(f"throughput varied {figures['trial_cv']:.0%} between trials (limit {max_trial_cv:.0%})")
    if paired is not None:
        point, lo, hi = paired.speedup()
        figures["ratio_spread"] = (hi - lo) / point
    steal = figures.get("steal_share")
    if steal is not None and steal > MAX_STEAL:
        reasons.append(f"the hypervisor stole {steal:.0%} of CPU time while timing")
    return {"stable": not reasons, "unstable_reason": "; ".join(reasons) or None, "noise": figures}


def reference_speed(calls: int = REFERENCE_CALLS) -> dict[str, float]:
    """Median wall and thread-CPU times (µs) of a fixed fp32 GEMM and a fixed gather, one thread, after one untimed call each.

    Wall time also counts the time the thread waited for a core; CPU time counts only its own work (a
    slower clock, a busy sibling hyperthread or a neighbour's memory traffic still show in it). Fixed
    inputs, so only the machine moves.
    """
    g = torch.Generator().manual_seed(0)
    m, k, n = REFERENCE_GEMM
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    rows, width, gathered = REFERENCE_GATHER
    table, ids = torch.rand(rows, width, generator=g), torch.randint(0, rows, (gathered,), generator=g)
    out: dict[str, float] = {}
    with hardware.timing_threads(1), torch.inference_mode():
        for name, call in (("gemm", lambda: torch.mm(a, b)), ("gather", lambda: table.index_select(0, ids))):
            call()
            wall, cpu = [], []
            for _ in range(calls):
                w, c = time.perf_counter_ns(), time.thread_time_ns()
                call()
                cpu.append(time.thread_time_ns() - c)
                wall.append(time.perf_counter_ns() - w)
            out[f"{name}_wall_us"], out[f"{name}_cpu_us"] = sorted(wall)[calls // 2] / 1000, sorted(cpu)[calls // 2] / 1000
    return out
