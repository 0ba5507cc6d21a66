"""Kernel health: are the kernels the backends run as fast as this machine allows?

A quantized backend is only as fast as the kernel under it, and a kernel can silently fall back to a
slow path: FBGEMM hands out its scalar reference kernels when it reads a blank instruction set (two
cpuinfo copies, bench.cpuinfo_fix), when `FBGEMM_NO_ASMJIT` switches its JIT off, or on a build
without it. The harness then measures the fallback, and a table that should be 1.2x faster reads
0.5x. So each kernel family the registered backends use is timed once per machine and stack, on its
real code path, and judged against what it should reach here:

- FBGEMM's inference TBE lookup (`IntNBitTableBatchedEmbeddingBagsCodegen`, torchrec's quantized
  EBC) per row type: FP32, FP16, INT8, INT4, INT2 rows;
- torch's fp32 EmbeddingBag (torchrec's eager EBC);
- the fp32 GEMM (`nn.Linear`) and torch.ao's dynamic int8 Linear.

The judgments: a TBE lookup of narrower rows than fp32 must not be slower per row than the fp32
EmbeddingBag it replaces (by more than `SLOWER_THAN_EAGER`), and no lookup may run below
`MIN_GATHER_SHARE` of the machine's measured gather roofline at its row width; the int8 GEMM must
not be slower than the fp32 GEMM, and the fp32 GEMM not below `MIN_GEMM_SHARE` of the GEMM roofline.
On top of the timings, FBGEMM's detected instruction set is compared with the best the CPU's flags
allow (bench.cpuinfo_fix): a shortfall marks every FBGEMM family degraded whatever the timings say.

The probe takes a few seconds and is cached in `<cache_dir>/timing/<stack key>-kernels.json`, the
key naming the CPU, the versions, FBGEMM's instruction set, the fix's state and the environment
variables that steer the kernels, so a cache never outlives a change of any of them.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

from bench import cpuinfo_fix
from bench.hardware import timing_threads
from bench.io import write_json_atomic
from bench.measure.environment import stack_key
from bench.measure.roofline import Limits

log = logging.getLogger(__name__)

VERSION = 1
TABLES, ROWS, DIM, BATCH, CALLS = 26, 40_000, 64, 1024, 15  # one pooled lookup per table and sample
GEMM = (1024, 512, 512)  # M, K, N
SLOWER_THAN_EAGER = 1.5  # a quantized lookup more than this much slower per row than fp32 EmbeddingBag is degraded
MIN_GATHER_SHARE = 0.25  # of the gather roofline at the row's width (healthy lookups reach 60-125% here, reference kernels 5-11%)
MIN_GEMM_SHARE = 0.25  # of the GEMM roofline
INT8_GEMM_SLOWER = 1.2  # an int8 GEMM more than this much slower than fp32 is degraded

# Row type -> (FBGEMM's SparseType name, stored row bytes at DIM with FBGEMM's CPU row layout)
TBE_ROWS = {"fp32": ("FP32", 4 * DIM), "fp16": ("FP16", 2 * DIM), "int8": ("INT8", DIM + 4), "int4": ("INT4", DIM // 2 + 4),
            "int2": ("INT2", DIM // 4 + 4)}
EAGER = "embedding_bag_fp32"
JIT_SWITCHES = ("FBGEMM_NO_ASMJIT", "FBGEMM_NO_AUTOVEC", "FBGEMM_FORCE_AUTOVEC", "FBGEMM_ENABLE_INSTRUCTIONS")


def tbe_family(dtype: str) -> str:
    return f"tbe_{dtype}"


@dataclass
class Verdict:
    """One kernel family's timing and judgment (per row for lookups, per multiply-add pair for GEMMs)."""

    family: str
    healthy: bool
    measured_ns: float  # per row (lookups) or per 1000 FLOPs (GEMMs)
    expected_ns: Optional[float]  # the most it should take here (None: nothing to judge against)
    unit: str
    why: str = ""  # what it fell short of
    cause: str = ""  # the likely cause, where one is known
    fix: str = ""


def _median_ns(call: Callable[[], Any], per: int) -> float:
    """Median thread CPU time of CALLS calls after one untimed one, in ns per unit of work."""
    call()
    times = []
    for _ in range(CALLS):
        start = time.thread_time_ns()
        call()
        times.append(time.thread_time_ns() - start)
    return sorted(times)[CALLS // 2] / per


def _ids(generator: torch.Generator) -> list[torch.Tensor]:
    return [torch.randint(0, ROWS, (TABLES * BATCH,), generator=generator, dtype=torch.int32) for _ in range(CALLS + 1)]


def _time_lookups() -> dict[str, float]:
    """ns per looked-up row: torch's fp32 EmbeddingBag and FBGEMM's inference TBE at each row type, on the same ids."""
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

    g = torch.Generator().manual_seed(0)
    ids = _ids(g)
    turn = itertools.count()  # each call takes the next batch of fresh ids
    offsets = torch.arange(0, TABLES * BATCH + 1, dtype=torch.int32)
    rows = TABLES * BATCH
    out: dict[str, float] = {}
    bags = [nn.EmbeddingBag(ROWS, DIM, mode="sum", include_last_offset=True) for _ in range(TABLES)]
    bag_offsets = torch.arange(0, BATCH + 1)

    def eager() -> None:
        batch = ids[next(turn) % len(ids)].view(TABLES, BATCH).long()
        for t, bag in enumerate(bags):
            bag(batch[t], bag_offsets)

    with torch.inference_mode():
        out[EAGER] = _median_ns(eager, rows)
    for dtype, (sparse_type, _) in TBE_ROWS.items():
        tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("", ROWS, DIM, SparseType[sparse_type], EmbeddingLocation.HOST)] * TABLES,
                                                     device="cpu", pooling_mode=PoolingMode.SUM, row_alignment=1)
        tbe.fill_random_weights()
        with torch.inference_mode():
            out[tbe_family(dtype)] = _median_ns(lambda: tbe(ids[next(turn) % len(ids)], offsets), rows)
    return out


def _time_gemms() -> dict[str, float]:
    """ns per 1000 FLOPs of an fp32 Linear and torch.ao's dynamic int8 Linear at GEMM."""
    from bench.backends.ao_notice import torch_ao_calls  # noqa: PLC0415 - only the int8 GEMM needs torch.ao

    m, k, n = GEMM
    torch.manual_seed(0)
    fp32 = nn.Linear(k, n).eval()
    with torch_ao_calls():
        int8 = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(k, n)), {nn.Linear}, dtype=torch.qint8)
    x = torch.randn(m, k)
    kilo_flops = 2 * m * k * n / 1000
    with torch.inference_mode():
        return {"gemm_fp32": _median_ns(lambda: fp32(x), kilo_flops), "gemm_int8": _median_ns(lambda: int8(x), kilo_flops)}


def judge(timed: dict[str, float], limits: Optional[Limits], isa: dict[str, Any], env: dict[str, str]) -> list[Verdict]:
    """Each family's verdict from its timing, the rooflines, its peers and FBGEMM's instruction set."""
    verdicts = []
    eager = timed.get(EAGER)
    shortfall = isa.get("fbgemm_isa_shortfall")
    switched = [f"{k}={v}" for k, v in env.items() if k in JIT_SWITCHES and v]
    for family, ns in timed.items():
        if family.startswith("gemm"):
            continue
        dtype = family.removeprefix("tbe_") if family.startswith("tbe_") else "fp32"
        row_bytes = TBE_ROWS[dtype][1]
        expected, failed = lookup_bounds(ns, row_bytes, limits, eager if family != EAGER and dtype != "fp32" else None,
                                         "the gather roofline", "here", digits=1)
        verdict = Verdict(family, not failed, ns, expected, "ns/row", why="slower than " + " and ".join(failed) if failed else "")
        if family.startswith("tbe_"):
            _fbgemm_cause(verdict, shortfall, switched, isa)
        verdicts.append(verdict)
    if "gemm_fp32" in timed:
        fp32, int8 = timed["gemm_fp32"], timed.get("gemm_int8")
        bound, what = None, ""
        if limits is not None and limits.data.get("gemm_flops"):
            bound = 1e12 / limits.gemm("fp32") / MIN_GEMM_SHARE
            what = f"{MIN_GEMM_SHARE:.0%} of the fp32 GEMM roofline"
        verdicts.append(Verdict("gemm_fp32", bound is None or fp32 <= bound, fp32, bound, "ns/kFLOP",
                                why=f"slower than {what}" if bound is not None and fp32 > bound else ""))
        if int8 is not None:
            ok = int8 <= fp32 * INT8_GEMM_SLOWER
            verdicts.append(Verdict("gemm_int8", ok, int8, fp32 * INT8_GEMM_SLOWER, "ns/kFLOP",
                                    why="" if ok else f"slower than {INT8_GEMM_SLOWER}x the fp32 GEMM ({fp32:.2f} ns/kFLOP)",
                                    cause="" if ok else "torch.ao's int8 Linear fell back from FBGEMM/oneDNN's int8 kernels",
                                    fix="" if ok else "check torch.backends.quantized.engine and the CPU's int8 support"))
    return verdicts


def lookup_bounds(ns: float, width: int, limits: Any, eager: Optional[float], roofline: str, where: str,
                  digits: int) -> tuple[Optional[float], list[str]]:
    """(the most a lookup of `width`-byte rows should take, what it is slower than): a share of the machine's
    measured gather roofline at that width (`limits`, where measured) and, for a quantized lookup, a multiple
    of torch's fp32 EmbeddingBag on the same machine (`eager`). Shared by the CPU's probe and the GPU's."""
    bounds = []  # (the most it should take, against what)
    if limits is not None and str(width) in limits.data["gather_bytes_per_s"]:
        roofline_ns = width / limits.gather(width) * 1e9
        bounds.append((roofline_ns / MIN_GATHER_SHARE, f"{MIN_GATHER_SHARE:.0%} of {roofline} ({roofline_ns:.{digits}f} ns a "
                                                       f"{width}-byte row)"))
    if eager:
        bounds.append((eager * SLOWER_THAN_EAGER, f"{SLOWER_THAN_EAGER}x torch's fp32 EmbeddingBag {where} ({eager:.{digits}f} ns a row)"))
    return min((b for b, _ in bounds), default=None), [what for bound, what in bounds if ns > bound]


def _fbgemm_cause(verdict: Verdict, shortfall: Optional[str], switched: list[str], isa: dict[str, Any]) -> None:
    """A blank or forced instruction set fails every FBGEMM family, whatever its timing; a switch that
    disables the JIT explains a slow one."""
    if shortfall:
        verdict.healthy = False
        verdict.why = verdict.why or f"FBGEMM's instruction set is {isa.get('fbgemm_isa')}"
        if isa.get("cpuinfo_fix") in ("too late", "disabled", "failed", "undetermined"):
            verdict.cause = (f"{shortfall}: torch's libraries hold two cpuinfo copies and FBGEMM reads the uninitialised one "
                             f"(bench.cpuinfo_fix: {isa.get('cpuinfo_fix')})")
            verdict.fix = ("import bench before torchrec or fbgemm_gpu" if isa.get("cpuinfo_fix") == "too late" else
                           "leave BENCH_CPUINFO_FIX unset" if isa.get("cpuinfo_fix") == "disabled" else
                           "see docs/install.md (the cpuinfo trap)")
        else:
            verdict.cause, verdict.fix = shortfall, "unset FBGEMM_ENABLE_INSTRUCTIONS" if "FBGEMM_ENABLE" in shortfall else "see docs/install.md"
    elif not verdict.healthy:
        if switched:
            verdict.cause = f"{', '.join(switched)} switches FBGEMM's JIT kernels off: it runs its reference or autovectorised code"
            verdict.fix = f"unset {', '.join(s.split('=')[0] for s in switched)}"
        else:
            verdict.cause = "FBGEMM runs a fallback path (its reference kernels, or a build without its JIT)"
            verdict.fix = "profile the lookup (docs/install.md: the cpuinfo trap) or try the other tested stack"


@dataclass
class Health:
    """The probe's verdicts (or the instruction-set check alone, when the probe is off) and where they are cached."""

    verdicts: list[Verdict]
    isa: dict[str, Any]
    probed: bool
    path: Optional[str] = None
    device: str = "cpu"  # the device whose kernels were judged (cuda: bench.measure.cuda_health)

    def degraded(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.healthy]

    def as_env(self) -> dict[str, Any]:
        """What a record's environment keeps."""
        return {"device": self.device, **({"gpu": self.isa["gpu"]} if self.isa.get("gpu") else {}),
                "probed": self.probed, "path": self.path, "degraded": [v.family for v in self.degraded()],
                "verdicts": {v.family: {k: val for k, val in asdict(v).items() if k != "family"} for v in self.verdicts}}


def isa_only(isa: dict[str, Any]) -> Health:
    """Without the timing probe: a shortfall of FBGEMM's instruction set still marks every TBE family degraded."""
    verdicts = []
    if isa.get("fbgemm_isa_shortfall"):
        for dtype in TBE_ROWS:
            v = Verdict(tbe_family(dtype), True, float("nan"), None, "ns/row")
            _fbgemm_cause(v, isa["fbgemm_isa_shortfall"], [], isa)
            verdicts.append(v)
    return Health(verdicts, isa, probed=False)


def health(cache_path: Path, limits: Optional[Limits]) -> Health:
    """This machine's and stack's kernel health from the cache, or probed now (seconds) and cached."""
    isa = cpuinfo_fix.summary()
    try:
        data = json.loads(cache_path.read_text())
        if data.get("version") == VERSION:
            return Health([Verdict(**v) for v in data["verdicts"]], isa, probed=True, path=str(cache_path))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    log.info("kernel health: timing each kernel family once on this machine and stack (cached in %s)", cache_path)
    with timing_threads(1):
        timed = {**_time_lookups(), **_time_gemms()}
    verdicts = judge(timed, limits, isa, cpuinfo_fix.kernel_env())
    write_json_atomic(cache_path, {"version": VERSION, "isa": isa, "env": cpuinfo_fix.kernel_env(), "timed": timed,
                                   "verdicts": [asdict(v) for v in verdicts]})
    return Health(verdicts, isa, probed=True, path=str(cache_path))


def probe_device(device_type: str, cuda_available: bool) -> str | None:
    """Whose kernels judge a job on `device_type`: the CPU's for a CPU job, the GPU's for a CUDA job (never the
    host CPU's: a CUDA job runs none of its kernels); None where the job's device is not here (nothing to probe)."""
    if device_type == "cuda":
        return "cuda" if cuda_available else None
    return "cpu" if device_type == "cpu" else None


def cache_path(cache_dir: str | Path) -> Path:
    """`<cache_dir>/timing/<stack key>-kernels.json`, beside the timing calibration."""
    return Path(cache_dir) / "timing" / f"{stack_key(VERSION)}-kernels.json"


def row_widths() -> list[int]:
    """The stored row widths the probe judges against the gather roofline (Limits.ensure measures them)."""
    return sorted({b for _, b in TBE_ROWS.values()})
