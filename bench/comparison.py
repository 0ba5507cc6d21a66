"""The one comparison engine: is the difference between two measured figures more than noise?

Three places compare figures: the gate (a backend vs fp32 in one sweep), the baseline comparison
(`python -m bench.report DIR --baseline DIR`) and the nightly history (tonight vs last night, and
its trend page). They all ask this module, with tolerances and alpha from `conf/compare/` (`CompareConfig`).

Between two runs the engine judges what a run controls (`compare_metrics`):

- `speedup_change`: new / base of two paired speedups (each backend's ratio to fp32 timed in its own
  run), each with the interval its own run gave it (rounds and processes), their log half-widths
  added as independent variances. This is the run-vs-run speed verdict: a host that got slower
  between the runs slows fp32 and the backend alike, and the ratio does not move.
- the ΔAUC against fp32 (`difference_change`, both runs' paired intervals combined); fp32's own
  row, whose ΔAUC is 0 by definition, is judged on its AUC.
- absolute throughput, normalized by the machine probes each run records (`run_probe`: the
  reference GEMM and gather of `bench.measure.noise.reference_speed`, taken at the start and end of
  every job, the run's figure the median over them): the ratio of median throughputs, with a
  bootstrap interval over both runs' trials, times the ratio of the probes' times, the interval
  widened by how much the probe moved across each run's jobs. It is judged only when both runs'
  probes agree (each figure within `probe_tolerance`); otherwise it is shown and `not comparable`:
  "the machines' probes differ by X". It is fp32's only speed verdict (its speedup is 1 by definition).

A change is `better` or `worse` only when its whole (1 - alpha) interval clears the tolerance band
around "no change" (ratio 1 +- tolerance, difference 0 +- tolerance): separate runs differ by more
than the noise one run can see, and a move inside the tolerance is no verdict. Otherwise it is
`same`, or `not comparable` with the reason (a side is missing a value or its raw trials, the
probes differ, the machines differ). Only numpy, the standard library and `bench.stats`: pure functions.
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
    probe_tolerance: float


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
    # A normalized change (absolute throughput): the factor the raw ratio was multiplied by (the ratio of the
    # machine probes' times, new / base) and the raw ratio itself; None where nothing was normalized.
    factor: Optional[float] = None
    raw: Optional[float] = None

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


def clears(lo: float, hi: float, tolerance: float, null: float = 0.0) -> int:
    """+1 when the whole interval lies above null + tolerance, -1 when below null - tolerance, else 0."""
    return 1 if lo > null + tolerance else -1 if hi < null - tolerance else 0


def _judged(shown: str, lo: float, hi: float, tolerance: float, null: float, alpha: float, higher_is_better: bool,
            ratio_kind: bool) -> tuple[str, str]:
    """(verdict, reason) of an interval against the tolerance band around `null`."""
    side = clears(lo, hi, tolerance, null)
    band = f"{null:g} ± {tolerance:.0%}" if ratio_kind else f"{null:g} ± {tolerance:g}"
    if side:
        return _direction(side > 0, higher_is_better), f"{shown}: the {1 - alpha:.0%} interval clears {band}"
    if lo <= null <= hi:
        return SAME, f"{shown}: the interval holds {null:g}"
    return SAME, f"{shown}: it moved by no more than the tolerance (the interval reaches into {band})"


def ratio(new_samples: Sequence[float], base_samples: Sequence[float], *, alpha: float = 0.05) -> Figure:
    """median(new) / median(base) with the percentile-bootstrap (1 - alpha) interval (seeded)."""
    r, lo, hi = ratio_interval(new_samples, base_samples, alpha=alpha)
    return Figure(r, lo, hi, 1 - alpha)


def throughput_change(new_samples: Iterable[float], base_samples: Iterable[float], *, tolerance: float, alpha: float,
                      new_point: Any = None, base_point: Any = None, metric: str = THROUGHPUT,
                      higher_is_better: bool = True, factor: float = 1.0, factor_log_sd: float = 0.0) -> Change:
    """Ratio new / base of raw samples (per-trial throughputs); `*_point` only fill in the point
    shown when a side has no samples, which makes the change `not comparable`.

    `factor` normalizes the ratio (the machine probes' ratio, `probe_shift`), and `factor_log_sd`, the
    standard deviation of its log, widens the bootstrap's interval (added as an independent variance)."""
    new_s, base_s = samples(list(new_samples)), samples(list(base_samples))
    b, n = finite(base_point), finite(new_point)
    if not (new_s and base_s):
        side = " and ".join(s for s, t in (("base", base_s), ("new", new_s)) if not t)
        point = n / b if n is not None and b else None
        return Change(metric, RATIO, b, n, point, None, None, None, tolerance, NOT_COMPARABLE,
                      f"no per-trial {metric} on the {side} side: not judged")
    f = ratio(new_s, base_s, alpha=alpha)
    value, lo, hi = f.value * factor, f.lo * factor, f.hi * factor
    if factor_log_sd:
        half = math.hypot(math.log(f.hi / f.lo) / 2, NormalDist().inv_cdf(1 - alpha / 2) * factor_log_sd)
        lo, hi = value * math.exp(-half), value * math.exp(half)
    normalized = factor != 1.0 or factor_log_sd
    shown = f"{metric} {value:.2f}x [{lo:.2f}, {hi:.2f}]" + (f" (raw {f.value:.2f}x, normalized by the probes ×{factor:.3f})" if normalized else "")
    verdict, reason = _judged(shown, lo, hi, tolerance, 1.0, alpha, higher_is_better, ratio_kind=True)
    base_med = median(base_s) if b is None else b
    new_med = median(new_s) if n is None else n
    return Change(metric, RATIO, base_med, new_med, value, lo, hi, (hi - lo) / 2, tolerance, verdict, reason,
                  factor if normalized else None, f.value)


def difference_change(new: Figure, base: Figure, *, tolerance: float, alpha: float, metric: str = AUC,
                      higher_is_better: bool = True, digits: int = 4, independent: bool = False) -> Change:
    """new - base of two paired figures. The noise is the larger half-width of their intervals at 1 - alpha
    (the same samples behind both), or with `independent` both half-widths added as independent variances
    (two runs' paired ΔAUCs, each carrying its own run's uncertainty)."""
    if new.value is None or base.value is None:
        side = " and ".join(s for s, f in (("base", base), ("new", new)) if f.value is None)
        return Change(metric, DIFFERENCE, base.value, new.value, None, None, None, None, tolerance, NOT_COMPARABLE,
                      f"{metric} is missing on the {side} side")
    change = new.value - base.value
    widths = (new.half_width(alpha), base.half_width(alpha))
    noise = math.hypot(*widths) if independent else max(widths)
    shown = f"{metric} {change:+.{digits}f} (noise ±{noise:.{digits}f}, tolerance {tolerance:g})"
    verdict, reason = _judged(shown, change - noise, change + noise, tolerance, 0.0, alpha, higher_is_better, ratio_kind=False)
    return Change(metric, DIFFERENCE, base.value, new.value, change, change - noise, change + noise, noise,
                  tolerance, verdict, reason)


def speedup_change(new: Figure, base: Figure, *, tolerance: float, alpha: float, metric: str = SPEEDUP) -> Change:
    """new / base of two speedups from separate runs, each with its own interval (at its level): the
    interval of the ratio on the log scale, both runs' log half-widths added as independent variances."""
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
    verdict, reason = _judged(shown, lo, hi, tolerance, 1.0, alpha, True, ratio_kind=True)
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


def delta_figure(metrics: Mapping[str, Any]) -> Optional[Figure]:
    """A run's paired ΔAUC vs fp32 with its interval; None where it has none, or is fp32's own 0 [0, 0]."""
    f = Figure.of(metrics.get(AUC_DELTA), metrics.get(lo(AUC_DELTA)), metrics.get(hi(AUC_DELTA)))
    if f.value is None or f.interval is None or f.lo == f.hi:
        return None
    return f


def accuracy_change(new: Mapping[str, Any], base: Mapping[str, Any], cfg: Tolerances) -> Change:
    """The change of a backend's ΔAUC vs fp32 between two runs (what its quantization costs), both runs'
    paired intervals combined; where a side has no ΔAUC interval (fp32's own row, whose ΔAUC is 0 by
    definition, or a record without one), the change of its AUC, its noise the paired band."""
    deltas = [delta_figure(m) for m in (new, base)]
    if all(deltas):
        return difference_change(*deltas, tolerance=cfg.auc_tolerance, alpha=cfg.alpha, metric=AUC_DELTA, independent=True)
    return difference_change(auc_figure(new), auc_figure(base), tolerance=cfg.auc_tolerance, alpha=cfg.alpha)


# ------------------------------------------------------------------------------ machine probes

PROBES = ("gemm", "gather")  # bench.measure.noise.reference_speed's figures: `<probe>_<clock>_us`
PROBE_CLOCKS = ("cpu", "wall")


def machine_readings(metrics: Mapping[str, Any]) -> list[dict[str, float]]:
    """A record's reference readings (`machine.reference_start` / `reference_end`), each as a mapping of
    `<probe>_<clock>_us` figures; [] for a record without them."""
    machine = metrics.get("machine")
    if not isinstance(machine, Mapping):
        return []
    return [dict(r) for r in (machine.get("reference_start"), machine.get("reference_end")) if isinstance(r, Mapping)]


def run_probe(readings: Iterable[Mapping[str, Any]]) -> Optional[dict[str, float]]:
    """A run's machine probe from its jobs' reference readings: per probe and clock the median time (µs),
    and per clock `<clock>_log_sd`, the standard deviation of the log of a reading's geometric mean over
    both probes (how far the machine's own speed moved across the run's jobs). None without readings."""
    readings = list(readings)
    out: dict[str, float] = {}
    for clock in PROBE_CLOCKS:
        names = [f"{p}_{clock}_us" for p in PROBES]
        both = [[finite(r.get(n)) for n in names] for r in readings]
        both = [v for v in both if all(x is not None and x > 0 for x in v)]
        if not both:
            continue
        for i, name in enumerate(names):
            out[name] = median(v[i] for v in both)
        logs = [sum(math.log(x) for x in v) / len(v) for v in both]
        mean = sum(logs) / len(logs)
        out[f"{clock}_log_sd"] = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)) if len(logs) > 1 else 0.0
        out["readings"] = float(len(both))
    return out or None


def probe_clock(m: Mapping[str, Any]) -> str:
    """Which of the probes' clocks matches a row's timing: `cpu` for thread-CPU timings, else `wall`."""
    return "cpu" if "thread_cpu" in (timing_setting_text(m) or "") else "wall"


@dataclass(frozen=True)
class ProbeShift:
    """How the machine moved between two runs, by their probes."""

    factor: Optional[float]  # new / base of the probes' geometric-mean time: > 1 the new run's machine was slower
    log_sd: float  # the standard deviation of log(factor): both runs' spread over their jobs
    moves: str  # "GEMM +2%, gather -1%"
    why_not: Optional[str]  # why the absolute throughput is not judged (no probe, probes that differ), or None


def probe_shift(new: Any, base: Any, clock: str, tolerance: float) -> ProbeShift:
    """The machine probes of two runs (`run_probe`) at `clock`: their ratio, and whether they agree, each
    probe within `tolerance`."""
    names = [f"{p}_{clock}_us" for p in PROBES]
    sides = [m if isinstance(m, Mapping) and all(finite(m.get(n)) for n in names) else None for m in (new, base)]
    if not all(sides):
        side = " and ".join(s for s, m in (("new", sides[0]), ("base", sides[1])) if m is None)
        return ProbeShift(None, 0.0, "", f"no machine probe recorded on the {side} side")
    n, b = sides
    ratios = {p: finite(n[name]) / finite(b[name]) for p, name in zip(PROBES, names)}
    words = {p: "GEMM" if p == "gemm" else p for p in PROBES}
    moves = ", ".join(f"{words[p]} {r - 1:+.0%}" for p, r in ratios.items())
    factor = math.prod(ratios.values()) ** (1 / len(ratios))
    log_sd = math.hypot(*(finite(m.get(f"{clock}_log_sd")) or 0.0 for m in sides))
    worst, moved = max(ratios.items(), key=lambda kv: abs(math.log(kv[1])))
    if abs(moved - 1) > tolerance:
        return ProbeShift(factor, log_sd, moves, f"the machines' probes differ by {moved - 1:+.0%} "
                          f"({words[worst]}, more than {tolerance:.0%})")
    return ProbeShift(factor, log_sd, moves, None)


def normalized_throughput_change(new: Mapping[str, Any], base: Mapping[str, Any], cfg: Tolerances) -> Change:
    """Absolute throughput new / base, normalized by the runs' machine probes (`probe`, a `run_probe`),
    judged only when the probes agree (`probe_shift`). A change is never flagged within the measured
    noise: the tolerance grows to the larger trial-to-trial variation (CV) of the two runs, and a side
    whose timing was marked unstable is `not comparable`."""
    unstable = [f"{side} ({m.get('unstable_reason') or 'marked unstable'})" for side, m in (("base", base), ("new", new))
                if m.get("stable") is False]
    t, b = finite(new.get(THROUGHPUT)), finite(base.get(THROUGHPUT))
    if unstable:
        return Change(THROUGHPUT, RATIO, b, t, t / b if t is not None and b else None, None, None, None,
                      cfg.throughput_tolerance, NOT_COMPARABLE, f"not judged: timing too noisy on the {' and '.join(unstable)} side")
    noise_floor = max([cfg.throughput_tolerance, *(_trial_cv(m) for m in (new, base))])
    shift = probe_shift(new.get("probe"), base.get("probe"), probe_clock(new), cfg.probe_tolerance)
    device = new.get("device")
    if isinstance(device, str) and device != "cpu":  # the probes time the host's CPU, not the job's device
        shift = ProbeShift(None, 0.0, "", f"the machine probes time the host CPU, not the {device} device")
    if shift.why_not:
        point = t / b if t is not None and b else None
        return Change(THROUGHPUT, RATIO, b, t, point, None, None, None, noise_floor, NOT_COMPARABLE,
                      (f"{THROUGHPUT} {point:.2f}x raw: " if point is not None else "") + f"not judged: {shift.why_not}",
                      shift.factor, point)
    return throughput_change(new.get(THROUGHPUT_TRIALS) or [], base.get(THROUGHPUT_TRIALS) or [], tolerance=noise_floor,
                             alpha=cfg.alpha, new_point=t, base_point=b, factor=shift.factor, factor_log_sd=shift.log_sd)


def is_reference_speedup(f: Figure) -> bool:
    """fp32's own speedup: 1 by definition (absent, or 1 with no interval or [1, 1])."""
    return f.value is None or (f.value == 1.0 and f.interval in (None, (1.0, 1.0)))


def compare_metrics(new: Mapping[str, Any], base: Mapping[str, Any], cfg: Tolerances) -> dict[str, Change]:
    """What changed between two runs of one row (record metrics or history rows: `speedup` with its
    interval, `auc`, `auc_delta` with its interval, `throughput`, `throughput_trials`, the run's machine
    `probe`, and the timing noise flags `stable`, `unstable_reason`, `trial_cv` where recorded).

    SPEEDUP (the paired speedup's change: the row's speed verdict; absent for fp32, whose speedup is 1 by
    definition), AUC (the ΔAUC's change, or fp32's AUC's) and THROUGHPUT (normalized by the probes).
    """
    changes = {THROUGHPUT: normalized_throughput_change(new, base, cfg), AUC: accuracy_change(new, base, cfg)}
    speedups = [Figure.of(m.get(SPEEDUP), m.get(lo(SPEEDUP)), m.get(hi(SPEEDUP))) for m in (new, base)]
    if all(f.value is not None for f in speedups) and not all(is_reference_speedup(f) for f in speedups):
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


__all__ = ["SAME", "BETTER", "WORSE", "NOT_COMPARABLE", "RATIO", "DIFFERENCE", "Figure", "Change", "ProbeShift", "finite",
           "samples", "clears", "ratio", "throughput_change", "difference_change", "speedup_change", "auc_figure", "delta_figure",
           "accuracy_change", "machine_readings", "run_probe", "probe_clock", "probe_shift", "normalized_throughput_change",
           "is_reference_speedup", "compare_metrics", "identity", "timing_setting_text"]
