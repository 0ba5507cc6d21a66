"""Compare a sweep with a baseline sweep, row by row, with the comparison engine (`bench.comparison`).

Rows join on (workload, device, backend, sharding, world_size, batch_size), the newest record per key on each side.
A row whose machine fingerprint differs is marked "machine differs" and not judged. Otherwise
the engine judges what a run controls, with the tolerances and alpha of `conf/compare/` (`CompareConfig`):

- speed: the change of the backend's paired speedup (its ratio to fp32 timed in the same run), new /
  base, with both runs' intervals combined on the log scale; `slower` / `faster` when that whole
  interval clears 1 ± `throughput_tolerance`. fp32's speedup is 1 by definition: it has no such verdict;
- accuracy: the change of the backend's ΔAUC against fp32 (fp32's row: of its AUC), both runs' paired
  intervals combined; `auc lower` / `auc higher` when the whole interval clears ± `auc_tolerance`;
- absolute samples/s, normalized by the machine probes each run records (the reference GEMM and gather
  at the start and end of every job, `bench.comparison.run_probe`): judged (`samples/s lower` /
  `samples/s higher`) only when both runs' probes agree within `probe_tolerance`, else shown with "not
  judged: the machines' probes differ by X". It is fp32's speed verdict.

Runs timed with different timing settings (threads, clock) are marked, not compared. A differing config
hash is noted but still compared (the hash may cover settings that do not change the measurement); a
change of status (ok -> error) is its own verdict. Only judged verdicts are set in bold.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Optional

import pandas as pd

from bench.comparison import (
    BETTER,
    NOT_COMPARABLE,
    WORSE,
    Change,
    Tolerances,
    compare_metrics,
    finite,
    identity,
    machine_readings,
    probe_clock,
    probe_shift,
    run_probe,
)
from bench.config import CompareConfig
from bench.io import write_text_atomic
from bench.metrics import AUC, AUC_DELTA, SPEEDUP, SPEEDUP_PROCESS_SD, THROUGHPUT, hi, lo
from bench.record import RunRecord
from bench.registry import BASELINE_BACKEND
from bench.report import fmt
from bench.results.key import KEY, row_label, sort_key
from bench.results.table import latest_records

COLUMNS = [*KEY, "verdict", "notes", "status_base", "status_new",
           "speedup_base", "speedup_base_lo", "speedup_base_hi", "speedup_new", "speedup_new_lo", "speedup_new_hi",
           "speedup_change", "speedup_change_lo", "speedup_change_hi",
           "throughput_base", "throughput_new", "throughput_ratio", "throughput_normalized", "throughput_normalized_lo",
           "throughput_normalized_hi", "throughput_judged", "throughput_note",
           "auc_base", "auc_new", "auc_delta_base", "auc_delta_new", "auc_compared", "auc_change", "auc_change_lo", "auc_change_hi",
           "fingerprint_base", "fingerprint_new", "comparable"]  # fmt: skip

# Verdicts the engine judged, in summary order: the only ones set in bold.
FLAGS = ("slower", "faster", "samples/s lower", "samples/s higher", "auc lower", "auc higher", "status changed")
# Rows not judged, and why.
NOT_JUDGED = ("machine differs", "timing differs", "missing", "new")
_WORDS = {(SPEEDUP, WORSE): "slower", (SPEEDUP, BETTER): "faster",
          (THROUGHPUT, WORSE): "samples/s lower", (THROUGHPUT, BETTER): "samples/s higher",
          (AUC, WORSE): "auc lower", (AUC, BETTER): "auc higher"}  # fmt: skip


def _m(r: RunRecord | None, name: str) -> float:
    if r is None or r.status != "ok":
        return math.nan
    x = finite((r.metrics or {}).get(name))
    return math.nan if x is None else x


def side_probe(records: Iterable[RunRecord]) -> Optional[dict[str, float]]:
    """One side's machine probe: the median over its records' reference readings (`bench.comparison.run_probe`)."""
    return run_probe(reading for r in records if r.status == "ok" for reading in machine_readings(r.metrics or {}))


def _view(r: RunRecord, probe: Optional[dict[str, float]]) -> dict[str, Any]:
    """What the engine reads of a record: its metrics, its identity and its run's machine probe."""
    return {**(r.metrics or {}), "fingerprint": (r.env or {}).get("fingerprint"), "config_hash": r.config_hash, "probe": probe,
            "device": r.device}


def _nan(x: Optional[float]) -> float:
    return math.nan if x is None else x


def _one_process(views: tuple[dict, dict]) -> str | None:
    """A note where a side's speedup interval covers one process's rounds only (no between-process spread
    carried in: `timing.calibrate=false`, as `+preset=tiny` runs): a re-run may differ by more."""
    sides = [side for side, v in zip(("new", "base"), views) if finite(v.get(SPEEDUP)) is not None and finite(v.get(SPEEDUP_PROCESS_SD)) is None]
    if not sides:
        return None
    return (f"the {' and '.join(sides)} speedup interval{'s' if len(sides) > 1 else ''} cover{'' if len(sides) > 1 else 's'} "
            "one process's rounds (timing.calibrate=false): a re-run may differ by more")


def _judge(changes: dict[str, Change], row: dict[str, Any]) -> list[str]:
    t, a = changes[THROUGHPUT], changes[AUC]
    row.update(throughput_ratio=_nan(t.raw if t.raw is not None else t.value), throughput_judged=t.verdict != NOT_COMPARABLE,
               throughput_note=t.reason,
               auc_compared="ΔAUC" if a.metric == AUC_DELTA else "AUC",
               auc_change=_nan(a.value), auc_change_lo=_nan(a.lo), auc_change_hi=_nan(a.hi))
    if t.verdict != NOT_COMPARABLE:
        row.update(throughput_normalized=_nan(t.value), throughput_normalized_lo=_nan(t.lo), throughput_normalized_hi=_nan(t.hi))
    judged = [(THROUGHPUT, t), (AUC, a)]
    if SPEEDUP in changes:
        s = changes[SPEEDUP]
        row.update(speedup_change=_nan(s.value), speedup_change_lo=_nan(s.lo), speedup_change_hi=_nan(s.hi))
        judged.insert(0, (SPEEDUP, s))
    for metric, c in judged:
        if c.verdict == NOT_COMPARABLE and metric != THROUGHPUT:  # samples/s says why in its own cell
            row["notes"].append(c.reason)
    return [_WORDS[(metric, c.verdict)] for metric, c in judged if c.flagged]


def compare_table(
    records: Iterable[RunRecord | dict[str, Any]],
    baseline: Iterable[RunRecord | dict[str, Any]],
    cfg: Optional[Tolerances] = None,
) -> pd.DataFrame:
    """One row per key present on either side, with a verdict (`same` when nothing is flagged).

    `cfg`: the tolerances and alpha (`CompareConfig`; default: its schema defaults, which
    `conf/compare/default.yaml` repeats). The two sides' machine probes are in `df.attrs["probes"]`.
    """
    cfg = cfg or CompareConfig()
    new_by_key, base_by_key = latest_records(records), latest_records(baseline)
    probes = {"new": side_probe(new_by_key.values()), "base": side_probe(base_by_key.values())}
    keys = sorted(set(new_by_key) | set(base_by_key), key=sort_key)
    rows = []
    for k in keys:
        new, base = new_by_key.get(k), base_by_key.get(k)
        row: dict[str, Any] = {c: math.nan for c in COLUMNS}
        row.update(dict(zip(KEY, k)))
        row.update(
            notes=[],
            status_base=base.status if base else None,
            status_new=new.status if new else None,
            throughput_judged=False,
            throughput_note="",
            auc_compared="",
            fingerprint_base=None if base is None else (base.env or {}).get("fingerprint"),
            fingerprint_new=None if new is None else (new.env or {}).get("fingerprint"),
            comparable=False,
        )
        for side, r in (("base", base), ("new", new)):
            row.update({f"throughput_{side}": _m(r, THROUGHPUT), f"auc_{side}": _m(r, AUC), f"auc_delta_{side}": _m(r, AUC_DELTA),
                        f"speedup_{side}": _m(r, SPEEDUP), f"speedup_{side}_lo": _m(r, lo(SPEEDUP)), f"speedup_{side}_hi": _m(r, hi(SPEEDUP))})
        views = None if base is None or new is None else (_view(new, probes["new"]), _view(base, probes["base"]))
        refused, notes = (None, []) if views is None else identity(*views)
        if views is None:
            verdicts = ["new" if base is None else "missing"]
        elif refused:
            verdicts = ["machine differs" if refused.startswith("machine") else "timing differs"]
            row["notes"].append(refused)
        elif base.status != "ok" or new.status != "ok":
            verdicts = ["status changed"] if base.status != new.status else [f"still {new.status}"]
        else:
            row["comparable"] = True
            row["notes"] += notes
            verdicts = _judge(compare_metrics(*views, cfg), row)
            if row["backend"] != BASELINE_BACKEND and _one_process(views):
                row["notes"].append(_one_process(views))
        row["verdict"] = ", ".join(verdicts) or "same"
        row["notes"] = "; ".join(row["notes"])
        rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["probes"] = probes
    return df


def flagged(df: pd.DataFrame, verdict: str) -> pd.DataFrame:
    return df[df["verdict"].str.split(", ").map(lambda vs: verdict in vs)]


def nothing_compared(df: pd.DataFrame) -> str | None:
    """Why a comparison compared no row (each side's rows had no partner, or none was comparable), or
    None when at least one row was compared."""
    if int(df["comparable"].sum()):
        return None
    counts = df["verdict"].value_counts()
    missing, new = int(counts.get("missing", 0)), int(counts.get("new", 0))
    if len(df) and missing + new == len(df):
        return (f"0 of {len(df)} rows compared: no workload, device, backend and batch size is on both sides ({missing} only "
                f"in the baseline, {new} only in the new run): compare runs of the same sweep configuration "
                "(a variant run has its own latest-<overrides> pointer)")
    return f"0 of {len(df)} rows compared: " + (", ".join(f"{n} {v}" for v, n in counts.items()) or "no rows on either side")


def _flag_count(df: pd.DataFrame) -> int:
    return int(df["verdict"].str.split(", ").map(lambda vs: any(v in FLAGS for v in vs)).sum())


def summary(df: pd.DataFrame) -> str:
    """`42 rows, 42 compared, 1 flagged (1 slower); samples/s judged on 0 of 42 (...)`."""
    compared = int(df["comparable"].sum())
    counts = [f"{len(flagged(df, v))} {v}" for v in FLAGS if len(flagged(df, v))]
    text = f"{len(df)} rows, {compared} compared, {_flag_count(df)} flagged" + (f" ({', '.join(counts)})" if counts else "")
    others = [f"{len(flagged(df, v))} {v}" for v in NOT_JUDGED if len(flagged(df, v))]
    if others:
        text += f"; not compared: {', '.join(others)}"
    judged = df[df["comparable"].astype(bool)]
    n_judged = int(judged["throughput_judged"].astype(bool).sum())
    if len(judged) and n_judged < len(judged):
        why = judged.loc[~judged["throughput_judged"].astype(bool), "throughput_note"].map(_why_not).value_counts()
        text += f"; samples/s judged on {n_judged} of {len(judged)} ({'; '.join(why.index[:2])})"
    return text


def _why_not(note: str) -> str:
    """The reason part of a not-judged samples/s note ("not judged: ...")."""
    return note.split("not judged: ", 1)[-1] if isinstance(note, str) and note else "not judged"


def _status(row) -> str:
    base = "absent" if fmt.missing(row.status_base) else row.status_base
    new = "absent" if fmt.missing(row.status_new) else row.status_new
    return new if base == new else f"{base} -> {new}"


def _verdict(verdict: str) -> str:
    """Bold only what the engine judged: rows not compared (new, missing, another machine) stay plain."""
    return f"**{verdict}**" if any(v in FLAGS for v in verdict.split(", ")) else verdict


def _speedup(value: float, low: float, high: float, reference: bool) -> str:
    return "1 (fp32: by definition)" if reference else fmt.ratio_ci(value, low, high)


def _samples(r) -> str:
    if not r.comparable:
        return fmt.DASH
    if r.throughput_judged:
        return fmt.ratio_ci(r.throughput_normalized, r.throughput_normalized_lo, r.throughput_normalized_hi)
    return "not judged: " + _why_not(r.throughput_note)


def _probe_line(probes: dict, cfg: Tolerances) -> str:
    """The two runs' machine probes and how they moved, at the thread-CPU clock (and the wall clock)."""
    base, new = probes.get("base"), probes.get("new")
    if not base or not new:
        side = " and ".join(s for s, p in (("baseline", base), ("current", new)) if not p)
        return (f"Machine probes: none recorded by the {side} run (records made before the probes): absolute samples/s "
                "are shown, not judged.")
    parts = []
    for clock, word in (("cpu", "thread-CPU"), ("wall", "wall")):
        if f"gemm_{clock}_us" in base and f"gemm_{clock}_us" in new:
            shift = probe_shift(new, base, clock, cfg.probe_tolerance)
            verdict = f"differ by more than {cfg.probe_tolerance:.0%}" if shift.why_not else f"agree within {cfg.probe_tolerance:.0%}"
            parts.append(f"{word} clock: GEMM {base[f'gemm_{clock}_us']:,.0f} -> {new[f'gemm_{clock}_us']:,.0f} µs, gather "
                         f"{base[f'gather_{clock}_us']:,.0f} -> {new[f'gather_{clock}_us']:,.0f} µs ({shift.moves}: {verdict})")
    return (f"Machine probes (the reference GEMM and gather, medians over {int(base.get('readings', 0))} and "
            f"{int(new.get('readings', 0))} readings at the jobs' starts and ends): " + "; ".join(parts) + ".")


def render_compare(df: pd.DataFrame, title: str, current: str, baseline: str, cfg: Tolerances) -> str:
    level = f"{1 - cfg.alpha:.0%}"
    C = fmt.Column
    reference = lambda r: r.backend == BASELINE_BACKEND  # noqa: E731  (its speedup is 1 by definition)
    columns = [
        (C("workload"), lambda r: r.workload),
        (C("device"), lambda r: r.device),
        (C("backend"), row_label),
        (C("batch"), lambda r: r.batch_size),
        (C("verdict"), lambda r: _verdict(r.verdict)),
        (C("status"), _status),
        (C("paired speedup", "base"), lambda r: _speedup(r.speedup_base, r.speedup_base_lo, r.speedup_base_hi, reference(r))),
        (C("paired speedup", "new"), lambda r: _speedup(r.speedup_new, r.speedup_new_lo, r.speedup_new_hi, reference(r))),
        (C("speedup change", f"new / base [{level} CI]"),
         lambda r: fmt.DASH if reference(r) else fmt.ratio_ci(r.speedup_change, r.speedup_change_lo, r.speedup_change_hi)),
        (C("samples/s", "base", "r"), lambda r: fmt.count(r.throughput_base)),
        (C("samples/s", "new", "r"), lambda r: fmt.count(r.throughput_new)),
        (C("samples/s change", f"normalized by the probes [{level} CI]"), _samples),
        (C("ΔAUC", "base", "r"), lambda r: fmt.signed(r.auc_delta_base)),
        (C("ΔAUC", "new", "r"), lambda r: fmt.signed(r.auc_delta_new)),
        (C("accuracy change", "[noise]"),
         lambda r: f"{r.auc_compared} {fmt.delta_ci(r.auc_change, r.auc_change_lo, r.auc_change_hi)}" if r.auc_compared else fmt.DASH),
        (C("notes"), lambda r: r.notes),
    ]
    rows = [[cell(r) for _, cell in columns] for r in df.itertuples(index=False)]
    lines = [
        f"# {title}",
        "",
        f"Current: `{current}`. Baseline: `{baseline}`.",
        "",
        f"Summary: {summary(df)}.",
        "",
        _probe_line(df.attrs.get("probes") or {}, cfg),
        "",
        "Rules (`bench.comparison`, tolerances from `conf/compare/`): rows join on workload, device, backend, "
        "sharding, ranks and batch size (the newest record of each). A run judges what it controls. "
        f"**slower** / **faster**: the change of the backend's paired speedup (its ratio to fp32 timed in the same run), "
        f"new / base, whose {level} interval (both runs' intervals combined on the log scale) lies wholly beyond "
        f"1 ± {cfg.throughput_tolerance:.0%}; fp32's speedup is 1 by definition. "
        f"**auc lower** / **auc higher**: the change of the ΔAUC against fp32 (fp32's row: of its AUC), both runs' "
        f"paired intervals combined, wholly beyond ± {cfg.auc_tolerance:g}. "
        f"**samples/s lower** / **higher**: absolute throughput, new / base, normalized by the runs' machine probes "
        f"(the interval widened by how much the probes moved across each run's jobs), wholly beyond 1 ± "
        f"{cfg.throughput_tolerance:.0%} (or the trials' variation, where larger); judged only when each probe moved "
        f"by at most {cfg.probe_tolerance:.0%} between the runs, fp32's only speed verdict. "
        "Rows from machines with different fingerprints, or timed with different settings (threads, clock), "
        "are marked, not compared. Only judged verdicts are set in bold.",
        "",
        fmt.table([c for c, _ in columns], rows),
        "",
    ]
    return "\n".join(lines)


def write_compare(
    records: Iterable[RunRecord],
    baseline: Iterable[RunRecord],
    out_dir: Path,
    current_name: str = "current",
    baseline_name: str = "baseline",
    cfg: Optional[Tolerances] = None,
) -> tuple[pd.DataFrame, Path]:
    """Write compare.md (and compare.csv) into out_dir; returns the table and compare.md's path."""
    cfg = cfg or CompareConfig()
    df = compare_table(records, baseline, cfg)
    out_dir = Path(out_dir)
    path = out_dir / "compare.md"
    write_text_atomic(path, render_compare(df, "Sweep comparison", current_name, baseline_name, cfg))
    write_text_atomic(out_dir / "compare.csv", df.to_csv(index=False))
    return df, path
