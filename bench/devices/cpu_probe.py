"""The CPU's kernel probe: are the kernels the backends run as fast as this machine allows?

A quantized backend is only as fast as the kernel under it, and a kernel can silently fall back to a
slow path: FBGEMM hands out its scalar reference kernels when it reads a blank instruction set (two
cpuinfo copies, bench.cpuinfo_fix), when `FBGEMM_NO_ASMJIT` switches its JIT off, or on a build
without it. The harness then measures the fallback, and a table that should be 1.2x faster reads
0.5x. So each kernel family the registered backends use is timed once per machine and stack, on its
real code path, beside a reference that no fallback of its own can slow down:

- FBGEMM's inference TBE lookup (`IntNBitTableBatchedEmbeddingBagsCodegen`, torchrec's quantized
  EBC) per row type (FP32, FP16, INT8, INT4, INT2 rows), and torch's fp32 EmbeddingBag (torchrec's
  eager EBC; on CPU it runs torch's own copy of FBGEMM, so `FBGEMM_NO_ASMJIT` slows it too): each
  beside a plain gather (`index_select`) of the same rows, on the same ids, from the kernel's own
  table memory. A lookup is a gather plus a little arithmetic, so the ratio of the two cancels what the
  machine, its memory and its load do to both;
- torch.ao's dynamic int8 Linear beside the fp32 Linear (`nn.Linear`), at GEMM.

**Interleaved rounds, judged on an interval.** A single shot of each, minutes apart from its
reference, spread 2x on a shared machine and flipped a machine's verdicts (issue 53). So each kernel
and its reference are timed in ROUNDS rounds, alternating (reference then kernel, the next round
kernel then reference, the pairs in reverse order), CALLS calls each; each round gives one ratio of
kernel to reference time. A probe reads the median ratio with its distribution-free order-statistic
interval (bench.stats.quantile_interval; of 9 rounds, at 90%, it leaves out the most extreme round
on each side and covers the median 96% of the time) and judges it against the family's bound:
**degraded** when the whole interval lies above the bound, **healthy** when it lies at or below it,
**undecided** when it straddles it.

**Bounds from what a fallback costs.** FBGEMM's reference kernels run 10-30x slower than its JIT
kernels. On the AMD EPYC (Zen 5, AVX-512; 2 cores, shared) these bounds were set on, per looked-up
row, healthy lookups take 0.6-1.8x a plain gather of the same rows and under `FBGEMM_NO_ASMJIT=1`
11-24x (the medians of 9 rounds, idle and beside a CPU hog; torch's EmbeddingBag the least, 11-14x,
its intervals down to 9.3x; two runs of 6 decisions each, benchmarks/scripts/probe_stability.py); on
the slower AVX2 EPYC of issue 53 healthy lookups took up to about 4x that machine's gather roofline. A bound that ignores 20% noise on
the slowest healthy figure and catches that figure doubled sits between 1.2x and 2x of it; each bound
is at about 1.5x of the slowest healthy figure, and a fallback lies 1.5x and more beyond it:

- `MAX_GATHER_RATIO` (6): a lookup may take at most 6x a plain gather of its rows (the slowest
  healthy, about 4x: +20% is 4.8x, doubled 8x; a fallback: 9x and more);
- `MAX_EAGER_RATIO` (3): a TBE lookup of narrower rows than fp32 may take at most 3x torch's fp32
  EmbeddingBag per row (healthy medians 0.6-1.4x here, single shots up to 1.6x on the slower EPYC:
  +20% is 1.9x, doubled 3.2x). It catches a fallback of fbgemm_gpu's own FBGEMM alone, the cpuinfo
  trap, where torch's copy stays fast (under `FBGEMM_NO_ASMJIT` both fall back: the gather check
  catches it);
- `INT8_GEMM_SLOWER` (1.2): the int8 GEMM may take at most 1.2x the fp32 GEMM (healthy: 0.15x here,
  far below);
- the fp32 GEMM at least `MIN_GEMM_SHARE` (25%) of the machine's GEMM roofline (bench.devices.roofline).

A lookup that is healthy 2x below its bound (most are, at 1x the gather) can thus slow 2x unflagged:
the probe is there to catch the fallbacks that void a run's speed figures, not every slowdown (the
paired speedups measure those).

**Re-probed, cached when stable.** Every family is probed twice (PROBES) before any banner is
written. A verdict is stable when both probes decide it the same way; only a stable verdict is
cached. A family that flips between probes, or stays undecided, is *unstable*: it is not counted as
degraded (noise must not cost a run its verdicts; a real fallback, 1.5x and more past its bound, does not flip),
its verdict says so, and the next run probes it again. On top of the timings, FBGEMM's detected
instruction set is compared with the best the CPU's flags allow (bench.cpuinfo_fix): a shortfall
marks every FBGEMM family degraded whatever the timings say.

The probe takes about 10 s (building the tables, then the rounds; 30 s on reference kernels) and is
cached in `<cache_dir>/timing/<stack key>-kernels.json` with each probe's per-round figures; the key names the
CPU, the versions, FBGEMM's instruction set, the fix's state and the environment variables that steer
the kernels, so a cache never outlives a change of any of them. A record keeps each verdict with
each probe's figures: the kernel's median time and, per reference, the median ratio and its interval.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch
from torch import nn

from bench import cpuinfo_fix
from bench.hardware import timing_threads
from bench.io import write_json_atomic
from bench.devices.health import EAGER, MIN_GEMM_SHARE, Health, Verdict, tbe_family
from bench.devices.roofline import Limits
from bench.stats import quantile_interval

log = logging.getLogger(__name__)

VERSION = 2  # 2: interleaved rounds judged on an interval, two probes, per-round figures kept


@dataclass(frozen=True)
class Shape:
    """What one probe call does: one pooled lookup per table and sample, and an M x K x N Linear."""

    tables: int = 26
    rows: int = 40_000
    batch: int = 1024
    gemm: tuple[int, int, int] = (1024, 512, 512)


DEFAULT = Shape()
DIM = 64
ROUNDS = 9  # ratios per probe: the 90% order-statistic interval of their median leaves out the most extreme each side
CALLS = 3  # calls per kernel (and per reference) in a round; the round's figure is their median
WARM = 2  # untimed calls of each before the first round
PROBES = 2  # probes per family: a verdict is stable (and cached) when they agree
ALPHA = 0.1
MAX_GATHER_RATIO = 6.0  # a lookup at most this many times a plain gather of its rows (module docstring)
MAX_EAGER_RATIO = 3.0  # a TBE lookup of narrower rows at most this many times torch's fp32 EmbeddingBag per row
INT8_GEMM_SLOWER = 1.2  # the int8 GEMM at most this many times the fp32 GEMM

# Row type -> (FBGEMM's SparseType name, stored row bytes at DIM with FBGEMM's CPU row layout)
TBE_ROWS = {"fp32": ("FP32", 4 * DIM), "fp16": ("FP16", 2 * DIM), "int8": ("INT8", DIM + 4), "int4": ("INT4", DIM // 2 + 4),
            "int2": ("INT2", DIM // 4 + 4)}
JIT_SWITCHES = ("FBGEMM_NO_ASMJIT", "FBGEMM_NO_AUTOVEC", "FBGEMM_FORCE_AUTOVEC", "FBGEMM_ENABLE_INSTRUCTIONS")
HEALTHY, DEGRADED, UNDECIDED = "healthy", "degraded", "undecided"
GATHER = "gather:"  # a lookup's reference: GATHER + family
ROOFLINE = "roofline"  # the fp32 GEMM's reference: the machine's GEMM roofline (a constant, not timed)


FAMILIES = (EAGER, *(tbe_family(d) for d in TBE_ROWS), "gemm_fp32", "gemm_int8")


# ------------------------------------------------------------------------------------------ timing

Timed = dict[str, list[float]]  # a kernel's or a reference's name -> its time per unit of work, one figure a round
Pair = tuple[str, Callable[[], Any], str, Callable[[], Any], float]  # (kernel, its call, reference, its call, units a call)


def thread_ns() -> int:
    return time.thread_time_ns()


def time_rounds(pairs: list[Pair], rounds: int = ROUNDS, calls: int = CALLS, clock: Callable[[], int] = thread_ns,
                warm: int = WARM) -> Timed:
    """Each pair's kernel and reference timed in `rounds` interleaved rounds: in even rounds the pairs in order,
    reference first; in odd ones in reverse order, kernel first. A round's figure is the median thread CPU
    time of `calls` calls, per unit."""
    for _, kernel, _, reference, _ in pairs:
        for _ in range(warm):
            reference()
            kernel()
    timed: Timed = {}
    for r in range(rounds):
        for kernel_name, kernel, reference_name, reference, per in (pairs if r % 2 == 0 else reversed(pairs)):
            sides = ((reference_name, reference), (kernel_name, kernel))
            for name, call in (sides if r % 2 == 0 else reversed(sides)):
                times = []
                for _ in range(calls):
                    start = clock()
                    call()
                    times.append(clock() - start)
                timed.setdefault(name, []).append(float(np.median(times)) / per)
    return timed


def _ids(shape: Shape, generator: torch.Generator, count: int) -> list[torch.Tensor]:
    return [torch.randint(0, shape.rows, (shape.tables * shape.batch,), generator=generator, dtype=torch.int32) for _ in range(count)]


def _gather(tables: list[torch.Tensor], ids: list[torch.Tensor], shape: Shape) -> Callable[[], None]:
    """A plain gather of the rows a lookup reads: `index_select` of each table's rows (as uint8 or fp32 rows of
    the same bytes) at the same ids, into buffers made once."""
    outs = [torch.empty(shape.batch, *t.shape[1:], dtype=t.dtype) for t in tables]
    per_table = [i.view(shape.tables, shape.batch).long() for i in ids]
    turn = itertools.count()

    def gather() -> None:
        batch = per_table[next(turn) % len(per_table)]
        for t, (table, out) in enumerate(zip(tables, outs)):
            torch.index_select(table, 0, batch[t], out=out)

    return gather


def lookup_pairs(families: Iterable[str], shape: Shape = DEFAULT) -> list[Pair]:
    """The lookup families among `families`, each beside a gather of its rows: torch's fp32 EmbeddingBag and
    FBGEMM's inference TBE at each row type, on the same ids (a fresh batch of ids each call)."""
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

    wanted = set(families)
    ids = _ids(shape, torch.Generator().manual_seed(0), CALLS + WARM)
    rows = shape.tables * shape.batch
    pairs: list[Pair] = []
    if EAGER in wanted:
        bags = [nn.EmbeddingBag(shape.rows, DIM, mode="sum", include_last_offset=True) for _ in range(shape.tables)]
        bag_offsets = torch.arange(0, shape.batch + 1)
        per_table = [i.view(shape.tables, shape.batch).long() for i in ids]
        turn = itertools.count()

        def eager() -> None:
            batch = per_table[next(turn) % len(per_table)]
            for t, bag in enumerate(bags):
                bag(batch[t], bag_offsets)

        pairs.append((EAGER, eager, GATHER + EAGER, _gather([bag.weight.detach() for bag in bags], ids, shape), rows))
    offsets = torch.arange(0, rows + 1, dtype=torch.int32)
    for dtype, (sparse_type, width) in TBE_ROWS.items():
        family = tbe_family(dtype)
        if family not in wanted:
            continue
        tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("", shape.rows, DIM, SparseType[sparse_type], EmbeddingLocation.HOST)]
                                                     * shape.tables, device="cpu", pooling_mode=PoolingMode.SUM, row_alignment=1)
        tbe.fill_random_weights()
        # each table's stored rows, as FBGEMM lays them out in its one host buffer
        tables = [tbe.weights_host[int(o):int(o) + shape.rows * width].view(shape.rows, width) for o in tbe.weights_offsets]
        turn = itertools.count()
        pairs.append((family, lambda tbe=tbe, turn=turn: tbe(ids[next(turn) % len(ids)], offsets), GATHER + family,
                      _gather(tables, ids, shape), rows))
    return pairs


def gemm_pair(shape: Shape = DEFAULT) -> Pair:
    """torch.ao's dynamic int8 Linear beside the fp32 Linear, in ns per 1000 FLOPs."""
    from bench.backends.ao_notice import torch_ao_calls  # noqa: PLC0415 - only the int8 GEMM needs torch.ao

    m, k, n = shape.gemm
    torch.manual_seed(0)
    fp32 = nn.Linear(k, n).eval()
    with torch_ao_calls():
        int8 = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(k, n)), {nn.Linear}, dtype=torch.qint8)
    x = torch.randn(m, k)
    return "gemm_int8", lambda: int8(x), "gemm_fp32", lambda: fp32(x), 2 * m * k * n / 1000


def pairs_for(families: Iterable[str], shape: Shape = DEFAULT) -> list[Pair]:
    """What probing `families` times: each with its reference, and the fp32 EmbeddingBag wherever a TBE of
    narrower rows is judged against it (the GEMMs are one pair: fp32 is the int8 GEMM's reference)."""
    wanted = set(families)
    if wanted & {tbe_family(d) for d in TBE_ROWS if d != "fp32"}:
        wanted.add(EAGER)
    pairs = lookup_pairs(wanted, shape)
    if wanted & {"gemm_fp32", "gemm_int8"}:
        pairs.append(gemm_pair(shape))
    return pairs


def probe(pairs: list[Pair], rounds: int = ROUNDS, calls: int = CALLS) -> Timed:
    """One probe: every pair timed in interleaved rounds, on one thread and its CPU time."""
    with timing_threads(1), torch.inference_mode():
        return time_rounds(pairs, rounds, calls)


# ------------------------------------------------------------------------------------------ judging


def checks(family: str, limits: Optional[Limits]) -> list[tuple[str, float, str]]:
    """(reference, bound on the kernel's time over the reference's, the reference in words) per check of `family`."""
    if family == "gemm_int8":
        return [("gemm_fp32", INT8_GEMM_SLOWER, "the fp32 GEMM")]
    if family == "gemm_fp32":
        has_roofline = limits is not None and limits.data.get("gemm_flops")
        return [(ROOFLINE, 1 / MIN_GEMM_SHARE, "the fp32 GEMM roofline")] if has_roofline else []
    found = [(GATHER + family, MAX_GATHER_RATIO, "a plain gather of its rows")]
    if family.startswith("tbe_") and family != tbe_family("fp32"):
        found.append((EAGER, MAX_EAGER_RATIO, "torch's fp32 EmbeddingBag"))
    return found


def read(timed: Timed, family: str, limits: Optional[Limits], alpha: float = ALPHA) -> dict[str, Any]:
    """One probe's reading of `family`: its median time, per check the median of its per-round ratios to the
    reference with their order-statistic interval (and the bound), and the outcome: degraded when some
    check's interval lies wholly above its bound, healthy when every check's lies at or below it."""
    ns = timed[family]
    found: dict[str, list[float]] = {}
    outcomes = []
    for reference, bound, _ in checks(family, limits):
        if reference == ROOFLINE:
            base = [1e12 / limits.gemm("fp32")] * len(ns)  # type: ignore[union-attr] - checks() made sure
        elif reference in timed:
            base = timed[reference]
        else:
            continue
        ratios = [k / b for k, b in zip(ns, base) if b > 0]
        if not ratios:
            continue
        median = quantile_interval(ratios, 0.5, alpha)
        found[reference] = [median.value, median.lo, median.hi, bound]
        outcomes.append(DEGRADED if median.lo > bound else HEALTHY if median.hi <= bound else UNDECIDED)
    outcome = DEGRADED if DEGRADED in outcomes else UNDECIDED if UNDECIDED in outcomes else HEALTHY
    return {"ns": float(np.median(ns)), "outcome": outcome, "checks": found}


def reference_ns(timed: Timed, reference: str, limits: Optional[Limits]) -> float:
    if reference == ROOFLINE:
        return 1e12 / limits.gemm("fp32")  # type: ignore[union-attr]
    return float(np.median(timed[reference]))


def judge(probes: list[Timed], limits: Optional[Limits], isa: dict[str, Any], env: dict[str, str],
          families: Optional[Iterable[str]] = None) -> list[Verdict]:
    """Each family's verdict from its probes (each the per-round figures `time_rounds` gives), the rooflines
    and FBGEMM's instruction set: degraded only when every probe read it degraded; unstable (not degraded,
    not cached) when the probes disagree or one could not decide."""
    shortfall = isa.get("fbgemm_isa_shortfall")
    switched = [f"{k}={v}" for k, v in env.items() if k in JIT_SWITCHES and v]
    last = probes[-1]
    verdicts = []
    for family in [f for f in (families or FAMILIES) if f in last]:
        readings = [read(p, family, limits) for p in probes]
        outcomes = [r["outcome"] for r in readings]
        stable = len(set(outcomes)) == 1 and outcomes[0] != UNDECIDED
        degraded = stable and outcomes[0] == DEGRADED
        bounds = [bound * reference_ns(last, ref, limits) for ref, bound, _ in checks(family, limits)
                  if ref in readings[-1]["checks"]]
        verdict = Verdict(family, not degraded, readings[-1]["ns"], min(bounds, default=None),
                          "ns/kFLOP" if family.startswith("gemm") else "ns/row", stable=stable, probes=readings)
        if degraded:
            verdict.why = "slower than " + " and ".join(_over_bound(family, last, readings[-1], limits))
            if family == "gemm_int8":
                verdict.cause = "torch.ao's int8 Linear fell back from FBGEMM/oneDNN's int8 kernels"
                verdict.fix = "check torch.backends.quantized.engine and the CPU's int8 support"
        elif not stable:
            verdict.why = ("unstable: the probes read " + ", then ".join(_reading_words(r) for r in readings)
                           + "; not counted as degraded, not cached: probed again next run")
        if family.startswith("tbe_") or family == EAGER:
            _fbgemm_cause(verdict, shortfall if family != EAGER else None, switched, isa)
        verdicts.append(verdict)
    return verdicts


def _over_bound(family: str, timed: Timed, reading: dict[str, Any], limits: Optional[Limits]) -> list[str]:
    """Each check whose interval lies above its bound, in words: `6x a plain gather of its rows (20.1 ns a row):
    19.50x [17.00, 21.20] over 9 rounds`."""
    found = []
    for reference, bound, words in checks(family, limits):
        ratio = reading["checks"].get(reference)
        if ratio and ratio[1] > bound:
            unit = "kFLOP" if family.startswith("gemm") else "row"
            found.append(f"{bound:g}x {words} ({reference_ns(timed, reference, limits):.1f} ns a {unit}): "
                         f"{ratio[0]:.2f}x [{ratio[1]:.2f}, {ratio[2]:.2f}] over {len(timed[family])} rounds")
    return found


def _reading_words(reading: dict[str, Any]) -> str:
    ratios = ", ".join(f"{v[0]:.2f}x [{v[1]:.2f}, {v[2]:.2f}] against at most {v[3]:g}x" for v in reading["checks"].values())
    return f"{reading['outcome']} ({ratios})"


def _fbgemm_cause(verdict: Verdict, shortfall: Optional[str], switched: list[str], isa: dict[str, Any]) -> None:
    """A blank or forced instruction set fails every FBGEMM family, whatever its timing; a switch that
    disables the JIT explains a slow one."""
    if shortfall:
        verdict.healthy = False
        verdict.why = verdict.why if verdict.why and verdict.stable else f"FBGEMM's instruction set is {isa.get('fbgemm_isa')}"
        verdict.stable = True  # the instruction set decides it, whatever the timings read
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


def isa_only(isa: dict[str, Any]) -> Health:
    """Without the timing probe: a shortfall of FBGEMM's instruction set still marks every TBE family degraded."""
    verdicts = []
    if isa.get("fbgemm_isa_shortfall"):
        for dtype in TBE_ROWS:
            v = Verdict(tbe_family(dtype), True, float("nan"), None, "ns/row")
            _fbgemm_cause(v, isa["fbgemm_isa_shortfall"], [], isa)
            verdicts.append(v)
    return Health(verdicts, isa, probed=False)


def cached_verdicts(cache_path: Path) -> dict[str, Verdict]:
    """The stable verdicts a cache of this VERSION holds (an unstable one is probed again)."""
    try:
        data = json.loads(cache_path.read_text())
        if data.get("version") == VERSION:
            return {v.family: v for v in (Verdict(**d) for d in data["verdicts"]) if v.stable}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return {}


def health(cache_path: Path, limits: Optional[Limits], shape: Shape = DEFAULT, rounds: int = ROUNDS,
           measure: Optional[Callable[[list[str]], Timed]] = None) -> Health:
    """This machine's and stack's kernel health: the cache's stable verdicts, and every other family probed now
    (PROBES times, seconds) and judged; the result is cached with each probe's per-round figures. `measure`
    (the families to probe -> one probe's figures) stands in for the real probe in tests."""
    isa, env = cpuinfo_fix.summary(), cpuinfo_fix.kernel_env()
    known = cached_verdicts(cache_path)
    todo = [f for f in FAMILIES if f not in known]
    if not todo:
        return Health([known[f] for f in FAMILIES], isa, probed=True, path=str(cache_path))
    log.info("kernel health: timing %s beside their references, %d probes of %d rounds (cached in %s)",
             "each kernel family" if len(todo) == len(FAMILIES) else ", ".join(todo), PROBES, rounds, cache_path)
    if measure is None:
        pairs = pairs_for(todo, shape)  # built once: both probes time the same tables
        timed = [probe(pairs, rounds) for _ in range(PROBES)]
    else:
        timed = [measure(todo) for _ in range(PROBES)]
    fresh = {v.family: v for v in judge(timed, limits, isa, env, todo)}
    for v in fresh.values():
        if not v.stable:
            log.warning("kernel health: %s %s", v.family, v.why)
    verdicts = [known.get(f) or fresh[f] for f in FAMILIES if f in known or f in fresh]
    write_json_atomic(cache_path, {"version": VERSION, "isa": isa, "env": env, "rounds": rounds, "timed": timed,
                                   "verdicts": [asdict(v) for v in verdicts]})
    return Health(verdicts, isa, probed=True, path=str(cache_path))


def cache_path(cache_dir: str | Path, key: str) -> Path:
    """`<cache_dir>/timing/<stack key>-kernels.json`, beside the timing calibration (`key`: bench.devices.cpu.stack_key
    of this VERSION)."""
    return Path(cache_dir) / "timing" / f"{key}-kernels.json"


def row_widths() -> list[int]:
    """The stored row widths of the probe's lookups (Limits.ensure measures the gather roofline at each)."""
    return sorted({b for _, b in TBE_ROWS.values()})
