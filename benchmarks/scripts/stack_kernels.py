"""The kernels that moved between the tested stacks, timed through the harness's cpuinfo fix: run it
once with each stack's Python.

    .venv/bin/python benchmarks/scripts/stack_kernels.py            # STACK=current
    .venv-previous/bin/python benchmarks/scripts/stack_kernels.py   # STACK=previous

It prints the installed torch and fbgemm-gpu-cpu, then the median time of one thread's CPU over 30
calls of (a) FBGEMM's CPU table-batched lookup (`IntNBitTableBatchedEmbeddingBagsCodegen`, 26 tables
of 100k rows, dim 64, pooling 1, batch 1024, fresh random ids each call) per row type, and (b) a
512-512-256 MLP at batch 1024 in fp32 and as torch.ao's dynamic int8 modules. `import bench` comes
first, so FBGEMM is loaded through bench.cpuinfo_fix as in every harness process; the first line says
what the fix did and which instruction set FBGEMM detected (BENCH_CPUINFO_FIX=0 times the bare
stack; benchmarks/scripts/cpuinfo_repro.py shows the trap without the harness).
"""

from __future__ import annotations

import time
import warnings

import bench  # noqa: F401 - first: the cpuinfo fix applies before fbgemm_gpu loads (bench.cpuinfo_fix)
import fbgemm_gpu
import torch
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

from bench import cpuinfo_fix

warnings.filterwarnings("ignore")
TABLES, ROWS, DIM, BATCH, CALLS = 26, 100_000, 64, 1024, 30


def median_ms(call) -> float:
    call()
    times = []
    for _ in range(CALLS):
        start = time.thread_time()
        call()
        times.append(time.thread_time() - start)
    return sorted(times)[CALLS // 2] * 1e3


def main() -> None:
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, fbgemm_gpu {fbgemm_gpu.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"load {open('/proc/loadavg').read().split()[:3]}")
    summary = cpuinfo_fix.summary()
    print(f"  cpuinfo fix: {summary['cpuinfo_fix']} ({cpuinfo_fix.state()}); FBGEMM ISA {summary['fbgemm_isa']}, "
          f"the CPU allows {summary['fbgemm_isa_best']}")
    g = torch.Generator().manual_seed(0)
    offsets = torch.arange(0, TABLES * BATCH + 1, dtype=torch.int32)
    for row_type in (SparseType.INT8, SparseType.INT4, SparseType.FP16):
        tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("", ROWS, DIM, row_type, EmbeddingLocation.HOST)] * TABLES, device="cpu",
                                                     pooling_mode=PoolingMode.SUM, row_alignment=1)
        tbe.fill_random_weights()
        ms = median_ms(lambda: tbe(torch.randint(0, ROWS, (TABLES * BATCH,), generator=g, dtype=torch.int32), offsets))
        print(f"  TBE lookup {row_type.name:5s}: {ms:7.3f} ms per batch of {BATCH}")
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).eval()
    int8 = torch.ao.quantization.quantize_dynamic(mlp, {torch.nn.Linear}, dtype=torch.qint8)
    x = torch.randn(BATCH, 512)
    with torch.inference_mode():
        print(f"  MLP fp32: {median_ms(lambda: mlp(x)):7.3f} ms; torch.ao dynamic int8: {median_ms(lambda: int8(x)):7.3f} ms")


if __name__ == "__main__":
    main()
