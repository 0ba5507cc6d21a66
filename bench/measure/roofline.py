"""The roofline: what this machine can do at most, and what share of it a job reached.

Two limits, measured once per machine fingerprint (CPU, GPU, threads) and cached in
`<cache_dir>/roofline/<fingerprint>.json`:
- random-row gather bandwidth, per stored row width: rows drawn uniformly from a buffer far larger
  than the last-level cache (so from DRAM), read with the fastest of ATen's row gathers
  (`index_select` of uint8 rows, `embedding_bag` sums of 1 or 32 rows per bag over the same bytes
  as fp32 where the width allows), best of several calls. It is measured per width because a
  36-byte INT4 row costs a whole cache line or two where a 256-byte fp32 row costs four: bytes per
  second fall with the width.
- GEMM throughput: an fp32 matrix product and torch.ao's dynamic int8 Linear, both 2048 x 1024 x 1024.

A job's share of the embedding limit is the time its embedding traffic would take at the measured
gather bandwidth (each table's lookups per sample x stored row bytes / the bandwidth at that row
width) over the time it took per sample. Above 100% means some rows came from cache, not DRAM:
a skewed (Zipf) access pattern does that. The dense share does the same for the matrix products'
FLOPs against the GEMM limit of the kernel type (fp32 or int8) that ran them.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from pathlib import Path
from typing import Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from bench import hardware
from bench.io import write_json_atomic
from bench.progress import once_per_machine

log = logging.getLogger(__name__)

VERSION = 3  # 2: embedding_bag with 32-row bags joins the gathers; 3: one thread is timed on its CPU time
LOOKUPS = 1 << 18  # rows gathered per timed call
REPEATS = 5
MIN_BUFFER = 1 << 30  # at least 1 GiB, and 32x the last-level cache
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


def buffer_bytes() -> int:
    llc = hardware.llc_bytes() or (32 << 20)
    want = max(MIN_BUFFER, 32 * llc)
    available = hardware.mem_available_bytes()
    return min(want, available // 4) if available else want


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


class Limits:
    """The cached limits of one machine fingerprint; missing row widths are measured on demand."""

    def __init__(self, cache_dir: Path, fingerprint: str) -> None:
        self.path = Path(cache_dir) / "roofline" / f"{fingerprint}.json"
        self.fingerprint = fingerprint
        self.data = self._read()

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") == VERSION:
                return data
        except (OSError, ValueError):
            pass
        return {"version": VERSION, "fingerprint": self.fingerprint, "gather_bytes_per_s": {}, "gemm_flops": None}

    def ensure(self, row_widths: Iterable[int], total_bytes: int | None = None) -> "Limits":
        """Measure what is missing (gather bandwidth at new row widths, GEMM throughput) and store it."""
        missing = sorted({int(w) for w in row_widths} - {int(w) for w in self.data["gather_bytes_per_s"]})
        if not missing and self.data["gemm_flops"]:
            return self
        total = total_bytes or buffer_bytes()
        log.info("roofline: measuring gather bandwidth at row widths %s over %.1f GiB, and GEMM throughput", missing, total / 2**30)
        with once_per_machine("roofline"):
            buffer = torch.ones(total, dtype=torch.uint8) if missing else None  # one for every width
            for width in missing:
                self.data["gather_bytes_per_s"][str(width)] = gather_bandwidth(width, total, buffer)
            del buffer
            self.data["gather_buffer_bytes"] = total
            if not self.data["gemm_flops"]:
                self.data["gemm_flops"] = gemm_flops()
        self.data["threads"] = torch.get_num_threads()
        self.data["clock"] = "thread_cpu" if _clock() is time.thread_time else "wall"
        write_json_atomic(self.path, self.data)
        return self

    def raise_gemm(self) -> "Limits":
        """Measure GEMM throughput again and keep the faster figure of each kind.

        A limit measured while other work shared the cores is too low, and nothing dense can run faster
        than the machine's GEMM: a job past 100% of it shows the cached figure was such a one.
        """
        again = gemm_flops()
        self.data["gemm_flops"] = {k: max(float(v), again.get(k, 0.0)) for k, v in self.data["gemm_flops"].items()}
        write_json_atomic(self.path, self.data)
        return self

    def gather(self, row_bytes: int) -> float:
        return float(self.data["gather_bytes_per_s"][str(int(row_bytes))])

    def gemm(self, kind: str) -> float:
        return float(self.data["gemm_flops"][kind])


def roofline_metrics(throughput: float, lookups: Mapping[str, float], row_bytes: Mapping[str, int], dense_flops: float,
                     int8_fraction: float, limits: Limits, half_fraction: float = 0.0) -> dict:
    """Shares of the limits a job reached at `throughput` samples/s.

    `lookups`: table -> rows looked up per sample; `row_bytes`: table -> stored row bytes;
    `dense_flops`: matrix-product FLOPs per sample, `int8_fraction` of them in int8 kernels, `half_fraction`
    in fp16/bf16 ones (read against the fp16 GEMM limit where one was measured: a GPU's; the fp32 one on CPU),
    the rest in fp32. `limits` is this machine's (Limits) or its GPU's (bench.measure.cuda_health.GpuLimits).
    """
    per_sample = sum(lookups[t] * row_bytes[t] for t in lookups)
    at_limit = sum(lookups[t] * row_bytes[t] / limits.gather(row_bytes[t]) for t in lookups)  # seconds per sample
    half_kind = "fp16" if "fp16" in (limits.data.get("gemm_flops") or {}) else "fp32"
    dense_at_limit = dense_flops * ((1 - int8_fraction - half_fraction) / limits.gemm("fp32")
                                    + (int8_fraction / limits.gemm("int8") if int8_fraction else 0.0)
                                    + (half_fraction / limits.gemm(half_kind) if half_fraction else 0.0))
    return {
        "embedding_bytes_per_sample": per_sample,
        "embedding_bytes_per_s": throughput * per_sample,
        "embedding_share": throughput * at_limit,
        "gather_limit_bytes_per_s": per_sample / at_limit if at_limit else None,  # traffic-weighted over the row widths
        "dense_share": throughput * dense_at_limit,
        "row_widths": sorted({int(w) for w in row_bytes.values()}),
        "dense_half_fraction": half_fraction,
        "limits": {"fingerprint": limits.fingerprint, "gather_bytes_per_s": {str(w): limits.gather(w) for w in sorted(set(row_bytes.values()))},
                   "gemm_flops": limits.data["gemm_flops"]},
    }

