"""Show torch.ao's deprecation notices at most once per process.

torch 2.13 warns on every `torch.ao.quantization` API call (quantize_dynamic, prepare, convert ...)
that torch.ao is moving to torchao, and once more when a quantized tensor is created. A backend makes
several such calls per `prepare`, and a sweep prepares many models, so the same multi-line notice would
fill the log. Every torch.ao call of the backends runs inside `torch_ao_calls()`: the first notice of
each kind goes through (to whatever warning filters are active), later ones are dropped. Other
warnings raised inside the block are passed on unchanged.

We stay on torch.ao on purpose: torchrec's quantized-EBC path goes through
`torch.quantization.quantize_dynamic`, and torch.ao's int8 Linear modules run real int8 FBGEMM kernels
on CPU.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager
from typing import Iterator

# Each pattern is one kind of notice; each kind is shown at most once per process.
NOTICES: dict[str, re.Pattern[str]] = {
    "torch.ao.quantization": re.compile(r"torch\.ao\.quantization is deprecated"),
    "quantized tensors": re.compile(r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other quantized tensor"),
}
_shown: set[str] = set()


def notice_kind(message: str) -> str | None:
    for kind, pattern in NOTICES.items():
        if pattern.search(message):
            return kind
    return None


@contextmanager
def torch_ao_calls() -> Iterator[None]:
    """Run torch.ao calls; re-emit their warnings, each torch.ao notice only the first time."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        kind = notice_kind(str(w.message))
        if kind is not None:
            if kind in _shown:
                continue
            _shown.add(kind)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
