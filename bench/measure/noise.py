"""How steady was the absolute throughput? Load, steal and dispersion per job.

`LoadWatch` records the machine's load average and CPU steal over the timed window. `stability`
flags the absolute throughput: its trials varied more than `timing.max_trial_cv` between each
other, or the hypervisor stole more than 5% of the CPU time. That flag (`stable=false`, with the
reason in words) belongs to the samples/s figure only. A paired speedup is judged on its own
interval: variation common to both sides of a round cancels in the ratio, so a busy machine with
steady paired ratios still supports its speedup, and the trials' variation is reported beside it
(`noise.trial_cv`), not a veto on it. The paired ratios' spread is recorded too (`ratio_spread`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench import hardware
from bench.measure.timing import PairedTiming, Timing

MAX_STEAL = 0.05


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
