"""`cpu`: the host CPU, timed on the wall clock or one thread's CPU time (`timing.clock`).

Its limits: random-row gathers read with the fastest of ATen's row gathers (`index_select` of uint8 rows,
`embedding_bag` sums of 1 or 32 rows per bag over the same bytes as fp32 where the width allows) from a
buffer far larger than the last-level cache, the same buffer written from end to end (fp32 `fill_`, `zero_`),
and an fp32 matrix product beside torch.ao's dynamic int8 Linear at GEMM_SHAPE, each the best of several calls. Its kernel probe is bench.devices.cpu_probe,
judged against these limits; its memory is the host's (the peak RSS is read by bench.measure.memory).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from bench import cpuinfo_fix, hardware
from bench.batch import fresh_inputs
from bench.config import DeviceConfig
from bench.devices import cpu_probe
from bench.devices.device import CallTimer, Clock, Device
from bench.hashing import config_hash
from bench.registry import register

VERSION = 3  # of the limits' file: 2: embedding_bag with 32-row bags joins the gathers; 3: one thread is timed on its CPU time
LOOKUPS = 1 << 18  # rows gathered per timed call
REPEATS = 5
GEMM_SHAPE = (2048, 1024, 1024)  # M, K, N


def _clock():
    """With one thread, its CPU time: on a machine shared with other work the wall clock counts the
    time the thread waited for a core, and a limit measured that way falls below what a job timed
    with `timing.clock=thread_cpu` reaches (a GEMM share of 125%). With more threads the work runs
    on the pool's threads too, which the calling thread's CPU time does not see: the wall clock."""
    return time.thread_time if torch.get_num_threads() == 1 else time.perf_counter


def _best(fn, repeats: int = REPEATS) -> float:
    """Shortest of `repeats` timed calls after one untimed one (a limit is the best the machine does)."""
    clock = _clock()
    fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times)


def gather_bandwidth(row_bytes: int, total_bytes: int, buffer: torch.Tensor | None = None) -> float:
    """Bytes per second of rows of `row_bytes` gathered at uniformly random positions of a `total_bytes`
    buffer: the fastest of ATen's row gathers (index_select of uint8 rows; embedding_bag sums of 1 and
    of 32 rows per bag over the same bytes as fp32, where the width allows). `buffer`: `total_bytes` of
    uint8 already written, shared by the row widths (writing 1 GiB anew per width was most of the cost)."""
    rows = total_bytes // row_bytes
    if buffer is None:
        buffer = torch.ones(total_bytes, dtype=torch.uint8)  # written once: every page is resident
    table = buffer[: rows * row_bytes].view(rows, row_bytes)
    out = torch.empty(LOOKUPS, row_bytes, dtype=torch.uint8)
    ids = [torch.randint(rows, (LOOKUPS,)) for _ in range(REPEATS + 1)]  # fresh rows in every call
    turn = itertools.count()

    def draw() -> torch.Tensor:
        return ids[next(turn) % len(ids)]

    gathers = [lambda: torch.index_select(table, 0, draw(), out=out)]
    if row_bytes % 4 == 0:
        floats = table.view(torch.float32)
        for bag in (1, 32):
            offsets = torch.arange(0, LOOKUPS, bag)
            gathers.append(lambda offsets=offsets: F.embedding_bag(draw(), floats, offsets, mode="sum"))
    with torch.inference_mode():
        best = min(_best(gather) for gather in gathers)
    del table, buffer
    return LOOKUPS * row_bytes / best


def write_bandwidth(total_bytes: int, buffer: torch.Tensor | None = None) -> float:
    """Bytes per second of writing a `total_bytes` buffer from start to end: the fastest of ATen's fills (fp32
    `fill_`, and `zero_`, a memset). Far beyond the last-level cache, it is the memory's rate for a kernel's output
    that does not stay in cache (an unpooled lookup writes one dequantized row per id)."""
    if buffer is None:
        buffer = torch.ones(total_bytes, dtype=torch.uint8)  # written once: every page is resident
    floats = buffer[: total_bytes // 4 * 4].view(torch.float32)
    with torch.inference_mode():
        best = min(_best(lambda: floats.fill_(1.0)), _best(buffer.zero_))
    return floats.numel() * 4 / best if best else float("inf")


def gemm_flops() -> dict[str, float]:
    """FLOP/s of an fp32 matrix product and of torch.ao's dynamic int8 Linear at GEMM_SHAPE."""
    from bench.backends.ao_notice import torch_ao_calls  # noqa: PLC0415 - only the int8 GEMM needs torch.ao

    m, k, n = GEMM_SHAPE
    flops = 2 * m * k * n
    a, b = torch.randn(m, k), torch.randn(k, n)
    with torch_ao_calls():
        int8 = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(k, n)), {nn.Linear}, dtype=torch.qint8)
    with torch.inference_mode():
        return {"fp32": flops / _best(lambda: torch.mm(a, b)), "int8": flops / _best(lambda: int8(a))}


def stack_key(env: dict[str, Any], version: int) -> str:
    """The machine and stack a per-machine cache holds for (the timing calibration, the kernel probe), from a
    record's environment (bench.measure.environment): CPU model, the CPUs this process may use, torch and
    FBGEMM versions, FBGEMM's instruction set, what the cpuinfo fix did, and the environment variables that
    steer the kernels. A cache never outlives a change of any of them (a calibration timed on FBGEMM's
    reference kernels is not reused once fixed)."""
    return config_hash({"cpu": env["cpu"], "cpus": env["cpu_count"], "torch": env["torch"], "fbgemm": env["fbgemm_gpu"],
                        "fbgemm_isa": env["fbgemm_isa"], "cpuinfo_fix": env["cpuinfo_fix"], "kernel_env": cpuinfo_fix.kernel_env(),
                        "version": version}, length=12)


def timed_calls(module, trial_inputs: list[tuple], clock: Clock, test_delay: float = 0.0, second: Optional[Clock] = None) -> list:
    """Milliseconds per call on `clock`; with `second`, (ms on `clock`, ms on `second`) per call."""
    out = []
    for args in trial_inputs:
        args = fresh_inputs(args)
        start2 = second() if second is not None else 0
        start = clock()
        module(*args)
        if test_delay:  # testing only: the call does `test_delay` of its own duration more work, on the same clock
            until = clock() + (clock() - start) * test_delay
            while clock() < until:
                pass
        ms = (clock() - start) / 1e6
        out.append(ms if second is None else (ms, (second() - start2) / 1e6))
    return out


@register("device", "cpu", config=DeviceConfig)
class CpuDevice(Device):
    """The host CPU."""

    name = "cpu"
    calibrated_timing = True
    limits_version = VERSION
    probe_words = "the instruction-set check stands alone"

    def torch_device(self) -> torch.device:
        return torch.device("cpu")

    def call_timer(self, clock: Clock, test_delay: float = 0.0, second: Optional[Clock] = None) -> CallTimer:
        return lambda module, trial_inputs, device: timed_calls(module, trial_inputs, clock, test_delay, second)

    def cache_bytes(self, device: torch.device) -> Optional[int]:
        return hardware.llc_bytes()

    def gather_buffer(self, total_bytes: int, device: torch.device) -> torch.Tensor:
        return torch.ones(total_bytes, dtype=torch.uint8)  # written once: every page is resident

    def gather_bandwidth(self, row_bytes: int, total_bytes: int, device: torch.device,
                         buffer: torch.Tensor | None = None) -> float:
        return gather_bandwidth(row_bytes, total_bytes, buffer)

    def write_bandwidth(self, total_bytes: int, device: torch.device, buffer: torch.Tensor | None = None) -> float:
        return write_bandwidth(total_bytes, buffer)

    def gemm_flops(self, device: torch.device) -> dict[str, float]:
        return gemm_flops()

    def limits_stamp(self, device: torch.device) -> dict[str, Any]:
        return {"threads": torch.get_num_threads(), "clock": "thread_cpu" if _clock() is time.thread_time else "wall"}

    def probe_row_widths(self) -> list[int]:
        return cpu_probe.row_widths()

    def health(self, cache_dir: str | Path, limits: Any, device: torch.device, env: dict[str, Any]):
        return cpu_probe.health(cpu_probe.cache_path(cache_dir, stack_key(env, cpu_probe.VERSION)), limits)

    def unprobed(self, why: str) -> dict[str, Any]:
        """Without the probe, FBGEMM's instruction set is still checked (a shortfall marks every TBE family degraded)."""
        return {**cpu_probe.isa_only(cpuinfo_fix.summary()).as_env(), "why_not_probed": why}
