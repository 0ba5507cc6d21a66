"""Helpers for the parameter-server tests: find live redis-server processes through /proc."""

from __future__ import annotations

import time
from pathlib import Path


def is_running(pid: int) -> bool:
    """True while `pid` is a live (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def redis_children(parent: int) -> list[int]:
    """Live redis-server processes whose parent is `parent`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        if comm.startswith("redis-server") and int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def wait_until(predicate, timeout: float = 20.0, step: float = 0.05) -> bool:
    """Poll `predicate` until it holds or `timeout` passes (a bound on waiting, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def gone(pids) -> bool:
    return not any(is_running(p) for p in pids)



