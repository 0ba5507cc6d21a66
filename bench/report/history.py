"""Nightly history: one JSON line per (run, workload, device, backend, sharding, world_size, batch_size),
and `history.md`.

Each nightly run appends the newest record per key of its report folder to
`<reports_dir>/history.jsonl` (or `gate.history_file`) through the record store's locked appender
(`bench.io.append_jsonl`); a run id already in the file is not appended twice, so re-running
the gate over the same report is harmless. Each line keeps the run's raw per-trial throughputs,
so a later night is compared with the comparison engine (`bench.comparison.compare_metrics`, noise
rules from `conf/compare/`) exactly as a baseline sweep is (`python -m bench.report DIR --baseline DIR`):
the change of each backend's paired speedup and of its ΔAUC, both runs' intervals combined, and the
absolute throughput normalized by the runs' machine probes, judged only where the probes agree.
`render_history` shows AUC and throughput per backend over the last N runs and flags changes.

Rows whose machine fingerprint differs between the two runs are marked, not compared; a changed
config hash is compared and flagged with a note.

Versions (`history_version`): 1 kept a throughput spread (`throughput_lo`/`_hi`, rebuilt from
the speedup interval when trials were gone); 2 keeps the raw `throughput_trials` instead. A v1
line reads as v2 with no trials: its throughput is shown, not judged. 3 adds what the dashboard
(`bench.report.dashboard`) shows: `peak_rss_bytes`, the run's `stack` (python, torch, fbgemm_gpu,
torchrec, torchao versions), the `sweep` name, its report folder (`report`, relative to the history
file's folder), the row's gate verdict (`gate`: its worst rule verdict) and the run's (`gate_passed`).
A v2 line reads as v3 with those unknown (null). 4 adds `timing_setting` (thread count and clock of
the timing, e.g. "1 thread, thread_cpu clock": lines timed otherwise are not compared) and
`speedup_process_sd` (the between-process spread carried into the speedup interval; null: the
interval covers one process's rounds), and `stable` flags the absolute throughput only. A v3 line
reads as v4 with no setting, and a `stable=false` that only the paired interval's width caused
becomes true (speedups are judged on their own intervals). 5 adds what makes two runs alike
(`LIKE`): a short hash of the job's `workload`, `model` and `timing` configs (a `+preset=tiny` run
differs from the plain one in all three); with the `sweep` and the `timing_setting`, a run is judged
only against the newest earlier run alike in every one of them, and where none is, the line names
what differs. A v4 line reads as v5 with those unknown, alike to any run. 6 keys a line by the backend
alone with its `sharding` and `world_size` beside it (results.csv's columns): a v5 line's backend cell
held both for a sharded run (`fake_quant@auto×2`), and reads as v6 split into the three, so its key is
the one a v6 line of the same job has; an unsharded v5 line reads as sharding `none`, world size 1.
7 adds the run's machine `probe` (`bench.comparison.run_probe`: the reference GEMM and gather timed at
the start and end of every job, the median over the run), the same on every line of a run: absolute
throughput is judged between two runs only normalized by it and where both runs' probes agree (the
paired speedup and the ΔAUC are the run's own verdicts). A v6 line reads as v7 with no probe: its
throughput is shown, not judged.
"""

from __future__ import annotations

import logging
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import pandas as pd

from bench.config.identity import job_identity
from bench.comparison import NOT_COMPARABLE, Tolerances, compare_metrics, finite, identity, machine_readings, run_probe
from bench.errors import UserError
from bench.hashing import config_hash
from bench.io import append_jsonl, read_jsonl, write_text_atomic
from bench.metrics import AUC, AUC_DELTA, EMBEDDING_BYTES, PEAK_RSS_BYTES, SPEEDUP, SPEEDUP_PROCESS_SD, THROUGHPUT, THROUGHPUT_TRIALS, hi, lo
from bench.record import RunRecord
from bench.results.key import AXES, KEY, read_label, row_key, row_label
from bench.results.assemble import Results, build_results
from bench.results.table import trials

HISTORY_VERSION = 7
HISTORY_FILE = "history.jsonl"
_NUMERIC = [AUC, AUC_DELTA, lo(AUC_DELTA), hi(AUC_DELTA), THROUGHPUT, SPEEDUP, lo(SPEEDUP), hi(SPEEDUP),
            "latency_p50_ms", "latency_p99_ms", EMBEDDING_BYTES, PEAK_RSS_BYTES, SPEEDUP_PROCESS_SD]  # fmt: skip
_TEXT = ["config_hash", "fingerprint", "timing_setting"]
_RUN = ["sweep", "report", "gate_passed", "stack"]  # version 3: the same on every line of a run
_CONFIGS = ("workload", "model", "timing")  # version 5: the config sections whose hashes make runs alike
# What two runs must share to be judged against each other, and how a difference is named.
LIKE = {"sweep": "sweep", **{f"{part}_config": f"{part} config" for part in _CONFIGS}, "timing_setting": "timing setting"}
_COLUMNS = ["run_id", "timestamp", "git_sha", *KEY, "status", *_NUMERIC, THROUGHPUT_TRIALS, *_TEXT, *_RUN, "gate", "probe",
            *(f"{part}_config" for part in _CONFIGS)]
STACK_KEYS = ("python", "torch", "fbgemm_gpu", "torchrec", "torchao", "fbgemm_isa")
log = logging.getLogger(__name__)


class NewerHistory(UserError):
    def __init__(self, where: str, version: int) -> None:
        super().__init__(f"{where}: history_version {version} is newer than this harness reads ({HISTORY_VERSION}): upgrade bench")
        self.version = version


def _v1_to_v2(line: dict[str, Any]) -> dict[str, Any]:
    line = {k: v for k, v in line.items() if k not in (lo(THROUGHPUT), hi(THROUGHPUT))}
    return {**line, THROUGHPUT_TRIALS: None}


def _v2_to_v3(line: dict[str, Any]) -> dict[str, Any]:
    return {PEAK_RSS_BYTES: None, "gate": None, **{k: None for k in _RUN}, **line}


# The words a v2 or v3 line's `unstable_reason` used for a wide paired interval (bench.measure.noise then).
_V2_RATIO_REASON = "the paired speedup's 95% interval spans"


def _v3_to_v4(line: dict[str, Any]) -> dict[str, Any]:
    out = {**line, "timing_setting": None, SPEEDUP_PROCESS_SD: None}
    if line.get("stable") is False and line.get("unstable_reason"):
        kept = [r for r in line["unstable_reason"].split("; ") if not r.startswith(_V2_RATIO_REASON)]
        out.update(stable=not kept, unstable_reason="; ".join(kept) or None)
    return out


def _v4_to_v5(line: dict[str, Any]) -> dict[str, Any]:
    return {**{f"{part}_config": None for part in _CONFIGS}, **line}


def _v5_to_v6(line: dict[str, Any]) -> dict[str, Any]:
    backend, sharding, world_size = read_label(str(line.get("backend")))
    return {**line, "backend": backend, "sharding": sharding, "world_size": world_size}


def _v6_to_v7(line: dict[str, Any]) -> dict[str, Any]:
    return {"probe": None, **line}


# MIGRATIONS[n] turns a version-n line into a version-(n+1) line.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6,
                                                                     6: _v6_to_v7}


def migrate(line: dict[str, Any], where: str) -> dict[str, Any]:
    version = line.get("history_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise UserError(f"{where}: no integer history_version: not a bench history line")
    if version > HISTORY_VERSION:
        raise NewerHistory(where, version)
    while version < HISTORY_VERSION:
        line = {**MIGRATIONS[version](line), "history_version": version + 1}
        version += 1
    return line


def history_rows(records: Iterable[RunRecord | dict[str, Any]], *, run_id: str, timestamp: str,
                 git_sha: Optional[str], alpha: float = 0.05, run: Optional[dict[str, Any]] = None,
                 gate: Optional[dict[tuple, str]] = None, results: Optional[Results] = None) -> list[dict[str, Any]]:
    """One line per key: the results table's figures plus the newest record's raw trials and stack.
    `run` holds the run-level fields (`sweep`, `report`, `gate_passed`), `gate` each key's verdict;
    `results`, the records' results already built (at `alpha`), stands for them."""
    if results is None:
        results = build_results(records, alpha=alpha)
    latest = results.latest
    probe = run_probe(reading for r in latest.values() if r.status == "ok" for reading in machine_readings(r.metrics or {}))
    rows = []
    for row in results.jobs.to_dict("records"):
        key = row_key(row)
        out: dict[str, Any] = {"history_version": HISTORY_VERSION, "run_id": run_id, "timestamp": timestamp, "git_sha": git_sha}
        out.update(zip(KEY, key))
        out["status"] = str(row["status"])
        out.update({k: finite(row.get(k)) for k in _NUMERIC})
        out[THROUGHPUT_TRIALS] = trials(latest[key]) or None
        env = latest[key].env or {}
        out["stack"] = {k: env.get(k) for k in STACK_KEYS}
        out.update({k: (run or {}).get(k) for k in _RUN if k != "stack"})
        out["gate"] = (gate or {}).get(key)
        out["probe"] = probe
        if isinstance(row.get("kernel_degraded"), str):  # degraded kernels under this row's speed (absent when healthy)
            out["kernel_degraded"] = row["kernel_degraded"]
        # as the job's identity reads them: a key added to the schema at its legacy value splits no series
        config = job_identity(latest[key].config or {})
        out.update({f"{part}_config": config_hash(config.get(part), length=8) for part in _CONFIGS})
        out.update({k: row[k] for k in _TEXT if isinstance(row.get(k), str) and row[k]})
        if isinstance(row.get("stable"), bool):  # timing noise flags; absent in older lines
            reason = row.get("unstable_reason")  # a stable row's None is NaN in the frame
            out.update(stable=row["stable"], unstable_reason=reason if isinstance(reason, str) else None, trial_cv=finite(row.get("trial_cv")))
        rows.append(out)
    return rows


def append_history(records: Iterable[RunRecord | dict[str, Any]], path: Path, *, run_id: str,
                   timestamp: Optional[str] = None, git_sha: Optional[str] = None, alpha: float = 0.05,
                   run: Optional[dict[str, Any]] = None, gate: Optional[dict[tuple, str]] = None,
                   results: Optional[Results] = None) -> int:
    """Append this run's lines (locked, fsynced); returns lines written (0: run id already there)."""
    timestamp = timestamp or datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = history_rows(records, run_id=run_id, timestamp=timestamp, git_sha=git_sha, alpha=alpha, run=run, gate=gate, results=results)
    if not rows:
        raise UserError("no records to add to the history (did the sweep run?)")
    return append_jsonl(Path(path), rows, unless=lambda line: line.get("run_id") == run_id,
                        on_mend=lambda what: log.warning("%s: %s", path, what))


def load_history(path: Path) -> pd.DataFrame:
    """Every history line, in file order, migrated to the current version. It reads through the
    store's reader (`bench.io.read_jsonl`): damaged lines and lines of a newer version are skipped
    with one warning that names them, as the record store's readers skip them."""
    path = Path(path)
    found = read_jsonl(path)
    rows, skipped = [], [f"line {n} ({why})" for n, why in found.damaged]
    for lineno, data in found.lines:
        try:
            rows.append(migrate(data, f"{path}:{lineno}"))
        except NewerHistory as exc:
            skipped.append(f"line {lineno} (history_version {exc.version}: upgrade bench to read it)")
        except UserError as exc:
            skipped.append(f"line {lineno} ({exc})")
    if found.torn_tail:
        skipped.append(f"a torn last line at byte offset {found.torn_tail[0]}")
    if skipped:
        log.warning("%s: skipped %s", path, "; ".join(skipped))
    df = pd.DataFrame(rows)
    for c in _COLUMNS:
        if c not in df.columns:
            df[c] = None
    for a in AXES:  # an axis declared after a line was written: the line ran at its default
        if a.default is not None:
            df[a.name] = df[a.name].where(df[a.name].notna(), a.default)
    return df


def run_order(history: pd.DataFrame) -> list[str]:
    """Run ids in the order they were first appended."""
    return list(dict.fromkeys(history["run_id"]))


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and pd.isna(value))


def unlike(a: dict, b: dict) -> list[str]:
    """What makes two history lines unlike (`LIKE`, in words: `workload config 1a2b3c4d -> 5e6f7a8b`);
    a field one side does not record counts as alike."""
    return [f"{word} {a[k]} -> {b[k]}" for k, word in LIKE.items() if _known(a.get(k)) and _known(b.get(k)) and a[k] != b[k]]


def history_changes(history: pd.DataFrame, cfg: Tolerances) -> pd.DataFrame:
    """Per key and metric, the latest run against the newest earlier run alike (`LIKE`) that has the key;
    where the run just before it is not alike, the note says which runs were passed over and why, and
    where no earlier run is alike, the row says what differs and nothing is compared.

    Columns: KEY, metric (speedup | auc | throughput | status | config), previous, latest, change, noise,
    flagged, note. `change` is the ratio - 1 for the paired speedup and for the throughput (normalized by
    the runs' machine probes, not judged where they differ), the difference of the ΔAUC for auc (of the
    AUC on fp32's row); `noise` the half-width of the change's interval in the same units.
    """
    columns = [*KEY, "metric", "previous", "latest", "change", "noise", "flagged", "note"]
    runs = run_order(history)
    if len(runs) < 2:
        return pd.DataFrame(columns=columns)
    latest_run = runs[-1]
    rank = {r: i for i, r in enumerate(runs)}
    out = []
    for key, group in history.groupby(KEY, sort=True, dropna=False):
        group = group.assign(_rank=group["run_id"].map(rank)).sort_values("_rank", kind="stable")
        if group["run_id"].iloc[-1] != latest_run or len(group) < 2:
            continue
        rows = group.to_dict("records")
        now, before = rows[-1], rows[:-1]
        base = dict(zip(KEY, key))
        alike = [r for r in before if not unlike(r, now)]
        if not alike:
            last = before[-1]
            out.append({**base, "metric": "config", "flagged": True,
                        "note": f"no earlier run alike: run {last['run_id']} differs ({'; '.join(unlike(last, now))}): not compared"})
            continue
        prev = alike[-1]
        passed = [r for r in before if rank[r["run_id"]] > rank[prev["run_id"]]]
        refused, notes = identity(now, prev)
        if passed:
            notes = [f"passed over run{'s' if len(passed) > 1 else ''} {', '.join(r['run_id'] for r in passed)} "
                     f"({'; '.join(dict.fromkeys(w for r in passed for w in unlike(r, now)))})", *notes]
        since = f" since run {prev['run_id']}"
        if refused:
            out.append({**base, "metric": "config", "flagged": True, "note": refused + since})
            continue
        if notes:  # runs passed over alone are said once per run by `render_history`, not flagged per key
            out.append({**base, "metric": "config", "flagged": len(notes) > bool(passed), "note": "; ".join(notes) + since + (
                ": compared anyway" if len(notes) > bool(passed) else ", the newest alike")})
        if prev["status"] != now["status"]:
            out.append({**base, "metric": "status", "flagged": now["status"] != "ok",
                        "note": f"status {prev['status']} -> {now['status']}"})
        if now["status"] != "ok" or prev["status"] != "ok":
            continue
        for metric, c in compare_metrics(now, prev, cfg).items():
            if c.verdict == NOT_COMPARABLE and c.value is None and c.base is None:
                continue
            shown = f"{c.moved:+.1%}" if metric in (THROUGHPUT, SPEEDUP) and c.moved is not None else (
                f"{c.moved:+.4f}" if c.moved is not None else "")
            out.append({**base, "metric": metric, "previous": c.base, "latest": c.new, "change": c.moved,
                        "noise": c.noise, "flagged": c.flagged,
                        "note": f"{c.metric} {shown} ({c.verdict}: {c.reason})"})
    return pd.DataFrame(out, columns=columns)


def _md(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _fmt_tput(v: Optional[float]) -> str:
    return "" if v is None else f"{v:,.0f}"


def _fmt_auc(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.4f}"


def _fmt_speedup(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.2f}x"


def render_history(history: pd.DataFrame, cfg: Tolerances, *, runs: int = 14) -> str:
    order = run_order(history)[-runs:]
    recent = history[history["run_id"].isin(order)]
    lines = ["# Nightly history", ""]
    if not order:
        return "\n".join(lines + ["No runs recorded yet.", ""])
    meta = recent.drop_duplicates("run_id").set_index("run_id")
    kinds = run_kinds(recent)
    lines += [f"Last {len(order)} runs, oldest first; a run is judged only against runs of its kind (the same sweep, "
              "workload, model and timing configs, and timing setting):", ""]
    for r in order:
        sha = meta.at[r, "git_sha"]
        sweep = meta.at[r, "sweep"]
        lines.append(f"- `{r}`: {meta.at[r, 'timestamp']}, git {sha[:12] if isinstance(sha, str) and sha else 'unknown'}"
                     + (f", sweep {sweep}" if isinstance(sweep, str) and sweep else "") + f", kind {kinds[r]}")
    lines += ["", judged_against(recent, kinds)]
    changes = history_changes(recent, cfg)
    flagged = changes[changes["flagged"].astype(bool)] if not changes.empty else changes
    lines += ["", "## Changes against the previous run (beyond noise; `compare`: AUC tolerance "
              f"{cfg.auc_tolerance:g}, throughput tolerance {cfg.throughput_tolerance:.0%}, {1 - cfg.alpha:.0%} intervals; "
              f"samples/s normalized by the machine probes, judged where they agree within {cfg.probe_tolerance:.0%})", ""]
    if flagged.empty:
        lines.append("No change beyond the noise." if len(order) > 1 else "Only one run so far: nothing to compare.")
    else:
        lines += ["| backend | workload | device | batch | metric | change |", "| --- | --- | --- | --- | --- | --- |"]
        for c in flagged.to_dict("records"):
            lines.append(f"| {_md(row_label(c))} | {_md(c['workload'])} | {_md(c['device'])} | {c['batch_size']} | {c['metric']} | ⚠ {_md(c['note'])} |")
    for (workload, device), group in recent.groupby(["workload", "device"], sort=True):
        lines += ["", f"## {workload} on {device}"]
        for metric, fmt, title in ((AUC, _fmt_auc, "AUC"), (THROUGHPUT, _fmt_tput, "Throughput (rows/s)"),
                                   (SPEEDUP, _fmt_speedup, "Speedup over fp32")):
            lines += ["", f"### {title}", "", "| backend | batch | " + " | ".join(f"`{r}`" for r in order) + " |",
                      "| --- | ---: |" + " ---: |" * len(order)]
            for _, rows in group.groupby([k for k in KEY if k not in ("workload", "device")], sort=True, dropna=False):
                by_run = {r["run_id"]: r for r in rows.to_dict("records")}
                cells = [_cell(by_run.get(r), metric, fmt) for r in order]
                first = rows.iloc[0].to_dict()
                lines.append(f"| {_md(row_label(first))} | {first['batch_size']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def judged_against(history: pd.DataFrame, kinds: dict[str, str]) -> str:
    """One line: which earlier run the latest run is judged against, and the runs of other kinds passed
    over on the way, with what they differ in."""
    order = run_order(history)
    latest = order[-1]
    alike = [r for r in order[:-1] if kinds[r] == kinds[latest]]
    if len(order) == 1:
        return f"`{latest}` is the only run shown."
    first = history.drop_duplicates("run_id").set_index("run_id")
    passed = order[order.index(alike[-1]) + 1:-1] if alike else order[:-1]
    differ = sorted({word for r in passed for word in _differs(first.loc[r].to_dict(), first.loc[latest].to_dict())})
    over = (f"; runs of other kinds passed over: {', '.join(f'`{r}`' for r in passed)} (other {', '.join(differ)})" if passed else "")
    if not alike:
        return f"`{latest}` (kind {kinds[latest]}) has no earlier run of its kind shown here: nothing is compared{over}."
    return f"`{latest}` (kind {kinds[latest]}) is judged against `{alike[-1]}`, the newest earlier run of its kind{over}."


def _differs(a: dict, b: dict) -> list[str]:
    return [word for k, word in LIKE.items() if _known(a.get(k)) and _known(b.get(k)) and a[k] != b[k]]


def run_kinds(history: pd.DataFrame) -> dict[str, str]:
    """A letter per run id, the same for runs alike (`LIKE`, read from each run's first line), in run order."""
    letters: dict[tuple, str] = {}
    kinds = {}
    for line in history.drop_duplicates("run_id").to_dict("records"):
        signature = tuple(line.get(k) if _known(line.get(k)) else None for k in LIKE)
        kinds[line["run_id"]] = letters.setdefault(signature, chr(ord("A") + len(letters) % 26))
    return kinds


def _cell(row: Optional[dict], metric: str, fmt) -> str:
    if row is None:
        return ""
    if row["status"] != "ok":
        return str(row["status"])
    return fmt(finite(row.get(metric)))


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


def history_path(history_file: Optional[str], reports_dir: Path, history_name: str = HISTORY_FILE) -> Path:
    """`gate.history_file` when set, else `<reports_dir>/<gate.history_name>` (history.jsonl; a
    `+preset=tiny` run's is history-tiny.jsonl)."""
    return Path(history_file) if history_file else Path(reports_dir) / history_name


def history_md_path(path: Path) -> Path:
    """history.md beside history.jsonl; `<stem>.md` beside any other `<reports_dir>/history-*.jsonl`."""
    path = Path(path)
    return path.with_suffix(".md") if path.name.startswith("history-") else path.parent / "history.md"


def reports_dir_of(report_dir: Path) -> Path:
    """The reports folder a sweep's report folder lies in, `<reports_dir>/<sweep>/<timestamp>/` (its sweep
    folder holds the sweep's `latest` or `latest-<overrides>` pointers): where that sweep's history lives.
    A report folder outside that layout is its own."""
    folder = Path(report_dir).resolve()
    pointed = any(p.is_symlink() for p in folder.parent.glob("latest*"))
    return folder.parent.parent if pointed else folder


def update_history(records: Iterable[RunRecord | dict[str, Any]], path: Path, cfg: Tolerances, *, runs: int = 14,
                   run_id: Optional[str] = None, git_sha: Optional[str] = None, timestamp: Optional[str] = None,
                   report_dir: Optional[Path] = None, gate: Optional[dict[tuple, str]] = None,
                   gate_passed: Optional[bool] = None, results: Optional[Results] = None) -> Path:
    """Append this run to the history file and rewrite `history.md` beside it; returns its path.
    `report_dir` is the run's report folder (its name and parent, the sweep, go into the lines),
    `gate` each key's gate verdict and `gate_passed` the run's; `results`, the records' results
    already built at `cfg.alpha`, stands for them."""
    path = Path(path)
    run = {"gate_passed": gate_passed}
    if report_dir is not None:
        run.update(sweep=Path(report_dir).parent.name, report=os.path.relpath(Path(report_dir).resolve(), path.parent.resolve()))
    append_history(records, path, run_id=run_id or default_run_id(), timestamp=timestamp, alpha=cfg.alpha,
                   git_sha=git_sha if git_sha is not None else current_git_sha(), run=run, gate=gate, results=results)
    md = render_history(load_history(path), cfg, runs=runs)
    write_text_atomic(history_md_path(path), md)
    return history_md_path(path)


__all__ = ["HISTORY_VERSION", "LIKE", "unlike", "run_kinds", "append_history", "load_history", "history_changes", "render_history", "update_history",
           "history_path", "history_md_path", "reports_dir_of", "default_run_id", "current_git_sha", "history_rows", "migrate"]
