"""`python -m bench timing show|reset`: what this machine's timing caches hold, and a way to empty them.

`<cache_dir>/timing/` keeps, per machine and stack key: the timing calibration (`KEY.json`,
bench.pipeline.calibrate), the re-run log (`KEY-reruns.jsonl`, bench.pipeline.reruns), the served batch
times that set a Server run's usual pace (`KEY-pace.jsonl`, bench.serve.pace) and the kernel
health probe (`KEY-kernels.json`, bench.devices.cpu_probe; a GPU's: `KEY-cuda-kernels.json`, bench.devices.cuda). `show` reads them without loading
torch; `reset` deletes the re-run logs (the spread learned from re-runs starts again from the
calibration), `reset --all` every file (the next job calibrates and probes again).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from bench.io import read_jsonl
from bench.pipeline.reruns import Reruns

USAGE = "python -m bench timing show|reset [--all] [--cache-dir DIR]"


def show(folder: Path) -> list[str]:
    if not folder.is_dir():
        return [f"{folder}: no timing cache yet (the first calibrated job makes one)"]
    lines = []
    for path in sorted(folder.iterdir()):
        if path.name.endswith("-reruns.jsonl"):
            lines += _reruns(path)
        elif path.name.endswith("-pace.jsonl"):
            lines += _pace(path)
        elif path.name.endswith("-kernels.json"):
            lines += _kernels(path)
        elif path.suffix == ".json":
            lines += _calibration(path)
    return lines or [f"{folder}: empty"]


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"unreadable": str(exc)}


def _calibration(path: Path) -> list[str]:
    data = _read(path)
    out = [f"calibration {path.name}: {data.get('processes')} processes, {data.get('seconds', 0):.0f} s"]
    for m in data.get("measured", []):
        s = m.get("setting", {})
        out.append(f"  {s.get('threads')} thread(s), {s.get('clock')} clock: between processes {100 * m['process_sd']:.1f}%, "
                   f"re-run spread {100 * m['rerun_sd']:.1f}%")
    isas = {json.dumps(run.get("fbgemm")) for run in data.get("runs", []) if isinstance(run, dict) and run.get("fbgemm")}
    out += [f"  timed on: {json.loads(i).get('fbgemm_isa')} (cpuinfo fix {json.loads(i).get('cpuinfo_fix')})" for i in isas]
    return out


def _kernels(path: Path) -> list[str]:
    data = _read(path)
    verdicts = data.get("verdicts", [])
    bad = [v["family"] for v in verdicts if not v.get("healthy")]
    where = f"GPU {data.get('gpu')}" if data.get("device") == "cuda" else f"FBGEMM {(data.get('isa') or {}).get('fbgemm_isa')}"
    head = f"kernel probe {path.name}: {where}, " + (
        f"degraded: {', '.join(bad)}" if bad else f"{len(verdicts)} kernel families healthy")
    return [head] + [f"  {v['family']}: {v['measured_ns']:.1f} {v['unit']}" + (f" (at most {v['expected_ns']:.1f})" if v.get("expected_ns") else "")
                     + (", unstable: probed again next run" if v.get("stable") is False else "") for v in verdicts]


def _reruns(path: Path) -> list[str]:
    log = Reruns(path)
    groups = log.groups()
    out = [f"re-run log {path.name}: {sum(len(v) for v in groups.values())} lines of {len(groups)} jobs"
           + (f" ({log.skipped} of another version or unreadable, not used)" if log.skipped else "")]
    by_path = Counter((setting, kernels) for setting, _, _, kernels in groups)
    for (setting, kernels), jobs in sorted(by_path.items()):
        spread = Reruns(path, kernels).spread(setting, 0)
        text = f"between runs {100 * spread.sd:.1f}% from {spread.df} re-runs" if spread else "no job measured twice yet"
        out.append(f"  {setting}; {kernels}: {jobs} jobs, {text}")
    return out


def _pace(path: Path) -> list[str]:
    lines = [obj for _, obj in read_jsonl(path).lines]
    runs, versions = Counter(obj.get("setup") for obj in lines), Counter(obj.get("v") for obj in lines)
    # a job reads only its own version's lines (bench.serve.pace.VERSION): say so where the log holds several
    kinds = "" if len(versions) < 2 else "; by log version " + ", ".join(f"{v}: {n}" for v, n in sorted(versions.items(), key=str)) + \
        " (a job reads its own version's only)"
    return [f"pace log {path.name}: {sum(runs.values())} served runs of {len(runs)} serving setups (a Server run's usual batch time){kinds}"]


def reset(folder: Path, everything: bool) -> list[str]:
    if not folder.is_dir():
        return [f"{folder}: nothing to reset"]
    gone = [p for p in sorted(folder.iterdir()) if p.is_file() and (everything or p.name.endswith("-reruns.jsonl"))]
    for p in gone:
        p.unlink()
    return [f"removed {p}" for p in gone] or [f"{folder}: no re-run log to remove"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench timing", usage=USAGE)
    parser.add_argument("action", choices=["show", "reset"])
    parser.add_argument("--all", action="store_true", help="reset: also the calibrations and kernel probes")
    parser.add_argument("--cache-dir", default=".cache/bench", help="the cache_dir the jobs used (default .cache/bench)")
    def refuse(message: str) -> None:  # one line and exit 2, as every bad input
        print(f"error: {message} (usage: {USAGE})", file=sys.stderr)
        raise SystemExit(2)

    parser.error = refuse  # type: ignore[method-assign]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    folder = Path(args.cache_dir) / "timing"
    lines = show(folder) if args.action == "show" else reset(folder, args.all)
    print("\n".join(lines), file=sys.stdout)
    return 0
