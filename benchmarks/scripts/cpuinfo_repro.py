"""Minimal reproduction: FBGEMM's CPU lookup falls back to its reference kernels when torch's libraries
export cpuinfo twice. Needs only torch and fbgemm-gpu-cpu (no harness), e.g. torch 2.14.1 from PyPI
with fbgemm-gpu-cpu 1.9.0:

    python benchmarks/scripts/cpuinfo_repro.py

It runs itself twice in fresh processes: bare (fbgemm_gpu imported right after torch), and with the
workaround (libtorch.so made global with RTLD_NOLOAD before fbgemm_gpu loads). Each prints which torch
libraries resolve `cpuinfo_isa` where, what `fbgemm::fbgemmInstructionSet()` returns (0 anyarch,
1 avx2, 2 avx512, 3 avx512_ymm, 4 avx512_vnni, 5 avx512_vnni_ymm) and the median thread CPU time of an
INT8 lookup of 26 tables x 100k rows, dim 64, batch 1024, one thread.
"""

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path


def run(fixed: bool) -> None:
    import torch

    lib = Path(torch.__file__).parent / "lib"
    copies = {}
    for so in sorted(lib.glob("*.so")):
        try:
            handle = ctypes.CDLL(str(so), mode=os.RTLD_NOLOAD)
            copies.setdefault(ctypes.addressof(ctypes.c_char.in_dll(handle, "cpuinfo_isa")), []).append(so.name)
        except (OSError, ValueError):
            pass
    if fixed:
        ctypes.CDLL(str(lib / "libtorch.so"), mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
    import fbgemm_gpu
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

    isa = getattr(ctypes.CDLL(str(Path(fbgemm_gpu.__file__).parent / "fbgemm.so"), mode=os.RTLD_NOLOAD),
                  "_ZN6fbgemm20fbgemmInstructionSetEv")
    isa.restype = ctypes.c_int
    torch.set_num_threads(1)
    tables, rows, dim, batch = 26, 100_000, 64, 1024
    tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("", rows, dim, SparseType.INT8, EmbeddingLocation.HOST)] * tables,
                                                 device="cpu", pooling_mode=PoolingMode.SUM, row_alignment=1)
    tbe.fill_random_weights()
    offsets = torch.arange(0, tables * batch + 1, dtype=torch.int32)
    times = []
    for _ in range(21):
        ids = torch.randint(0, rows, (tables * batch,), dtype=torch.int32)
        start = time.thread_time()
        tbe(ids, offsets)
        times.append(time.thread_time() - start)
    print(f"{'with the workaround' if fixed else 'bare':>19}: torch {torch.__version__}, fbgemm_gpu {fbgemm_gpu.__version__}; "
          f"cpuinfo_isa copies {list(copies.values())}; fbgemmInstructionSet() = {isa()}; "
          f"INT8 lookup {sorted(times)[10] * 1e3:.2f} ms")


if __name__ == "__main__":
    if sys.argv[1:] in (["bare"], ["fixed"]):
        run(sys.argv[1] == "fixed")
    else:
        for mode in ("bare", "fixed"):
            subprocess.run([sys.executable, __file__, mode], check=True)
