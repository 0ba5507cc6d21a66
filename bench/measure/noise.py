"""Is a timing figure stable enough to support what it says? Load, steal and dispersion per job.

`LoadWatch` records the machine's load average and CPU steal over the timed window. `stability`
then reads the figures that matter for the claim: the candidate's trial-to-trial variation
(coefficient of variation) and, for a paired speedup, how wide its interval over rounds is. A row
that fails either is `stable=false` with the reason in words; the report greys it, the gate reads
a speed rule on it as inconclusive, and comparisons do not flag changes within its noise.
Load and steal are recorded as context (a busy machine with steady paired ratios still supports
its speedup), and a steal share past 5% is a reason of its own: the hypervisor took the CPUs.
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


def stability(timing: Timing, paired: PairedTiming | None, load: dict[str, Any], max_trial_cv: float,
              max_ratio_spread: float) -> dict[str, Any]:
    """`stable`, the reasons when not, and the noise figures behind them."""
    figures = {**load, "trial_cv": timing.trial_cv}
    reasons = []
    if figures["trial_cv"] > max_trial_cv:
        reasons.append(f"throughput varied {figures['trial_cv']:.0%} between trials (limit {max_trial_cv:.0%})")
    if paired is not None:
        point, lo, hi = paired.speedup()
        figures["ratio_spread"] = (hi - lo) / point
        if figures["ratio_spread"] > max_ratio_spread:
            reasons.append(f"the paired speedup's 95% interval spans {figures['ratio_spread']:.0%} of it (limit {max_ratio_spread:.0%})")
    steal = figures.get("steal_share")
    if steal is not None and steal > MAX_STEAL:
        reasons.append(f"the hypervisor stole {steal:.0%} of CPU time while timing")
    return {"stable": not reasons, "unstable_reason": "; ".join(reasons) or None, "noise": figures}
