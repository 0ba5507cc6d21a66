"""`cuda`: a CUDA GPU (`device.index`), timed by CUDA events; a GPU job judged by the GPU, never by the host CPU.

The CPU probe (bench.devices.cpu_probe) times the host's kernels against the host's limits; a CUDA job
runs none of them. So a CUDA job gets its own probe, the same design on the GPU:

- FBGEMM's inference TBE (`IntNBitTableBatchedEmbeddingBagsCodegen` in device memory, rows aligned to 16
  bytes as FBGEMM's CUDA kernels take them) at each row type, FP32 to INT2, and torch's fp32 EmbeddingBag
  (torchrec's eager EBC), each in ns per looked-up row;
- a dense GEMM (`torch.mm`) in fp32 and in fp16, the dense paths of the CUDA jobs (bench.config.dense_path);

judged against the GPU's own measured limits (bench.devices.roofline.Limits, cached per machine fingerprint in
`<cache_dir>/roofline/<fingerprint>-cuda.json`): the bandwidth of a random-row gather from device memory
at each stored row width (`index_select` of uint8 rows from a buffer far larger than the L2 cache), and
the dense GEMM throughput per dtype. Every timing is the median (probe) or best (limit) of several calls
between CUDA events. The verdicts are cached once per GPU and stack in
`<cache_dir>/timing/<key>-cuda-kernels.json`, the key naming the GPU, torch, its CUDA and FBGEMM.

The functions take the device, so the same code runs on the CPU where there is no GPU (the tests); only
the clock differs (`device_clock`). A job's timed calls are read between the same CUDA events
(`cuda_events`), the trial synchronised once; its memory peak is the CUDA allocator's.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import torch
import torch.nn.functional as F

from bench import hardware
from bench.batch import fresh_inputs
from bench.config import DeviceConfig
from bench.devices.device import CallTimer, Clock, Device
from bench.devices.health import EAGER, MIN_GEMM_SHARE, Health, Verdict, tbe_family
from bench.hashing import config_hash
from bench.io import write_json_atomic
from bench.registry import register

log = logging.getLogger(__name__)

VERSION = 1  # of the probe's cache and of the limits' file
TABLES, ROWS, DIM, BATCH, CALLS = 26, 40_000, 64, 1024, 15  # as the CPU probe: one pooled lookup per table and sample
GEMM = (1024, 512, 512)  # M, K, N of the probe's GEMM
LIMIT_GEMM = (4096, 4096, 4096)  # the limit's GEMM: large enough to reach the tensor cores' throughput
LOOKUPS = 1 << 20  # rows gathered per timed call of the limit
REPEATS = 5
ROW_ALIGNMENT = 16  # FBGEMM's CUDA TBE rows (its default off the CPU; bench.backends.tbe.row_alignment)
SPARSE_TYPES = {"fp32": "FP32", "fp16": "FP16", "int8": "INT8", "int4": "INT4", "int2": "INT2"}
GEMM_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
# The probe's single-shot bounds (`lookup_bounds`)
SLOWER_THAN_EAGER = 1.5  # a quantized lookup more than this much slower per row than fp32 EmbeddingBag is degraded
MIN_GATHER_SHARE = 0.25  # of the gather roofline at the row's width


def row_bytes(dtype: str, dim: int = DIM, alignment: int = ROW_ALIGNMENT) -> int:
    """Stored bytes of one row of `dtype` at `dim`, as FBGEMM lays it out (`rounded_row_size_in_bytes`)."""
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import rounded_row_size_in_bytes

    return int(rounded_row_size_in_bytes(dim, SparseType[SPARSE_TYPES[dtype]], alignment))


def row_widths() -> list[int]:
    """The stored row widths the CUDA probe judges against the gather roofline."""
    return sorted({row_bytes(d) for d in SPARSE_TYPES})


def cuda_events(calls: list[Callable[[], Any]], device: torch.device) -> list[float]:
    """Seconds each call took between CUDA events, one pair per call, synchronised once at the end."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in calls]
    for call, (start, end) in zip(calls, events):
        start.record()
        call()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / 1e3 for start, end in events]


def device_clock(device: torch.device) -> Callable[[Callable[[], Any]], float]:
    """A function that times one call in seconds: between CUDA events on a GPU, the wall clock elsewhere."""
    if device.type == "cuda":
        return lambda call: cuda_events([call], device)[0]

    def wall(call: Callable[[], Any]) -> float:
        start = time.perf_counter()
        call()
        return time.perf_counter() - start

    return wall


def timed_calls(module, trial_inputs: list[tuple], device: torch.device) -> list[float]:
    """Milliseconds per call of a job's timed calls, each between CUDA events (inputs made fresh before the clock starts)."""
    fresh = [fresh_inputs(args) for args in trial_inputs]
    return [s * 1e3 for s in cuda_events([lambda args=args: module(*args) for args in fresh], device)]


def _times(call: Callable[[], Any], clock: Callable[[Callable[[], Any]], float], n: int) -> list[float]:
    call()  # warm: the first call pays for kernel selection and allocation
    return [clock(call) for _ in range(n)]


def median_ns(call: Callable[[], Any], per: float, clock: Callable[[Callable[[], Any]], float], n: int = CALLS) -> float:
    return sorted(_times(call, clock, n))[n // 2] * 1e9 / per


# ------------------------------------------------------------------------------------------ limits


def gather_bandwidth(row_width: int, total_bytes: int, device: torch.device, lookups: int = LOOKUPS,
                     clock: Optional[Callable] = None) -> float:
    """Bytes per second of `row_width`-byte rows gathered at uniformly random positions of a `total_bytes`
    buffer in the device's memory (`index_select` of uint8 rows), the best of REPEATS calls."""
    clock = clock or device_clock(device)
    rows = max(1, total_bytes // row_width)
    table = torch.ones(rows, row_width, dtype=torch.uint8, device=device)
    out = torch.empty(lookups, row_width, dtype=torch.uint8, device=device)
    ids = [torch.randint(rows, (lookups,), device=device) for _ in range(REPEATS + 1)]
    turn = itertools.count()
    best = min(_times(lambda: torch.index_select(table, 0, ids[next(turn) % len(ids)], out=out), clock, REPEATS))
    del table
    return lookups * row_width / best


def write_bandwidth(total_bytes: int, device: torch.device, clock: Optional[Callable] = None) -> float:
    """Bytes per second of writing a `total_bytes` buffer in the device's memory from end to end (`fill_`), the
    best of REPEATS calls."""
    clock = clock or device_clock(device)
    buffer = torch.ones(max(1, total_bytes // 4), dtype=torch.float32, device=device)
    best = min(_times(lambda: buffer.fill_(1.0), clock, REPEATS))
    return buffer.numel() * 4 / best


def gemm_flops(device: torch.device, shape: tuple[int, int, int] = LIMIT_GEMM, clock: Optional[Callable] = None) -> dict[str, float]:
    """FLOP/s of `torch.mm` at `shape` per dtype of GEMM_DTYPES, the best of REPEATS calls."""
    clock = clock or device_clock(device)
    with torch.inference_mode():
        return {name: flops / min(_times(lambda: torch.mm(a, b), clock, REPEATS)) for name, a, b, flops in _gemm_operands(device, shape)}


def _gemm_operands(device: torch.device, shape: tuple[int, int, int]) -> Iterable[tuple[str, torch.Tensor, torch.Tensor, int]]:
    """(dtype name, A, B, FLOPs of A @ B) per dtype of GEMM_DTYPES, random operands of `shape` (m, k, n) on `device`."""
    m, k, n = shape
    for name, dtype in GEMM_DTYPES.items():
        yield name, torch.randn(m, k, device=device).to(dtype), torch.randn(k, n, device=device).to(dtype), 2 * m * k * n


# ------------------------------------------------------------------------------------------- probe


def time_lookups(device: torch.device, tables: int = TABLES, rows: int = ROWS, batch: int = BATCH, calls: int = CALLS,
                 clock: Optional[Callable] = None) -> dict[str, float]:
    """ns per looked-up row on `device`: torch's fp32 EmbeddingBag and FBGEMM's inference TBE at each row type,
    on the same ids (the TBE's rows in device memory, aligned as FBGEMM's CUDA kernels take them)."""
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

    clock = clock or device_clock(device)
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, rows, (tables * batch,), generator=g, dtype=torch.int32).to(device) for _ in range(calls + 1)]
    turn = itertools.count()
    offsets = torch.arange(0, tables * batch + 1, dtype=torch.int32, device=device)
    looked_up = tables * batch
    out: dict[str, float] = {}
    weights = torch.randn(tables, rows, DIM, device=device)
    bag_offsets = torch.arange(0, batch, device=device)

    def eager() -> None:
        batch_ids = ids[next(turn) % len(ids)].view(tables, batch).long()
        for t in range(tables):
            F.embedding_bag(batch_ids[t], weights[t], bag_offsets, mode="sum")

    location = EmbeddingLocation.DEVICE if device.type == "cuda" else EmbeddingLocation.HOST
    with torch.inference_mode():
        out[EAGER] = median_ns(eager, looked_up, clock, calls)
        del weights
        for dtype, sparse_type in SPARSE_TYPES.items():
            tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("", rows, DIM, SparseType[sparse_type], location)] * tables,
                                                         device=device, pooling_mode=PoolingMode.SUM, row_alignment=ROW_ALIGNMENT)
            tbe.fill_random_weights()
            out[tbe_family(dtype)] = median_ns(lambda: tbe(ids[next(turn) % len(ids)], offsets), looked_up, clock, calls)
            del tbe
    return out


def time_gemms(device: torch.device, shape: tuple[int, int, int] = GEMM, calls: int = CALLS,
               clock: Optional[Callable] = None) -> dict[str, float]:
    """ns per 1000 FLOPs of `torch.mm` at `shape` in fp32 and fp16 on `device`."""
    clock = clock or device_clock(device)
    with torch.inference_mode():
        return {f"gemm_{name}": median_ns(lambda: torch.mm(a, b), flops / 1000, clock, calls) for name, a, b, flops in _gemm_operands(device, shape)}


def lookup_bounds(ns: float, width: int, limits: Any, eager: Optional[float], roofline: str, where: str,
                  digits: int) -> tuple[Optional[float], list[str]]:
    """(the most a lookup of `width`-byte rows should take, what it is slower than): a share of the machine's
    measured gather roofline at that width (`limits`, where measured) and, for a quantized lookup, a multiple
    of torch's fp32 EmbeddingBag on the same machine (`eager`). The GPU's single-shot probe."""
    bounds = []  # (the most it should take, against what)
    if limits is not None and str(width) in limits.data["gather_bytes_per_s"]:
        roofline_ns = width / limits.gather(width) * 1e9
        bounds.append((roofline_ns / MIN_GATHER_SHARE, f"{MIN_GATHER_SHARE:.0%} of {roofline} ({roofline_ns:.{digits}f} ns a "
                                                       f"{width}-byte row)"))
    if eager:
        bounds.append((eager * SLOWER_THAN_EAGER, f"{SLOWER_THAN_EAGER}x torch's fp32 EmbeddingBag {where} ({eager:.{digits}f} ns a row)"))
    return min((b for b, _ in bounds), default=None), [what for bound, what in bounds if ns > bound]


def judge(timed: dict[str, float], limits: Any) -> list[Verdict]:
    """Each family's verdict against the GPU's own limits (and the eager lookup, as on CPU)."""
    verdicts = []
    eager = timed.get(EAGER)
    for family, ns in timed.items():
        if family.startswith("gemm_"):
            kind = family.removeprefix("gemm_")
            bound = 1e12 / limits.gemm(kind) / MIN_GEMM_SHARE if limits is not None and (limits.data.get("gemm_flops") or {}).get(kind) else None
            slow = bound is not None and ns > bound
            verdicts.append(Verdict(family, not slow, ns, bound, "ns/kFLOP",
                                    why=f"slower than {MIN_GEMM_SHARE:.0%} of the GPU's {kind} GEMM roofline" if slow else "",
                                    cause="the GEMM ran off the GPU's fast path (cuBLAS fell back, or the device is throttled or shared)" if slow else "",
                                    fix="check nvidia-smi for clocks and other processes on the GPU" if slow else ""))
            continue
        dtype = family.removeprefix("tbe_") if family.startswith("tbe_") else "fp32"
        width = row_bytes(dtype, alignment=ROW_ALIGNMENT if family != EAGER else 1)
        expected, failed = lookup_bounds(ns, width, limits, eager if family != EAGER and dtype != "fp32" else None,
                                         "the GPU's gather roofline", "on this GPU", digits=2)
        verdicts.append(Verdict(family, not failed, ns, expected, "ns/row", why="slower than " + " and ".join(failed) if failed else "",
                                cause="FBGEMM's CUDA TBE kernel runs a slow path here" if failed and family != EAGER else "",
                                fix="profile the lookup with torch.profiler on this GPU" if failed and family != EAGER else ""))
    return verdicts


def stack(env: dict[str, Any]) -> dict[str, Any]:
    """What a GPU probe's cache holds for: the GPU, torch and its CUDA, FBGEMM (from a record's environment on the GPU,
    bench.measure.environment)."""
    return {"gpu": env["gpu"], "torch": env["torch"], "cuda": torch.version.cuda, "fbgemm": env["fbgemm_gpu"], "version": VERSION}


def cache_path(cache_dir: str | Path, env: dict[str, Any]) -> Path:
    """`<cache_dir>/timing/<GPU stack key>-cuda-kernels.json`, beside the CPU probe's."""
    return Path(cache_dir) / "timing" / f"{config_hash(stack(env), length=12)}-cuda-kernels.json"


def health(path: Path, limits: Any, device: torch.device, env: dict[str, Any]) -> Health:
    """This GPU's and stack's kernel health from the cache, or probed now (seconds) and cached."""
    about = {"device": device.type, "gpu": hardware.gpu_name(device)}
    try:
        data = json.loads(path.read_text())
        if data.get("version") == VERSION:
            return Health([Verdict(**v) for v in data["verdicts"]], about, probed=True, path=str(path), device=device.type)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    log.info("kernel health (GPU): timing each kernel family once on this GPU and stack (cached in %s)", path)
    timed = {**time_lookups(device), **time_gemms(device)}
    verdicts = judge(timed, limits)
    write_json_atomic(path, {"version": VERSION, **about, "stack": stack(env), "timed": timed, "verdicts": [asdict(v) for v in verdicts]})
    return Health(verdicts, about, probed=True, path=str(path), device=device.type)


@register("device", "cuda", config=DeviceConfig)
class CudaDevice(Device):
    """A CUDA GPU: `device.index` of this machine's."""

    name = "cuda"
    uncalibrated = "CUDA: timed by CUDA events"
    clock_name = "cuda_events"
    limits_suffix = "-cuda"
    limits_version = VERSION
    tables_on_host = False
    memory_name = "GPU"
    process_group = "nccl"
    probe_words = "CUDA jobs are not judged by it"
    gemm_shape = LIMIT_GEMM  # the limit's GEMM

    def torch_device(self) -> torch.device:
        return torch.device("cuda", self.cfg.index)

    def missing(self) -> Optional[str]:
        if not torch.cuda.is_available():
            return "no CUDA device on this machine"
        if self.cfg.index >= torch.cuda.device_count():
            return f"cuda:{self.cfg.index} does not exist ({torch.cuda.device_count()} CUDA devices)"
        return None

    def available(self) -> bool:
        return torch.cuda.is_available()

    def rank_device(self, device: torch.device, local_rank: int) -> torch.device:
        return torch.device("cuda", local_rank)

    def select(self, device: torch.device) -> None:
        torch.cuda.set_device(device)

    def call_timer(self, clock: Clock, test_delay: float = 0.0, second: Optional[Clock] = None) -> CallTimer:
        return timed_calls

    # The limits and the probe take the torch device: on a CPU one (the tests) they run there, on the wall clock.
    def cache_bytes(self, device: torch.device) -> Optional[int]:
        return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) if device.type == "cuda" else hardware.llc_bytes()

    def buffer_free_bytes(self, device: torch.device) -> Optional[int]:
        return hardware.gpu_free_bytes(device) if device.type == "cuda" else hardware.mem_available_bytes()

    def gather_bandwidth(self, row_bytes: int, total_bytes: int, device: torch.device, buffer=None) -> float:
        return gather_bandwidth(row_bytes, total_bytes, device)

    def write_bandwidth(self, total_bytes: int, device: torch.device, buffer=None) -> float:
        return write_bandwidth(total_bytes, device)

    def gemm_flops(self, device: torch.device) -> dict[str, float]:
        return gemm_flops(device, self.gemm_shape)

    def limits_stamp(self, device: torch.device) -> dict[str, Any]:
        return {"clock": "cuda_events" if device.type == "cuda" else "wall"}

    def probe_row_widths(self) -> list[int]:
        return row_widths()

    def health(self, cache_dir: str | Path, limits: Any, device: torch.device, env: dict[str, Any]) -> Health:
        return health(cache_path(cache_dir, env), limits, device, env)

    def reset_peak(self, device: torch.device) -> None:
        torch.cuda.reset_peak_memory_stats(device)

    def peak_bytes(self, device: torch.device) -> Optional[int]:
        return int(torch.cuda.max_memory_allocated(device))

    def free_bytes(self, device: torch.device) -> Optional[int]:
        return hardware.gpu_free_bytes(device)
