"""Compare a sweep with a baseline sweep, row by row, with the comparison engine (`bench.comparison`).

Rows join on (workload, device, backend, sharding, world_size, batch_size), the newest record per key on each side.
A row whose machine fingerprint differs is marked "machine differs" and not judged. Otherwise
the engine judges, with the tolerances and alpha of `conf/compare/` (`CompareConfig`):

- throughput: the bootstrap interval of median(new) / median(baseline) over the two runs'
  trials must exclude 1 and the ratio must have moved by more than `throughput_tolerance`
  (`slower` / `faster`). The trials only see the noise inside one process; separate runs of the
  same sweep differ by more than that, so the trial interval alone would flag unchanged rows;
- AUC: the change must exceed the noise (the larger paired ΔAUC interval half-width of the two
  runs) and `auc_tolerance` (`auc lower` / `auc higher`);
- speedup (paired against fp32 in each run): the ratio of the two speedups, with both runs'
  intervals combined, must exclude 1 and have moved by more than `throughput_tolerance`
  (`speedup lower` / `speedup higher`). It is judged whatever the absolute throughput's flag says.

Runs timed with different timing settings (threads, clock) are marked, not compared.

A differing config hash is noted but still compared (the hash may cover settings that do not
change the measurement); a change of status (ok -> error) is its own verdict.
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
)
from bench.config import CompareConfig
from bench.io import write_text_atomic
from bench.metrics import AUC, AUC_DELTA, SPEEDUP, THROUGHPUT
from bench.record import RunRecord
from bench.report import fmt
from bench.results.key import KEY, row_label, sort_key
from bench.results.table import latest_records

COLUMNS = [*KEY, "verdict", "notes", "status_base", "status_new", "throughput_base", "throughput_new",
           "throughput_ratio", "throughput_ratio_lo", "throughput_ratio_hi", "auc_base", "auc_new",
           "auc_change", "auc_change_lo", "auc_change_hi", "auc_delta_base", "auc_delta_new", "speedup_base", "speedup_new",
           "fingerprint_base", "fingerprint_new", "comparable"]  # fmt: skip

# Verdicts that call for a look, in summary order.
FLAGS = ("slower", "faster", "speedup lower", "speedup higher", "auc lower", "auc higher", "status changed",
         "machine differs", "timing differs", "missing", "new")
_WORDS = {(THROUGHPUT, WORSE): "slower", (THROUGHPUT, BETTER): "faster",
          (SPEEDUP, WORSE): "speedup lower", (SPEEDUP, BETTER): "speedup higher",
          (AUC, WORSE): "auc lower", (AUC, BETTER): "auc higher"}  # fmt: skip


def _m(r: RunRecord | None, name: str) -> float:
    if r is None or r.status != "ok":
        return math.nan
    x = finite((r.metrics or {}).get(name))
    return math.nan if x is None else x


def _view(r: RunRecord) -> dict[str, Any]:
    """What the engine reads of a record: its metrics plus its identity."""
    return {**(r.metrics or {}), "fingerprint": (r.env or {}).get("fingerprint"), "config_hash": r.config_hash}


def _nan(x: Optional[float]) -> float:
    return math.nan if x is None else x


def _judge(changes: dict[str, Change], row: dict[str, Any]) -> list[str]:
    t, a = changes[THROUGHPUT], changes[AUC]
    row.update(throughput_ratio=_nan(t.value), throughput_ratio_lo=_nan(t.lo), throughput_ratio_hi=_nan(t.hi),
               auc_change=_nan(a.value), auc_change_lo=_nan(a.lo), auc_change_hi=_nan(a.hi))
    judged = [t, a] + ([changes[SPEEDUP]] if SPEEDUP in changes else [])
    for c in judged:
        if c.verdict == NOT_COMPARABLE:
            row["notes"].append(c.reason)
    return [_WORDS[(c.metric, c.verdict)] for c in judged if c.flagged]


def compare_table(
    records: Iterable[RunRecord | dict[str, Any]],
    baseline: Iterable[RunRecord | dict[str, Any]],
    cfg: Optional[Tolerances] = None,
) -> pd.DataFrame:
    """One row per key present on either side, with a verdict (`same` when nothing is flagged).

    `cfg`: the tolerances and alpha (`CompareConfig`; default: its schema defaults, which
    `conf/compare/default.yaml` repeats).
    """
    cfg = cfg or CompareConfig()
    new_by_key, base_by_key = latest_records(records), latest_records(baseline)
    keys = sorted(set(new_by_key) | set(base_by_key), key=sort_key)
    rows = []
    for k in keys:
        new, base = new_by_key.get(k), base_by_key.get(k)
        row: dict[str, Any] = dict(zip(KEY, k))
        row.update(
            notes=[],
            status_base=base.status if base else None,
            status_new=new.status if new else None,
            throughput_base=_m(base, THROUGHPUT),
            throughput_new=_m(new, THROUGHPUT),
            throughput_ratio=math.nan,
            throughput_ratio_lo=math.nan,
            throughput_ratio_hi=math.nan,
            auc_base=_m(base, AUC),
            auc_new=_m(new, AUC),
            auc_change=math.nan,
            auc_change_lo=math.nan,
            auc_change_hi=math.nan,
            auc_delta_base=_m(base, AUC_DELTA),
            auc_delta_new=_m(new, AUC_DELTA),
            speedup_base=_m(base, SPEEDUP),
            speedup_new=_m(new, SPEEDUP),
            fingerprint_base=None if base is None else (base.env or {}).get("fingerprint"),
            fingerprint_new=None if new is None else (new.env or {}).get("fingerprint"),
            comparable=False,
        )
        refused, notes = (None, []) if base is None or new is None else identity(_view(new), _view(base))
        if base is None or new is None:
            verdicts = ["new" if base is None else "missing"]
        elif refused:
            verdicts = ["machine differs" if refused.startswith("machine") else "timing differs"]
            row["notes"].append(refused)
        elif base.status != "ok" or new.status != "ok":
            verdicts = ["status changed"] if base.status != new.status else [f"still {new.status}"]
        else:
            row["comparable"] = True
            row["notes"] += notes
            verdicts = _judge(compare_metrics(_view(new), _view(base), cfg), row)
        row["verdict"] = ", ".join(verdicts) or "same"
        row["notes"] = "; ".join(row["notes"])
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


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


def summary(df: pd.DataFrame) -> str:
    counts = [f"{len(flagged(df, v))} {v}" for v in FLAGS if len(flagged(df, v))]
    compared = int(df["comparable"].sum())
    return f"{len(df)} rows, {compared} compared: " + (", ".join(counts) if counts else "no changes flagged")


def _status(row) -> str:
    base = "absent" if fmt.missing(row.status_base) else row.status_base
    new = "absent" if fmt.missing(row.status_new) else row.status_new
    return new if base == new else f"{base} -> {new}"


def _verdict(verdict: str) -> str:
    return f"**{verdict}**" if any(v in FLAGS for v in verdict.split(", ")) else verdict


def render_compare(df: pd.DataFrame, title: str, current: str, baseline: str, cfg: Tolerances) -> str:
    level = f"{1 - cfg.alpha:.0%}"
    C = fmt.Column
    columns = [
        (C("workload"), lambda r: r.workload),
        (C("device"), lambda r: r.device),
        (C("backend"), row_label),
        (C("batch"), lambda r: r.batch_size),
        (C("verdict"), lambda r: _verdict(r.verdict)),
        (C("status"), _status),
        (C("samples/s", "base", "r"), lambda r: fmt.count(r.throughput_base)),
        (C("samples/s", "new", "r"), lambda r: fmt.count(r.throughput_new)),
        (C("ratio", f"[{level} CI]"), lambda r: fmt.ratio_ci(r.throughput_ratio, r.throughput_ratio_lo, r.throughput_ratio_hi)),
        (C("speedup base", align="r"), lambda r: fmt.ratio_ci(r.speedup_base, math.nan, math.nan)),
        (C("speedup new", align="r"), lambda r: fmt.ratio_ci(r.speedup_new, math.nan, math.nan)),
        (C("AUC", "base", "r"), lambda r: fmt.number(r.auc_base)),
        (C("AUC", "new", "r"), lambda r: fmt.number(r.auc_new)),
        (C("AUC change", "[noise]"), lambda r: fmt.delta_ci(r.auc_change, r.auc_change_lo, r.auc_change_hi)),
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
        "Rules (`bench.comparison`, tolerances from `conf/compare/`): rows join on workload, device, backend, "
        f"sharding, ranks and batch size (the newest record of each). Throughput is flagged when the {level} bootstrap interval of "
        "the ratio of median throughputs (over both runs' trials) excludes 1 and the ratio moved by more than "
        f"{cfg.throughput_tolerance:.0%}. A paired speedup is flagged when the {level} interval of new / base "
        f"(both runs' intervals combined) excludes 1 and it moved by more than {cfg.throughput_tolerance:.0%}. "
        f"AUC is flagged when its change exceeds the noise (the larger paired "
        f"ΔAUC interval half-width of the two runs) and {cfg.auc_tolerance:g}. Rows from machines with "
        "different fingerprints, or timed with different settings (threads, clock), are marked, not compared.",
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
