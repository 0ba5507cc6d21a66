"""The one comparison engine: is the difference between two measured figures more than noise?

Three places compare figures: the gate (a backend vs fp32 in one sweep), the baseline comparison
(`python -m bench.report DIR --baseline DIR`) and the nightly history (tonight vs last night).
They all ask this module, with tolerances and alpha from `conf/compare/` (`CompareConfig`):

- `throughput_change`: the ratio of median throughputs new / base, with a percentile-bootstrap
  interval over both runs' raw per-trial throughputs (`ratio_interval`);
- `difference_change`: new - base of two figures given as point + interval (an AUC with the
  interval of its paired ΔAUC vs fp32), the change's interval being the larger of the two
  half-widths (both are measured on the same eval samples, so the noise of their difference
  is that of one paired comparison, which each side's interval estimates);
- `speedup_change`: new / base of two paired speedups, each with the interval its own run gave
  it (rounds and processes), their log half-widths added as independent variances. A speedup is
  judged on its own interval, whatever the absolute throughput's flag says.

A change is `better` or `worse` only when its interval excludes "no change" AND it moved by
more than the tolerance: separate runs differ by more than the noise one run can see (trials
inside one process), so the interval alone would flag unchanged rows. Otherwise it is `same`,
or `not comparable` with the reason (a side is missing a value or its raw trials, the machines
differ). Only numpy, the standard library and `bench.stats`: pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist, median
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

from bench.metrics import AUC, AUC_DELTA, SPEEDUP, THROUGHPUT, THROUGHPUT_TRIALS, hi, lo
from bench.stats import ratio_interval

SAME, BETTER, WORSE, NOT_COMPARABLE = "same", "better", "worse", "not comparable"
RATIO, DIFFERENCE = "ratio", "difference"
LEVEL = 0.95  # the level of the intervals records store (ΔAUC CIs)


class Tolerances(Protocol):
    """What the engine reads of `bench.config.CompareConfig`."""

    auc_tolerance: float
    throughput_tolerance: float
    alpha: float


def finite(value: Any) -> Optional[float]:
    """A finite float from a record value or table cell, or None (absent, empty, NaN, inf, text, bool)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def samples(values: Any) -> list[float]:
    """The positive finite numbers of a raw-sample list (per-trial throughputs); [] when there are none."""
    if not isinstance(values, (list, tuple)):
        return []
    return [v for v in map(finite, values) if v is not None and v > 0]


@dataclass(frozen=True)
class Figure:
    """A measured figure: its point value and, where known, its interval at `level`."""

    value: Optional[float]
    lo: Optional[float] = None
    hi: Optional[float] = None
    level: float = LEVEL

    @classmethod
    def of(cls, value: Any, lo: Any = None, hi: Any = None, level: float = LEVEL) -> "Figure":
        """From raw cells; an interval with a missing bound is dropped, bounds are put in order."""
        v, a, b = finite(value), finite(lo), finite(hi)
        if a is None or b is None:
            return cls(v, None, None, level)
        return cls(v, min(a, b), max(a, b), level)

    @property
    def interval(self) -> Optional[tuple[float, float]]:
        return None if self.lo is None or self.hi is None else (self.lo, self.hi)

    def half_width(self, alpha: float) -> float:
        """Half the interval's width rescaled to a (1 - alpha) level; 0 without an interval."""
        if self.interval is None:
            return 0.0
        z = NormalDist().inv_cdf(1 - alpha / 2) / NormalDist().inv_cdf((1 + self.level) / 2)
        return (self.hi - self.lo) / 2 * z

    def scaled(self, factor: float, offset: float = 0.0) -> "Figure":
        """factor * figure + offset (a negative factor swaps the bounds)."""
        if self.value is None:
            return self
        f = lambda x: None if x is None else factor * x + offset + 0.0  # noqa: E731  (+ 0.0: no -0.0)
        return Figure.of(f(self.value), f(self.lo), f(self.hi), self.level)


@dataclass(frozen=True)
class Change:
    """The noise-aware difference of one metric between a base and a new measurement."""

    metric: str
    kind: str  # RATIO (new / base) or DIFFERENCE (new - base)
    base: Optional[float]
    new: Optional[float]
    value: Optional[float]  # the change
    lo: Optional[float]  # its (1 - alpha) interval
    hi: Optional[float]
    noise: Optional[float]  # half-width of that interval, in the change's units
    tolerance: float
    verdict: str  # same | better | worse | not comparable
    reason: str

    @property
    def flagged(self) -> bool:
        return self.verdict in (BETTER, WORSE)

    @property
    def moved(self) -> Optional[float]:
        """How far the change is from "no change": ratio - 1, or the difference."""
        if self.value is None:
            return None
        return self.value - 1.0 if self.kind == RATIO else self.value


def _direction(up: bool, higher_is_better: bool) -> str:
    return BETTER if up == higher_is_better else WORSE


def ratio(new_samples: Sequence[float], base_samples: Sequence[float], *, alpha: float = 0.05) -> Figure:
    """median(new) / median(base) with the percentile-bootstrap (1 - alpha) interval (seeded)."""
    r, lo, hi = ratio_interval(new_samples, base_samples, alpha=alpha)
    return Figure(r, lo, hi, 1 - alpha)


def throughput_change(new_samples: Iterable[float], base_samples: Iterable[float], *, tolerance: float, alpha: float,
                      new_point: Any = None, base_point: Any = None, metric: str = THROUGHPUT,
                      higher_is_better: bool = True) -> Change:
    """Ratio new / base of raw samples (per-trial throughputs); `*_point` only fill in the point
    shown when a side has no samples, which makes the change `not comparable`."""
    new_s, base_s = samples(list(new_samples)), samples(list(base_samples))
    b, n = finite(base_point), finite(new_point)
    if not (new_s and base_s):
        side = " and ".join(s for s, t in (("base", base_s), ("new", new_s)) if not t)
        point = n / b if n is not None and b else None
        return Change(metric, RATIO, b, n, point, None, None, None, tolerance, NOT_COMPARABLE,
                      f"no per-trial {metric} on the {side} side: not judged")
    f = ratio(new_s, base_s, alpha=alpha)
    noise = (f.hi - f.lo) / 2
    shown = f"{metric} {f.value:.2f}x [{f.lo:.2f}, {f.hi:.2f}]"
    outside = f.lo > 1.0 or f.hi < 1.0
    if outside and abs(f.value - 1.0) > tolerance:
        verdict = _direction(f.value > 1.0, higher_is_better)
        reason = f"{shown}: the {1 - alpha:.0%} interval excludes 1 and it moved by more than {tolerance:.0%}"
    else:
        verdict = SAME
        why = "the interval holds 1" if not outside else f"it moved by no more than {tolerance:.0%}"
        reason = f"{shown}: {why}"
    base_med = median(base_s) if b is None else b
    new_med = median(new_s) if n is None else n
    return Change(metric, RATIO, base_med, new_med, f.value, f.lo, f.hi, noise, tolerance, verdict, reason)


def difference_change(new: Figure, base: Figure, *, tolerance: float, alpha: float, metric: str = AUC,
                      higher_is_better: bool = True, digits: int = 4) -> Change:
    """new - base of two paired figures; noise is the larger half-width of their intervals at 1 - alpha."""
    if new.value is None or base.value is None:
        side = " and ".join(s for s, f in (("base", base), ("new", new)) if f.value is None)
        return Change(metric, DIFFERENCE, base.value, new.value, None, None, None, None, tolerance, NOT_COMPARABLE,
                      f"{metric} is missing on the {side} side")
    change = new.value - base.value
    noise = max(new.half_width(alpha), base.half_width(alpha))
    shown = f"{metric} {change:+.{digits}f} (noise ±{noise:.{digits}f}, tolerance {tolerance:g})"
    if abs(change) > noise and abs(change) > tolerance:
        verdict, reason = _direction(change > 0, higher_is_better), f"{shown}: beyond both"
    else:
        verdict, reason = SAME, f"{shown}: within " + ("the noise" if abs(change) <= noise else "the tolerance")
    return Change(metric, DIFFERENCE, base.value, new.value, change, change - noise, change + noise, noise,
                  tolerance, verdict, reason)


def speedup_change(new: Figure, base: Figure, *, tolerance: float, alpha: float, metric: str = SPEEDUP) -> Change:
    """new / base of two speedups from separate runs, each with its own interval (at its level)."""
    if new.value is None or base.value is None or new.interval is None or base.interval is None or min(
            new.value, base.value, new.lo, base.lo) <= 0:
        side = " and ".join(s for s, f in (("base", base), ("new", new)) if f.value is None or f.interval is None)
        point = new.value / base.value if new.value and base.value else None
        return Change(metric, RATIO, base.value, new.value, point, None, None, None, tolerance, NOT_COMPARABLE,
                      f"no {metric} interval on the {side or 'either'} side: not judged")
    z = NormalDist().inv_cdf(1 - alpha / 2)
    half = z * math.hypot(*(_log_sd(f) for f in (new, base)))
    change = new.value / base.value
    lo, hi = change * math.exp(-half), change * math.exp(half)
    shown = f"{metric} {base.value:.2f}x -> {new.value:.2f}x, ratio {change:.3f} [{lo:.3f}, {hi:.3f}]"
    outside = lo > 1.0 or hi < 1.0
    if outside and abs(change - 1.0) > tolerance:
        verdict = _direction(change > 1.0, True)
        reason = f"{shown}: the {1 - alpha:.0%} interval excludes 1 and it moved by more than {tolerance:.0%}"
    else:
        verdict = SAME
        reason = f"{shown}: " + ("the interval holds 1" if not outside else f"it moved by no more than {tolerance:.0%}")
    return Change(metric, RATIO, base.value, new.value, change, lo, hi, (hi - lo) / 2, tolerance, verdict, reason)


def _log_sd(f: Figure) -> float:
    """The standard deviation of log(figure) that its interval implies (normal on the log scale)."""
    return math.log(f.hi / f.lo) / 2 / NormalDist().inv_cdf((1 + f.level) / 2)


def auc_figure(metrics: Mapping[str, Any]) -> Figure:
    """A run's AUC, with the noise of its paired ΔAUC vs fp32 as its interval.

    The paired interval measures how far two closely related models' AUCs on these eval samples
    differ by chance, which is the noise of an AUC change between two runs of one backend.
    """
    auc, delta = finite(metrics.get(AUC)), finite(metrics.get(AUC_DELTA))
    band = Figure.of(delta, metrics.get(lo(AUC_DELTA)), metrics.get(hi(AUC_DELTA)))
    if auc is None or delta is None or band.interval is None:
        return Figure(auc)
    return Figure(auc, auc + band.lo - delta, auc + band.hi - delta, band.level)


def compare_metrics(new: Mapping[str, Any], base: Mapping[str, Any], cfg: Tolerances) -> dict[str, Change]:
    """Throughput and AUC changes between two runs' metrics (record metrics or history rows:
    `throughput`, `throughput_trials`, `auc`, `auc_delta`, `auc_delta_lo`, `auc_delta_hi`, and the
    timing noise flags `stable`, `unstable_reason`, `trial_cv` where recorded).

    A throughput change is never flagged within the measured noise: the tolerance grows to the
    larger trial-to-trial variation (CV) of the two runs, and a side whose timing was marked
    unstable makes the throughput change `not comparable`.
    """
    unstable = [f"{side} ({m.get('unstable_reason') or 'marked unstable'})" for side, m in (("base", base), ("new", new))
                if m.get("stable") is False]
    if unstable:
        t, b = finite(new.get(THROUGHPUT)), finite(base.get(THROUGHPUT))
        throughput = Change(THROUGHPUT, RATIO, b, t, t / b if t is not None and b else None, None, None, None,
                            cfg.throughput_tolerance, NOT_COMPARABLE, f"timing too noisy on the {' and '.join(unstable)} side: not judged")
    else:
        noise_floor = max([cfg.throughput_tolerance, *(_trial_cv(m) for m in (new, base))])
        throughput = throughput_change(new.get(THROUGHPUT_TRIALS) or [], base.get(THROUGHPUT_TRIALS) or [],
                                       tolerance=noise_floor, alpha=cfg.alpha,
                                       new_point=new.get(THROUGHPUT), base_point=base.get(THROUGHPUT))
    changes = {
        THROUGHPUT: throughput,
        AUC: difference_change(auc_figure(new), auc_figure(base), tolerance=cfg.auc_tolerance, alpha=cfg.alpha),
    }
    speedups = [Figure.of(m.get(SPEEDUP), m.get(lo(SPEEDUP)), m.get(hi(SPEEDUP))) for m in (new, base)]
    if all(f.value is not None for f in speedups) and not all(f.value == 1.0 and f.interval in (None, (1.0, 1.0)) for f in speedups):
        changes[SPEEDUP] = speedup_change(*speedups, tolerance=cfg.throughput_tolerance, alpha=cfg.alpha)
    return changes


def _trial_cv(m: Mapping[str, Any]) -> float:
    """A run's trial-to-trial variation: top level in history rows, under `noise` in record metrics."""
    return finite(m.get("trial_cv")) or finite((m.get("noise") or {}).get("trial_cv")) or 0.0


def identity(new: Mapping[str, Any], base: Mapping[str, Any]) -> tuple[Optional[str], list[str]]:
    """(why the two runs are not comparable, or None; notes) from `fingerprint`, the timing setting
    and `config_hash`.

    Different machines are never compared, nor timings taken with different settings (thread
    count, clock: `timing_setting`); a side that does not record its setting is compared with a
    note. A different config hash is compared with a note: the hash covers settings that may not
    change the measurement, and the note keeps it visible.
    """
    fp_b, fp_n = (x if _text(x) else None for x in (base.get("fingerprint"), new.get("fingerprint")))
    if fp_b != fp_n:  # one side unknown counts as different: never compare silently
        return f"machine differs (fingerprint {fp_b} -> {fp_n}): not compared", []
    set_b, set_n = (timing_setting_text(m) for m in (base, new))
    if set_b and set_n and set_b != set_n:
        return f"timing setting differs ({set_b} -> {set_n}): not compared", []
    unknown = [f"timing setting not recorded on the {side} side" for side, t in (("base", set_b), ("new", set_n)) if not t]
    h_b, h_n = base.get("config_hash"), new.get("config_hash")
    notes = [f"config hash {h_b} -> {h_n}"] if _text(h_b) and _text(h_n) and h_b != h_n else []
    return None, notes + (unknown if len(unknown) == 1 else [])


def timing_setting_text(m: Mapping[str, Any]) -> Optional[str]:
    """`1 thread, thread_cpu clock`: from record metrics (`timing_setting` as a mapping) or a history
    line (the same text); None when the run did not record it."""
    setting = m.get("timing_setting")
    if _text(setting):
        return setting
    if not isinstance(setting, Mapping) or setting.get("threads") is None:
        return None
    threads = setting["threads"]
    return f"{threads} thread{'s' if threads != 1 else ''}, {setting.get('clock', 'wall')} clock"


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


__all__ = ["SAME", "BETTER", "WORSE", "NOT_COMPARABLE", "RATIO", "DIFFERENCE", "Figure", "Change", "finite", "samples",
           "ratio", "throughput_change", "difference_change", "speedup_change", "auc_figure", "compare_metrics", "identity",
           "timing_setting_text"]
