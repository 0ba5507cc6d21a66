"""Nightly history: one JSON line per (run, workload, device, backend, batch_size), and `history.md`.

Each nightly run appends its results rows to `<reports_dir>/history.jsonl` (or
`gate.history_file`) under an exclusive lock, then fsync; a run id already in the file is not
appended twice, so re-running the gate over the same report is harmless. `render_history` shows
AUC and throughput per backend over the last N runs and flags a change against the previous run
that goes beyond the noise:

- AUC: beyond the larger paired-CI half-width of the two runs (the CI of AUC - fp32 AUC, over
  the same eval samples each night) and beyond an absolute tolerance;
- throughput: beyond the two runs' trial spreads (their ranges do not overlap) and beyond a
  relative tolerance.

Rows whose config hash or machine fingerprint differ between the two runs are marked, not compared.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from bench.errors import UserError
from bench.gate.config import as_gate_config
from bench.report.table import KEY
from bench.results import cut_torn_tail, write_text_atomic

HISTORY_VERSION = 1
_NUMERIC = ["auc", "auc_delta", "auc_delta_lo", "auc_delta_hi", "throughput", "throughput_lo", "throughput_hi",
            "speedup", "speedup_lo", "speedup_hi", "latency_p50_ms", "latency_p99_ms", "embedding_bytes"]
_OPTIONAL_TEXT = ["config_hash", "fingerprint"]  # copied when the results table has them


def _num(value: Any) -> Optional[float]:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _throughput_spread(row: dict[str, Any]) -> tuple[Optional[float], Optional[float]]:
    """Trial spread of throughput: its own columns, else the trials, else scaled from the speedup CI."""
    lo, hi = _num(row.get("throughput_lo")), _num(row.get("throughput_hi"))
    if lo is not None and hi is not None:
        return lo, hi
    trials = row.get("throughput_trials")
    if isinstance(trials, (list, tuple)) and trials:
        values = [v for v in map(_num, trials) if v is not None]
        if values:
            return min(values), max(values)
    t, s, s_lo, s_hi = (_num(row.get(k)) for k in ("throughput", "speedup", "speedup_lo", "speedup_hi"))
    if None not in (t, s, s_lo, s_hi) and s > 0:
        return t * s_lo / s, t * s_hi / s
    return None, None


def history_rows(results_df: pd.DataFrame, *, run_id: str, timestamp: str, git_sha: Optional[str]) -> list[dict[str, Any]]:
    missing = [c for c in KEY + ["status"] if c not in results_df.columns]
    if missing:
        raise UserError(f"results table lacks columns {missing}: expected the bench.report results table")
    rows = []
    for row in results_df.to_dict("records"):
        out: dict[str, Any] = {"history_version": HISTORY_VERSION, "run_id": run_id, "timestamp": timestamp, "git_sha": git_sha}
        out.update({k: (int(row[k]) if k == "batch_size" else str(row[k])) for k in KEY})
        out["status"] = str(row["status"])
        out.update({k: _num(row.get(k)) for k in _NUMERIC})
        out["throughput_lo"], out["throughput_hi"] = _throughput_spread(row)
        out.update({k: str(row[k]) for k in _OPTIONAL_TEXT if k in row and not pd.isna(row[k])})
        rows.append(out)
    return rows


def append_history(results_df: pd.DataFrame, path: Path, *, run_id: str, timestamp: Optional[str] = None,
                   git_sha: Optional[str] = None) -> int:
    """Append this run's rows under an exclusive lock, fsynced; returns lines written (0: run id already there)."""
    timestamp = timestamp or datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = history_rows(results_df, run_id=run_id, timestamp=timestamp, git_sha=git_sha)
    payload = "".join(json.dumps(r, sort_keys=True, allow_nan=False) + "\n" for r in rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            cut_torn_tail(f.fileno())  # a writer killed mid-line: the next line must not glue onto it
            f.seek(0)
            if any(_line_run_id(line) == run_id for line in f):
                return 0
            f.write(payload)  # "a+" writes at the end whatever the read position
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return len(rows)


def _line_run_id(line: str) -> Optional[str]:
    try:
        return json.loads(line).get("run_id")
    except (json.JSONDecodeError, AttributeError):
        return None


def load_history(path: Path) -> pd.DataFrame:
    """Every history line, in file order; a torn or newer-version line is an error naming the line."""
    path = Path(path)
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{lineno}: not a history line ({exc.msg})") from None
            version = data.get("history_version") if isinstance(data, dict) else None
            if not isinstance(version, int):
                raise UserError(f"{path}:{lineno}: no integer history_version: not a bench history line")
            if version > HISTORY_VERSION:
                raise UserError(f"{path}:{lineno}: history_version {version} is newer than this harness reads ({HISTORY_VERSION}): upgrade bench")
            rows.append(data)
    columns = ["run_id", "timestamp", "git_sha", *KEY, "status", *_NUMERIC, *_OPTIONAL_TEXT]
    df = pd.DataFrame(rows)
    for c in columns:
        if c not in df.columns:
            df[c] = None
    return df


def run_order(history: pd.DataFrame) -> list[str]:
    """Run ids in the order they were first appended."""
    return list(dict.fromkeys(history["run_id"]))


def history_changes(history: pd.DataFrame, *, auc_tolerance: float, throughput_tolerance: float) -> pd.DataFrame:
    """Per key and metric, the latest run against the previous run that has the key.

    Columns: KEY, metric (auc | throughput | status), previous, latest, change, noise, flagged, note.
    """
    columns = [*KEY, "metric", "previous", "latest", "change", "noise", "flagged", "note"]
    runs = run_order(history)
    if len(runs) < 2:
        return pd.DataFrame(columns=columns)
    latest_run = runs[-1]
    rank = {r: i for i, r in enumerate(runs)}
    out = []
    for key, group in history.groupby(KEY, sort=True):
        group = group.assign(_rank=group["run_id"].map(rank)).sort_values("_rank", kind="stable")
        if group["run_id"].iloc[-1] != latest_run or len(group) < 2:
            continue
        prev, now = group.iloc[-2].to_dict(), group.iloc[-1].to_dict()
        base = dict(zip(KEY, key))
        changed = [k for k in _OPTIONAL_TEXT if _text(prev.get(k)) and _text(now.get(k)) and prev[k] != now[k]]
        if changed:
            out.append({**base, "metric": "config", "flagged": True,
                        "note": f"{' and '.join(changed)} changed since run {prev['run_id']}: not comparable"})
            continue
        if prev["status"] != now["status"]:
            out.append({**base, "metric": "status", "previous": None, "latest": None, "flagged": now["status"] != "ok",
                        "note": f"status {prev['status']} -> {now['status']}"})
        if now["status"] != "ok" or prev["status"] != "ok":
            continue
        out.extend(_metric_changes(base, prev, now, auc_tolerance, throughput_tolerance))
    return pd.DataFrame(out, columns=columns)


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _half(lo: Any, hi: Any) -> float:
    lo, hi = _num(lo), _num(hi)
    return 0.0 if lo is None or hi is None else abs(hi - lo) / 2


def _metric_changes(base: dict, prev: dict, now: dict, auc_tol: float, tput_tol: float) -> list[dict]:
    out = []
    a0, a1 = _num(prev.get("auc")), _num(now.get("auc"))
    if a0 is not None and a1 is not None:
        noise = max(_half(prev.get("auc_delta_lo"), prev.get("auc_delta_hi")), _half(now.get("auc_delta_lo"), now.get("auc_delta_hi")), auc_tol)
        change = a1 - a0
        out.append({**base, "metric": "auc", "previous": a0, "latest": a1, "change": change, "noise": noise,
                    "flagged": abs(change) > noise, "note": f"AUC {change:+.4f} (noise {noise:.4f})"})
    t0, t1 = _num(prev.get("throughput")), _num(now.get("throughput"))
    if t0 is not None and t1 is not None and t0 > 0:
        spread = _half(prev.get("throughput_lo"), prev.get("throughput_hi")) + _half(now.get("throughput_lo"), now.get("throughput_hi"))
        noise = max(spread / t0, tput_tol)
        change = t1 / t0 - 1
        out.append({**base, "metric": "throughput", "previous": t0, "latest": t1, "change": change, "noise": noise,
                    "flagged": abs(change) > noise, "note": f"throughput {change:+.1%} (noise {noise:.1%})"})
    return out


def _md(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _fmt_tput(v: Optional[float]) -> str:
    return "" if v is None else f"{v:,.0f}"


def render_history(history: pd.DataFrame, *, runs: int = 14, auc_tolerance: float = 0.0005,
                   throughput_tolerance: float = 0.05) -> str:
    order = run_order(history)[-runs:]
    recent = history[history["run_id"].isin(order)]
    lines = ["# Nightly history", ""]
    if not order:
        return "\n".join(lines + ["No runs recorded yet.", ""])
    meta = recent.drop_duplicates("run_id").set_index("run_id")
    lines += [f"Last {len(order)} runs, oldest first:", ""]
    for r in order:
        sha = meta.at[r, "git_sha"]
        lines.append(f"- `{r}`: {meta.at[r, 'timestamp']}, git {sha[:12] if _text(sha) else 'unknown'}")
    changes = history_changes(recent, auc_tolerance=auc_tolerance, throughput_tolerance=throughput_tolerance)
    flagged = changes[changes["flagged"].astype(bool)] if not changes.empty else changes
    lines += ["", f"## Changes against the previous run (beyond noise; tolerances: AUC {auc_tolerance:g}, throughput {throughput_tolerance:.0%})", ""]
    if flagged.empty:
        lines.append("No change beyond the noise." if len(order) > 1 else "Only one run so far: nothing to compare.")
    else:
        lines += ["| backend | workload | device | batch | metric | change |", "| --- | --- | --- | --- | --- | --- |"]
        for c in flagged.to_dict("records"):
            lines.append(f"| {_md(c['backend'])} | {_md(c['workload'])} | {_md(c['device'])} | {c['batch_size']} | {c['metric']} | ⚠ {_md(c['note'])} |")
    for (workload, device), group in recent.groupby(["workload", "device"], sort=True):
        lines += ["", f"## {workload} on {device}"]
        for metric, fmt, title in (("auc", lambda v: "" if v is None else f"{v:.4f}", "AUC"),
                                   ("throughput", _fmt_tput, "Throughput (rows/s)")):
            lines += ["", f"### {title}", "", "| backend | batch | " + " | ".join(f"`{r}`" for r in order) + " |",
                      "| --- | ---: |" + " ---: |" * len(order)]
            for (backend, batch), rows in group.groupby(["backend", "batch_size"], sort=True):
                by_run = {r["run_id"]: r for r in rows.to_dict("records")}
                cells = [_cell(by_run.get(r), metric, fmt) for r in order]
                lines.append(f"| {_md(backend)} | {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(row: Optional[dict], metric: str, fmt) -> str:
    if row is None:
        return ""
    if row["status"] != "ok":
        return str(row["status"])
    return fmt(_num(row.get(metric)))


def default_run_id() -> str:
    """GitHub's run id (and attempt) when in Actions, else a UTC timestamp."""
    if os.environ.get("GITHUB_RUN_ID"):
        return f"{os.environ['GITHUB_RUN_ID']}.{os.environ.get('GITHUB_RUN_ATTEMPT', '1')}"
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def current_git_sha() -> Optional[str]:
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def update_history(results_df: pd.DataFrame, gate_cfg: Any, reports_dir: Path, *, run_id: Optional[str] = None,
                   git_sha: Optional[str] = None, timestamp: Optional[str] = None) -> Path:
    """Append this run to the history file and rewrite `history.md` beside it; returns its path."""
    cfg = as_gate_config(gate_cfg)
    path = Path(cfg.history_file) if cfg.history_file else Path(reports_dir) / "history.jsonl"
    append_history(results_df, path, run_id=run_id or default_run_id(), timestamp=timestamp,
                   git_sha=git_sha if git_sha is not None else current_git_sha())
    md = render_history(load_history(path), runs=cfg.history_runs, auc_tolerance=cfg.history_auc_tolerance,
                        throughput_tolerance=cfg.history_throughput_tolerance)
    write_text_atomic(path.parent / "history.md", md)
    return path.parent / "history.md"


__all__ = ["append_history", "load_history", "history_changes", "render_history", "update_history",
                          "default_run_id", "current_git_sha", "history_rows"]
