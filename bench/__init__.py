"""Reference harness for benchmarking quantized recommendation models (TorchRec + FBGEMM)."""

import logging as _logging

# torchrec calls torch.fx's is_fx_tracing() at import, which logs a deprecation warning meant for
# torchrec's maintainers on every start; keep it off users' terminals.
_logging.getLogger("torch.fx._symbolic_trace").setLevel(_logging.ERROR)

__version__ = "0.1.0"
