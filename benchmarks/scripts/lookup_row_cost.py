"""Where an unpooled INT4 row's lookup time goes (issue 57: DLRMv3's item table, 512 wide, against the gather roofline).

The scale sweep's `ns_per_random_row` (bench.measure.lookups) for INT4 sat at about 190 ns a row where the gather
roofline at its 260-byte width is about 12 ns, and it hardly moved with the stored bytes or the table size. This
script takes that per-row cost apart, one thread, on the thread's CPU time, each figure the fastest of `--repeats`
calls, and beside the same run's references (so a shared machine hits both alike; quote the ratios):

- `gather 260 B`: the roofline's own gather (bench.devices.cpu.gather_bandwidth: 2^18 rows drawn uniformly from a
  1 GiB buffer, the fastest of index_select and embedding_bag) at the INT4 row width; and at 2,048 B (fp32 rows);
- `write`: streaming writes of a buffer far beyond the last-level cache (bench.devices.cpu.write_bandwidth), the
  memory's rate for an output that does not stay in cache;
- the raw FBGEMM op (torch.ops.fbgemm.int_nbit_split_embedding_codegen_lookup_function, through
  IntNBitTableBatchedEmbeddingBagsCodegen) on INT4 tables of 512 columns: pooling NONE (one output row per id,
  what torchrec's EmbeddingCollection runs) and SUM with bags of one, fp32 and fp16 output, on tables that fit in
  L2 (1,000 rows, 0.26 MB), in L3 (64,000 rows, 17 MB) and far beyond it (`--rows`), on random and sorted ids,
  with `--ids` ids a call and twice that (the EmbeddingCollection call of the scale sweep's random-rows figure:
  8,192 ids for each of its 2 features);
- torchrec's quantized EmbeddingCollection (as bench.backends.direct builds it: fp32 output) against the raw op on
  the same ids, with the minor page faults a call takes, at the size of one of the preset's requests (2,268 ids)
  and of the random-rows call, and what torchrec and the TBE module add per call;
- the op's own zero fill of its output (torch.profiler on one call): FBGEMM writes every output row twice;
- transparent huge pages: the same, in a child process with THP_MEM_ALLOC_ENABLE=1 (torch's CPU allocator then
  asks `madvise(MADV_HUGEPAGE)` for every block of 2 MB or more, the table's and the roofline buffer's alike; the
  machine's THP mode is `madvise`, so without it neither gets huge pages).

    python benchmarks/scripts/lookup_row_cost.py [--rows 4000000] [--ids 8192] [--repeats 9] [--no-thp]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

import bench  # noqa: F401  (FBGEMM's fast kernels: bench.cpuinfo_fix, before fbgemm_gpu is imported)
import torch
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
from torchrec.modules.embedding_configs import DataType, EmbeddingConfig
from torchrec.quant.embedding_modules import EmbeddingCollection as QuantEmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench import hardware
from bench.backends.direct import stored_rows
from bench.devices.cpu import gather_bandwidth, write_bandwidth

DIM = 512
GATHER_BYTES = 1 << 30
WRITE_BYTES = 1 << 29
THP = "THP_MEM_ALLOC_ENABLE"
MODEL_IDS = 2268  # ids of one EmbeddingCollection call on the preset's own batches (the scale sweep's records)


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def best(fn, repeats: int) -> tuple[float, float]:
    """(fastest call's ns, minor faults per call) over `repeats` calls after one untimed one."""
    fn()
    fastest, before = float("inf"), faults()
    for _ in range(repeats):
        start = time.thread_time_ns()
        fn()
        fastest = min(fastest, time.thread_time_ns() - start)
    return fastest, (faults() - before) / repeats


def tbe(rows: int) -> IntNBitTableBatchedEmbeddingBagsCodegen:
    module = IntNBitTableBatchedEmbeddingBagsCodegen([("t", rows, DIM, SparseType.INT4, EmbeddingLocation.HOST)], device="cpu",
                                                     pooling_mode=PoolingMode.NONE, output_dtype=SparseType.FP32, row_alignment=1)
    fill(module)
    return module


def fill(module: IntNBitTableBatchedEmbeddingBagsCodegen, chunk_rows: int = 1 << 16) -> None:
    """Every row written with real INT4 rows (bench.backends.direct's layout): a zeroed table's untouched pages all map to
    the kernel's one zero page, which stays in cache. (FBGEMM's `fill_random_weights` writes into a temporary here.)
    One random chunk, repeated: where a row sits is what the memory sees, not what it holds."""
    if not module.weight_initialized:
        module.initialize_weights()
    chunk = stored_rows(torch.randn(chunk_rows, DIM), "int4")
    for weights, _ in module.split_embedding_weights(split_scale_shifts=False):
        for start in range(0, weights.shape[0], chunk_rows):
            part = weights[start:start + chunk_rows]
            part[:, : chunk.shape[1]].copy_(chunk[: part.shape[0]])


def raw_op(m: IntNBitTableBatchedEmbeddingBagsCodegen, ids: torch.Tensor, pooling: PoolingMode, out: SparseType):
    """The op torchrec's quantized collections end in, on `m`'s table, at any pooling mode and output type: the ids
    split evenly over `m`'s features, one sample each (NONE) or bags of one (SUM)."""
    n, features = ids.numel(), m.weights_offsets.numel()
    offsets = (torch.arange(features + 1, dtype=torch.int32) * (n // features) if pooling == PoolingMode.NONE
               else torch.arange(n + 1, dtype=torch.int32))
    return lambda: torch.ops.fbgemm.int_nbit_split_embedding_codegen_lookup_function(
        dev_weights=m.weights_host, uvm_weights=m.weights_uvm, weights_placements=m.weights_placements, weights_offsets=m.weights_offsets,
        weights_tys=m.weights_tys, D_offsets=m.D_offsets, total_D=m.total_D, max_int2_D=m.max_int2_D, max_int4_D=m.max_int4_D,
        max_int8_D=m.max_int8_D, max_float16_D=m.max_float16_D, max_float32_D=m.max_float32_D, indices=ids, offsets=offsets,
        pooling_mode=int(pooling), indice_weights=None, output_dtype=out.as_int(), lxu_cache_weights=m.lxu_cache_weights,
        lxu_cache_locations=torch.empty(0, dtype=torch.int32), row_alignment=m.row_alignment, max_float8_D=m.max_float8_D,
        fp8_exponent_bits=m.fp8_exponent_bits, fp8_exponent_bias=m.fp8_exponent_bias)


def references() -> dict[str, float]:
    """ns per row of the roofline's gathers, and ns per 2,048 / 1,024 output bytes at the memory's write rate."""
    buffer = torch.ones(GATHER_BYTES, dtype=torch.uint8)
    ref = {f"gather {w} B": w / gather_bandwidth(w, GATHER_BYTES, buffer) * 1e9 for w in (260, 2048)}
    del buffer
    rate = write_bandwidth(WRITE_BYTES)
    ref.update({"write 2048 B": 2048 / rate * 1e9, "write 1024 B": 1024 / rate * 1e9})
    return ref


def line(label: str, ns: float, n: int, ref: dict[str, float], fault: float | None = None) -> str:
    per = ns / n
    extra = f"  faults/call {fault:6.0f}" if fault is not None else ""
    return f"  {label:52s} {per:7.1f} ns/row  {per / ref['gather 260 B']:5.1f}x gather 260 B{extra}"


def raw_section(name: str, m, rows: int, n: int, repeats: int, ref: dict, sorted_too: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    for count in (n, 2 * n):
        ids = torch.randint(rows, (count,), generator=generator, dtype=torch.int32)
        orders = [("random", ids)] + ([("sorted", torch.sort(ids).values)] if sorted_too else [])
        for order, these in orders:
            for pooling in (PoolingMode.NONE, PoolingMode.SUM):
                for out in (SparseType.FP32, SparseType.FP16):
                    label = f"{name} {order} {count} ids {pooling.name:4s} out {out.name}"
                    print(line(label, best(raw_op(m, these, pooling, out), repeats)[0], count, ref), flush=True)


def torchrec_section(rows: int, n: int, repeats: int, ref: dict) -> IntNBitTableBatchedEmbeddingBagsCodegen:
    """torchrec's quantized EmbeddingCollection (2 features on one INT4 table, fp32 output) against the raw op on the
    same ids: the scale sweep's random-rows call of its EmbeddingCollection."""
    cfg = EmbeddingConfig(name="t_item", num_embeddings=rows, embedding_dim=DIM, feature_names=["history", "item_id"], data_type=DataType.INT4)
    ec = QuantEmbeddingCollection([cfg], device=torch.device("cpu"), output_dtype=torch.float32, register_tbes=True, row_alignment=1,
                                  cache_features_order=True)
    m = ec._emb_modules[0]._emb_module if hasattr(ec._emb_modules[0], "_emb_module") else ec._emb_modules[0]
    fill(m)
    generator = torch.Generator().manual_seed(1)
    for count in (MODEL_IDS // 2, n):  # ids per feature: a request of the preset's (2,268 ids a call), the random-rows call
        values = torch.randint(rows, (2 * count,), generator=generator)
        kjt = KeyedJaggedTensor.from_lengths_sync(["history", "item_id"], values, torch.tensor([count, count], dtype=torch.int32))
        on_ec, fault = best(lambda: ec(kjt), repeats)
        print(line(f"torchrec EmbeddingCollection, {2 * count} ids (2 features)", on_ec, 2 * count, ref, fault))
        raw, fault = best(raw_op(m, values.int(), PoolingMode.NONE, SparseType.FP32), repeats)
        print(line("raw op on the same table and ids, NONE out FP32", raw, 2 * count, ref, fault))
        on_module, fault = best(lambda: m(values.int(), torch.tensor([0, count, 2 * count], dtype=torch.int32)), repeats)
        print(line("TBE module forward (Python + bounds check + op)", on_module, 2 * count, ref, fault))
        print(f"  per call over the op: torchrec {(on_ec - raw) / 1e3:.0f} us, the TBE module {(on_module - raw) / 1e3:.0f} us")
    zero_fill_share(raw_op(m, values.int(), PoolingMode.NONE, SparseType.FP32))
    return m


def zero_fill_share(op) -> None:
    """FBGEMM's CPU op allocates its fp32/fp16 output and fills it with zeros before its kernel writes the rows
    (embedding_forward_quantized_cpu_template.cpp: `output.fill_(0)`): each output row is written twice. The
    profiler says how much of one call that first write takes."""
    with torch.profiler.profile() as prof:
        op()
    times = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    total = sum(times.values())
    fill = times.get("aten::fill_", 0.0)
    print(f"  one call under torch.profiler: aten::fill_ (the output zeroed) {fill / 1e3:.2f} ms of {total / 1e3:.2f} ms ({fill / total:.0%})")


def huge_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("AnonHugePages"))


def machine() -> str:
    cpu = {k.strip(): v.strip() for k, v in (x.split(":", 1) for x in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines() if ":" in x)}
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        thp = f.read().strip()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return (f"{cpu.get('Model name')} family {cpu.get('CPU family')} model {cpu.get('Model')}, {cpu.get('CPU(s)')} CPUs, L3 {cpu.get('L3 cache')}; "
            f"THP {thp}; load {load}; torch {torch.__version__}; 1 thread, thread CPU time")


def measure(args) -> None:
    torch.set_num_threads(1)
    hardware.pin_malloc()  # as every job (config pin_malloc=true)
    ref = references()
    print("references: " + ", ".join(f"{k} {v:.1f} ns/row" for k, v in ref.items()), flush=True)
    with torch.inference_mode():
        big = torchrec_section(args.rows, args.ids, args.repeats, ref)
        print(f"  (AnonHugePages of the process: {huge_kb() / 2**20:.2f} GiB)")
        raw_section(f"{args.rows // 1000}k rows", big, args.rows, args.ids, args.repeats, ref, sorted_too=True)
        if not args.child:
            for rows, where in ((1000, "L2"), (64000, "L3")):
                raw_section(f"{rows // 1000}k rows ({where})", tbe(rows), rows, args.ids, args.repeats, ref, sorted_too=False)
    print("references again: " + ", ".join(f"{k} {v:.1f} ns/row" for k, v in references().items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--ids", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--no-thp", action="store_true", help="skip the child process with transparent huge pages")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    print(("child, " if args.child else "") + machine(), flush=True)
    print(f"{THP}={os.environ.get(THP, '(unset)')}")
    measure(args)
    if not args.child and not args.no_thp:
        print(f"\nthe same with {THP}=1 (huge pages for the table and the roofline buffer):", flush=True)
        subprocess.run([sys.executable, __file__, "--child", "--rows", str(args.rows), "--ids", str(args.ids), "--repeats", str(args.repeats)],
                       env={**os.environ, THP: "1"}, check=True)


if __name__ == "__main__":
    main()
