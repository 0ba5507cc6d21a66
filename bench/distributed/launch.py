"""Start the ranks of a multi-process job from a single `python -m bench` process (a sweep's job).

The route: `python -m torch.distributed.run --standalone --nproc-per-node=N --max-restarts=0 -m
bench.distributed.worker DIR` in a session of its own. torchrun's elastic agent starts the ranks,
and stops the others as soon as one dies. Here the job's typed config goes to `DIR/job.json`; rank 0
writes what the ranks gathered to `DIR` (`bench.distributed.collect.ShardedRun`), and this process
turns it into the record's metrics.

Faults end in an exception, hence an `error` record, within bounded time: a rank that dies or
raises makes torchrun exit non-zero (its peers fail their next collective at once, or after
`sharding.timeout_s` at most); ranks still running after `sharding.job_timeout_s` are killed. Either
way torchrun's session and every rank's own session (torchrun starts each rank in one) are killed
before returning, and ranks die with their torchrun (parent-death signal), so no process is left
behind.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench
from bench.config import Config
from bench.distributed.collect import ShardedRun
from bench.io import write_json_atomic

LOG = "ranks.log"
# After asking torchrun to stop (SIGTERM: it stops its ranks), how long to wait before killing everything.
GRACE_S = 5.0


class RankFailure(RuntimeError):
    """A rank of a launched job died, raised, or did not finish in time."""


def launch(cfg: Config) -> ShardedRun:
    root = Path(cfg.cache_dir) / "ranks"
    root.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"{cfg.backend.name}-{cfg.sharding.name}-{cfg.world_size}-", dir=root))
    write_json_atomic(workdir / "job.json", dataclasses.asdict(cfg))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={cfg.world_size}",
        "--max-restarts=0", "--monitor-interval=0.1", "-m", "bench.distributed.worker", str(workdir),
    ]  # fmt: skip
    # the ranks import this very `bench` (a worktree or checkout that shadows an installed one)
    package_root = str(Path(bench.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
    # torchrun's agent makes temporary folders (torchelastic_*) it does not remove: they go to the
    # job's own folder, removed with the job whatever happens
    scratch = workdir / "tmp"
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    timeout = cfg.sharding.job_timeout_s
    with open(workdir / LOG, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            stop(proc, workdir)
            shutil.rmtree(scratch, ignore_errors=True)
    if code is None:
        raise RankFailure(f"the {cfg.world_size} ranks did not finish within sharding.job_timeout_s={timeout:g} s and were killed (log: {workdir / LOG})")
    if code != 0:
        raise RankFailure(failure(workdir, code))
    run = ShardedRun.load(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    return run


def stop(proc: subprocess.Popen, workdir: Path) -> None:
    """End torchrun and every rank it started, whatever state they are in."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)  # torchrun stops its ranks first
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc.pid, signal.SIGKILL)
    for pid in rank_pids(workdir):
        _signal_group(pid, signal.SIGKILL)  # each rank leads a session of its own
    proc.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def rank_pids(workdir: Path) -> list[int]:
    """Pids the ranks recorded when they started (`rank<N>.pid`)."""
    out = []
    for path in sorted(workdir.glob("rank*.pid")):
        try:
            out.append(int(path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return out


def failure(workdir: Path, code: int) -> str:
    """One line: which rank failed and how (torchrun's root cause first, then the ranks' own errors)."""
    root = _root_cause((workdir / LOG).read_text(errors="replace") if (workdir / LOG).exists() else "")
    parts = [root[1]] if root else []
    for path in sorted(workdir.glob("rank*.error")):
        rank, text = path.stem.removeprefix("rank"), path.read_text(errors="replace").strip()
        if text and (root is None or rank != root[0]):  # the root cause's own error is already there
            parts.append(f"rank {rank}: {text.splitlines()[-1]}")
    head = "; ".join(parts) if parts else "a rank failed"
    phases = ", ".join(f"rank {p.stem.removeprefix('rank')} {p.read_text().strip()}" for p in sorted(workdir.glob("rank*.phase")))
    return f"{head} (ranks last seen: {phases or 'none started'}; torchrun exit {code}; log: {workdir / LOG})"


_ROOT = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+).*?traceback\s*:\s*([^\n]*)", re.S)


def _root_cause(log: str) -> tuple[str, str] | None:
    """(rank, text) of the first failure torchrun observed: its exit code and cause (a signal for a killed rank)."""
    match = _ROOT.search(log)
    if match is None:
        return None
    rank, code, cause = match.group(1), int(match.group(2)), match.group(3).strip()
    if code < 0:
        return rank, f"rank {rank} died: {signal.Signals(-code).name} ({cause})"
    return rank, f"rank {rank} failed with exit code {code}" + (f" ({cause})" if cause and "To enable traceback" not in cause else "")


def wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """The pids still alive after up to `timeout_s` (for checks that nothing was left behind)."""
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"  # a zombie has exited
    except OSError:
        return False
