"""The one hardware probe: threads, the allocator, CPU model, caches, GPU memory, memory available and peak RSS.

Everything that asks the machine or the kernel about itself lives here; configs only describe, and
the devices (bench.devices), the measuring code (bench.measure) and the memory guard call these functions.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import platform
import resource
from pathlib import Path
from typing import Iterator

import torch

from bench.errors import UserError

def set_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (None keeps the default) and return the count in force."""
    if threads is not None:
        if threads < 1:
            raise UserError(f"threads must be a positive integer, got {threads} (threads=N)")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


@contextlib.contextmanager
def timing_threads(threads: int | None) -> Iterator[int]:
    """Run a block (the timed calls) at `threads` intra-op threads (None: as they are), then restore the count."""
    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
MMAP_THRESHOLD = 32 << 20  # glibc's maximum
TRIM_THRESHOLD = 256 << 20
MMAP_MAX = 0  # no mmap'd blocks at all (see pin_malloc)
_malloc_settings: dict | None = None


def pin_malloc() -> dict | None:
    """Pin glibc's allocator so large activations reuse heap memory instead of fresh pages.

    By default glibc moves its mmap threshold with the allocation history: the same batch-4096
    forward then either reuses heap memory or maps and page-faults fresh memory on every call,
    and its timing flips between two modes (docs/measuring.md). A fixed threshold is not enough
    for large batches: glibc caps it at 32 MiB, and a large batch's outputs are then mapped and
    faulted anew on every call (thousands of minor faults per call, none without mmap). So mmap
    is switched off (M_MMAP_MAX=0): every block comes from the heap and
    is reused; what jobs free goes back to the kernel through `release_free_memory` between jobs.
    Returns the settings in force (None where the C library is not glibc), recorded in the run's
    environment.
    """
    global _malloc_settings
    if _malloc_settings is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            ok = all(libc.mallopt(param, value) == 1 for param, value in (
                (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_MMAP_MAX, MMAP_MAX)))
        except (OSError, AttributeError):
            ok = False
        _malloc_settings = {"allocator": "glibc", "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD,
                            "mmap_max": MMAP_MAX} if ok else {}
    return _malloc_settings or None


def release_free_memory() -> None:
    """Hand memory that freed objects left in glibc's heap back to the kernel (malloc_trim), so the
    next job's resident set does not carry it."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def malloc_settings() -> dict | None:
    """The allocator settings this process pinned, or None when it runs on the defaults."""
    return _malloc_settings or None


def prepare_process(cfg, threads: int | None) -> int:
    """Process-wide settings for a measured job: thread count, and the allocator when asked."""
    if cfg.pin_malloc:
        pin_malloc()
    return set_threads(threads)


# ------------------------------------------------------------------------------------ CPU and GPU


HUGE_PAGE = 2 << 20  # x86-64's transparent huge page
_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25  # Linux 6.1 on: make the range huge pages now, in place, whatever the THP mode


def huge_bytes_in(ranges: dict[int, int]) -> int | None:
    """Bytes in transparent huge pages inside the address `ranges` (start -> end), from /proc/self/smaps: each mapping's
    `AnonHugePages`, up to its overlap with the ranges; None where Linux does not say."""
    try:
        text = Path("/proc/self/smaps").read_text()
    except OSError:
        return None
    total, overlap = 0, 0
    for line in text.splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):  # a mapping's first line: start-end perms offset ...
            lo, hi = (int(x, 16) for x in head.split("-"))
            overlap = sum(max(0, min(hi, end) - max(lo, start)) for start, end in ranges.items())
        elif head == "AnonHugePages:" and overlap:
            total += min(int(line.split()[1]) << 10, overlap)
    return total


def back_with_huge_pages(tensors: list[torch.Tensor]) -> dict:
    """Back the memory of `tensors` (a model's tables, already written) with transparent huge pages, as a
    deployment asks for them: `madvise(MADV_HUGEPAGE)` and `madvise(MADV_COLLAPSE)` over the whole 2 MiB pages
    inside each one's storage; the rows stay where they are and keep their bytes. A lookup at a random row of a
    table far beyond the caches then misses the TLB once per 2 MiB instead of once per 4 KiB page
    (docs/sequential.md has what that buys). Returns what was asked and what the kernel gave: `bytes` (the
    whole huge pages inside the tables), `huge_bytes` (how many of them are huge pages now, read back from
    /proc/self/smaps), `error` (the first
    madvise that failed, with its errno; the tables then stay as they were)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    ranges = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        start = -(-storage.data_ptr() // HUGE_PAGE) * HUGE_PAGE
        end = (storage.data_ptr() + storage.nbytes()) // HUGE_PAGE * HUGE_PAGE
        if end > start:
            ranges[start] = end
    error = None
    for start, end in sorted(ranges.items()):
        for advice, name in ((_MADV_HUGEPAGE, "MADV_HUGEPAGE"), (_MADV_COLLAPSE, "MADV_COLLAPSE")):
            if libc.madvise(start, end - start, advice) != 0 and error is None:
                error = f"madvise({name}) failed: {os.strerror(ctypes.get_errno())}"
    return {"bytes": sum(end - start for start, end in ranges.items()), "huge_bytes": huge_bytes_in(ranges), "error": error}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask), not the machine's total."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def llc_bytes() -> int | None:
    """Size of the last-level cache cpu0 sees (sysfs: the highest-level data or unified cache), or None."""
    best: tuple[int, int] | None = None
    try:
        for index in CPU_CACHES.glob("index*"):
            if (index / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            size = _size_bytes((index / "size").read_text().strip())
            if best is None or level > best[0]:
                best = (level, size)
    except (OSError, ValueError):
        return None
    return best[1] if best else None


def _size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def gpu_name(device: torch.device | None) -> str | None:
    return torch.cuda.get_device_name(device) if device is not None and device.type == "cuda" else None


def release_gpu_cache() -> None:
    """Hand cached CUDA blocks back to the driver (after an out-of-memory), where there is a GPU."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def gpu_free_bytes(device: torch.device) -> int:
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def load_average() -> float | None:
    """The 1-minute load average (runnable tasks, this process's threads included), or None."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) CPU ticks of the whole machine since boot (/proc/stat), or None.

    Steal is time a hypervisor gave this VM's virtual CPUs to someone else: on a shared cloud
    machine it is the background load a process cannot see in its own load average.
    """
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        ticks = [int(x) for x in fields]
    except (OSError, ValueError, IndexError):
        return None
    steal = ticks[7] if len(ticks) > 7 else 0
    return steal, sum(ticks[:8])


# ----------------------------------------------------------------------------------------- memory

MEMINFO = Path("/proc/meminfo")


def mem_available_bytes() -> int | None:
    """The kernel's estimate of memory available without swapping (MemAvailable), or None."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset this process's RSS high-water mark (Linux /proc/self/clear_refs); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _status_bytes(field: str) -> int | None:
    """A kB field of /proc/self/status (VmRSS, VmHWM) in bytes, or None where there is none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_bytes() -> int | None:
    """This process's resident set now (VmRSS), or None."""
    return _status_bytes("VmRSS")


def minor_faults() -> int:
    """Minor page faults of this process so far (pages touched for the first time, or mapped anew)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def peak_rss_bytes() -> int:
    """This process's RSS high-water mark since the last reset (VmHWM)."""
    peak = _status_bytes("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
