"""A model that returns probabilities, read as logits without losing its ranking.

`model.output=probabilities` declares a model whose score is a probability p. The harness works in
logits (training loss, AUC, log loss, the paired ΔAUC), and `log(p / (1 - p))` cannot undo a saturated
sigmoid: float32's sigmoid is exactly 1.0 from a pre-sigmoid value of about 16.6 and the clamp that
keeps the logit finite (p in [1e-7, 1 - 1e-7]) ties every score above about 15.9 and below about
-16.1; training through it has no gradient there either. So where the model's last step is a sigmoid
the harness can see, an `nn.Sigmoid` module, its input is read instead (`LogitsOf`):

- which `nn.Sigmoid` that is, is found by running one batch (`trailing_sigmoid`): registration order is
  not call order, so the one whose output IS the model's output is taken (the last such call);
- on every call it is verified again: a forward hook on the module of that name (looked up per call, so
  a deep copy or a backend's module swaps keep it) captures the input and output of its last call, and
  the captured input is returned only when the captured output equals the model's output; otherwise the
  call falls back to the clamp.

Where no such module exists (a functional `torch.sigmoid`), the clamp stays, and the scores it tied are
counted (`saturated_share`) and reported.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

# Probabilities are clamped to [EPS, 1 - EPS] before the logit, so a saturated sigmoid (exactly 0.0
# or 1.0 in float32) gives a finite score; 1 - 1e-7 is still below 1.0 in float32.
EPS = 1e-7
CLAMP = "the clamp"  # how scores are read where no trailing nn.Sigmoid is seen


def clamped_logit(p: torch.Tensor) -> torch.Tensor:
    return torch.logit(p, eps=EPS)


def clamp_bounds() -> tuple[float, float]:
    """The two values the clamp gives a saturated probability (float32): about -16.12 and 15.94."""
    lo, hi = clamped_logit(torch.tensor([0.0, 1.0], dtype=torch.float32)).tolist()
    return lo, hi


def saturated_share(logits: np.ndarray) -> float:
    """The share of scores that sit exactly on a clamp bound: the sigmoid saturated there, and they tie."""
    lo, hi = clamp_bounds()
    values = np.asarray(logits, dtype=np.float32)
    return float(np.mean((values == np.float32(lo)) | (values == np.float32(hi)))) if values.size else 0.0


class _Capture:
    """The input and output of the last call of one module (a forward hook)."""

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, _module, args, output) -> None:
        self.calls.append((args[0], output))


def _matches(output: torch.Tensor, out: torch.Tensor) -> bool:
    return isinstance(output, torch.Tensor) and (output is out or (output.numel() == out.numel() and torch.equal(output.reshape(out.shape), out)))


def trailing_sigmoid(model: nn.Module, inputs: Sequence) -> str | None:
    """The qualified name of the `nn.Sigmoid` whose output is the model's output on `inputs`, or None."""
    captures = {name: _Capture() for name, m in model.named_modules() if type(m) is nn.Sigmoid}
    if not captures:
        return None
    modules = dict(model.named_modules())
    handles = [modules[name].register_forward_hook(c) for name, c in captures.items()]
    training = model.training
    try:
        with torch.no_grad():
            out = model.eval()(*inputs)  # eval: a BatchNorm's running statistics are left as they were
    finally:
        model.train(training)
        for h in handles:
            h.remove()
    if not isinstance(out, torch.Tensor):
        return None
    found = [name for name, c in captures.items() if c.calls and _matches(c.calls[-1][1], out)]
    return found[-1] if found else None


class LogitsOf(nn.Module):
    """A model that returns probabilities, seen as one that returns logits: the input of its trailing
    `nn.Sigmoid` (`sigmoid`, a qualified name in `model`) where that is verified, else log(p / (1 - p))."""

    def __init__(self, model: nn.Module, sigmoid: str | None = None) -> None:
        super().__init__()
        self.model = model
        self.sigmoid = sigmoid

    def score_read(self) -> str:
        """How scores are read, for the record."""
        return f"the input of {self.sigmoid} (nn.Sigmoid)" if self.sigmoid else CLAMP

    def forward(self, *args):
        module = self._sigmoid_module()
        if module is None:
            return clamped_logit(self.model(*args))
        capture = _Capture()
        handle = module.register_forward_hook(capture)
        try:
            out = self.model(*args)
        finally:
            handle.remove()
        if capture.calls:
            pre, post = capture.calls[-1]
            if _matches(post, out):
                return pre.reshape(out.shape)
        return clamped_logit(out)

    def _sigmoid_module(self) -> nn.Module | None:
        if self.sigmoid is None:
            return None
        try:
            module = self.model.get_submodule(self.sigmoid)
        except AttributeError:
            return None
        return module if type(module) is nn.Sigmoid else None
