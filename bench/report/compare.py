"""Compare a sweep with a baseline sweep, row by row.

Rows join on (workload, device, backend, batch_size), the newest record per key on each side.
A row whose machine fingerprint differs is marked "machine differs" and not judged. Otherwise:

- throughput is flagged when the bootstrap interval of median(new) / median(baseline) over the
  two runs' trials excludes 1 and the ratio moved by more than `throughput_tolerance`
  (`slower` / `faster`). The trials only see the noise inside one process; separate runs of the
  same sweep differ by more than that, so the trial interval alone flags unchanged rows;
- AUC is flagged when it moved by more than `auc_threshold`, or when the baseline's ΔAUC vs fp32
  lies outside the new run's ΔAUC confidence interval (`auc changed`).

A differing config hash is noted but still compared (the hash may cover settings that do not
change the measurement); a change of status (ok -> error) is its own verdict.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from bench.io import write_text_atomic
from bench.record import RunRecord
from bench.report import fmt
from bench.report.table import KEY, backend_rank, latest_records, trials
from bench.stats import interval_contains, ratio_interval

AUC_THRESHOLD = 0.001
THROUGHPUT_TOLERANCE = 0.05

COLUMNS = [*KEY, "verdict", "notes", "status_base", "status_new", "throughput_base", "throughput_new",
           "throughput_ratio", "throughput_ratio_lo", "throughput_ratio_hi", "auc_base", "auc_new",
           "auc_change", "auc_delta_base", "auc_delta_new", "auc_delta_new_lo", "auc_delta_new_hi",
           "fingerprint_base", "fingerprint_new", "comparable"]  # fmt: skip

# Verdicts that call for a look, in summary order.
FLAGS = ("slower", "faster", "auc changed", "status changed", "machine differs", "missing", "new")


def _m(r: RunRecord | None, name: str) -> float:
    if r is None or r.status != "ok":
        return math.nan
    v = (r.metrics or {}).get(name)
    return math.nan if v is None else float(v)


def _fp(r: RunRecord | None) -> Any:
    return None if r is None else (r.env or {}).get("fingerprint")


def _judge(base: RunRecord, new: RunRecord, row: dict[str, Any], auc_threshold: float, alpha: float,
           throughput_tolerance: float) -> list[str]:
    verdicts: list[str] = []
    t_new, t_base = trials(new), trials(base)
    if t_new and t_base:
        ratio, lo, hi = ratio_interval(t_new, t_base, alpha=alpha)
        row.update(throughput_ratio=ratio, throughput_ratio_lo=lo, throughput_ratio_hi=hi)
        if hi < 1.0 and ratio < 1.0 - throughput_tolerance:
            verdicts.append("slower")
        elif lo > 1.0 and ratio > 1.0 + throughput_tolerance:
            verdicts.append("faster")
    else:
        row["throughput_ratio"] = row["throughput_new"] / row["throughput_base"]
        row["notes"].append("no per-trial throughputs: throughput not judged")
    change = row["auc_new"] - row["auc_base"]
    row["auc_change"] = change
    moved = not math.isnan(change) and abs(change) > auc_threshold
    d_base, lo, hi = row["auc_delta_base"], row["auc_delta_new_lo"], row["auc_delta_new_hi"]
    outside = not any(math.isnan(x) for x in (d_base, lo, hi)) and not interval_contains(lo, hi, d_base)
    if moved or outside:
        verdicts.append("auc changed")
    return verdicts


def compare_table(
    records: Iterable[RunRecord | dict[str, Any]],
    baseline: Iterable[RunRecord | dict[str, Any]],
    auc_threshold: float = AUC_THRESHOLD,
    throughput_tolerance: float = THROUGHPUT_TOLERANCE,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """One row per key present on either side, with a verdict (`same` when nothing is flagged)."""
    new_by_key, base_by_key = latest_records(records), latest_records(baseline)
    keys = sorted(set(new_by_key) | set(base_by_key), key=lambda k: (k[0], k[1], backend_rank(k[2]), k[3]))
    rows = []
    for k in keys:
        new, base = new_by_key.get(k), base_by_key.get(k)
        row: dict[str, Any] = dict(zip(KEY, k))
        row.update(
            notes=[],
            status_base=base.status if base else None,
            status_new=new.status if new else None,
            throughput_base=_m(base, "throughput"),
            throughput_new=_m(new, "throughput"),
            throughput_ratio=math.nan,
            throughput_ratio_lo=math.nan,
            throughput_ratio_hi=math.nan,
            auc_base=_m(base, "auc"),
            auc_new=_m(new, "auc"),
            auc_change=math.nan,
            auc_delta_base=_m(base, "auc_delta"),
            auc_delta_new=_m(new, "auc_delta"),
            auc_delta_new_lo=_m(new, "auc_delta_lo"),
            auc_delta_new_hi=_m(new, "auc_delta_hi"),
            fingerprint_base=_fp(base),
            fingerprint_new=_fp(new),
            comparable=False,
        )
        if base is None or new is None:
            verdicts = ["new" if base is None else "missing"]
        elif _fp(base) != _fp(new):
            verdicts = ["machine differs"]
            row["notes"].append(f"fingerprint {_fp(base)} -> {_fp(new)}: not compared")
        elif base.status != "ok" or new.status != "ok":
            verdicts = ["status changed"] if base.status != new.status else [f"still {new.status}"]
        else:
            row["comparable"] = True
            if base.config_hash != new.config_hash:
                row["notes"].append(f"config hash {base.config_hash} -> {new.config_hash}")
            verdicts = _judge(base, new, row, auc_threshold, alpha, throughput_tolerance)
        row["verdict"] = ", ".join(verdicts) or "same"
        row["notes"] = "; ".join(row["notes"])
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def flagged(df: pd.DataFrame, verdict: str) -> pd.DataFrame:
    return df[df["verdict"].str.split(", ").map(lambda vs: verdict in vs)]


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


def render_compare(df: pd.DataFrame, title: str, current: str, baseline: str, auc_threshold: float,
                   throughput_tolerance: float = THROUGHPUT_TOLERANCE) -> str:
    headers = ["workload", "device", "backend", "batch", "verdict", "status", "samples/s base", "samples/s new",
               "ratio [95% CI]", "AUC base", "AUC new", "AUC change", "notes"]  # fmt: skip
    rows = [
        [
            r.workload, r.device, r.backend, r.batch_size, _verdict(r.verdict),
            _status(r), fmt.count(r.throughput_base), fmt.count(r.throughput_new),
            fmt.ratio_ci(r.throughput_ratio, r.throughput_ratio_lo, r.throughput_ratio_hi),
            fmt.number(r.auc_base), fmt.number(r.auc_new), fmt.signed(r.auc_change), r.notes,
        ]  # fmt: skip
        for r in df.itertuples(index=False)
    ]
    lines = [
        f"# {title}",
        "",
        f"Current: `{current}`. Baseline: `{baseline}`.",
        "",
        f"Summary: {summary(df)}.",
        "",
        "Rules: rows join on workload, device, backend and batch size (the newest record of each). "
        "Throughput is flagged when the 95% bootstrap interval of the ratio of median throughputs "
        f"(over both runs' trials) excludes 1 and the ratio moved by more than {throughput_tolerance:.0%}. AUC is flagged when it moved by more than "
        f"{auc_threshold:g}, or when the baseline's ΔAUC vs fp32 lies outside the new ΔAUC's 95% "
        "interval. Rows from machines with different fingerprints are marked, not compared.",
        "",
        fmt.markdown_table(headers, rows, "llllllrrlrrrl"),
        "",
    ]
    return "\n".join(lines)


def write_compare(
    records: Iterable[RunRecord],
    baseline: Iterable[RunRecord],
    out_dir: Path,
    current_name: str = "current",
    baseline_name: str = "baseline",
    auc_threshold: float = AUC_THRESHOLD,
    throughput_tolerance: float = THROUGHPUT_TOLERANCE,
) -> tuple[pd.DataFrame, Path]:
    """Write compare.md (and compare.csv) into out_dir; returns the table and compare.md's path."""
    df = compare_table(records, baseline, auc_threshold=auc_threshold, throughput_tolerance=throughput_tolerance)
    out_dir = Path(out_dir)
    path = out_dir / "compare.md"
    write_text_atomic(path, render_compare(df, "Sweep comparison", current_name, baseline_name, auc_threshold, throughput_tolerance))
    write_text_atomic(out_dir / "compare.csv", df.to_csv(index=False))
    return df, path
