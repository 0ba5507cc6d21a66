"""Testing only: a backend made slower on purpose (`backend.planted_slowdown`), for the run-vs-run compare
to find (tests/test_compare_runs.py).

The slowdown sits inside the module's own call (a forward pre-hook and hook), so every caller sees it: the
paired rounds against fp32 time the candidate's call with it and the reference's without, and the paired
speedup falls by the factor. The hook busy-waits, on the clock the call is timed with where that can be
told (the thread's CPU time with one torch thread, as `timing.clock=thread_cpu` times it; else the wall
clock), for (factor - 1) of the call's own duration: real work on the timed thread, not a sleep that a
CPU clock would not count.
"""

from __future__ import annotations

import threading
import time

import torch
from torch import nn


def _clock():
    return time.thread_time if torch.get_num_threads() == 1 else time.perf_counter


def plant_slowdown(module: nn.Module, factor: float | None) -> nn.Module:
    """`module` with every call made `factor` times as long (None or 1: as it is); returns it."""
    if factor is None or factor == 1:
        return module
    starts: dict[int, float] = {}  # per calling thread (a server's workers call one module)

    def before(_module, _args):
        starts[threading.get_ident()] = _clock()()

    def after(_module, _args, _output):
        clock = _clock()
        now = clock()
        until = now + (now - starts.pop(threading.get_ident())) * (factor - 1)
        while clock() < until:
            pass

    module.register_forward_pre_hook(before)
    module.register_forward_hook(after)
    return module
