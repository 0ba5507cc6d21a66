"""Reference harness for benchmarking quantized recommendation models (TorchRec + FBGEMM)."""

import logging as _logging

from bench import cpuinfo_fix as _cpuinfo_fix

# torchrec calls torch.fx's is_fx_tracing() at import, which logs a deprecation warning meant for
# torchrec's maintainers on every start; keep it off users' terminals.
_logging.getLogger("torch.fx._symbolic_trace").setLevel(_logging.ERROR)

# FBGEMM's fast kernels on torch builds with two cpuinfo copies: applied just before fbgemm_gpu or
# torchrec is first imported, in every process that imports bench (bench.cpuinfo_fix).
_cpuinfo_fix.install()

__version__ = "0.1.0"
