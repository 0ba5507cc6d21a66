"""A model whose forward returns several outputs, read through the one that is the score (`model.output_key`).

Production rankers often return a tuple (`(score, aux_loss)`) or a dict (`{"ctr": ..., "cvr": ...}`).
`model.output_key` names the score: a dict's key, or a tuple's (or list's) index, given as a number. The
harness wraps the model once (`OutputOf`), before anything else reads it, so training, the probabilities
reading (bench.models.logits), every backend and every score see a model that returns that one tensor.

`pick` says in one line what went wrong, for the contract check (bench.models.contract) that runs it on
one tiny batch before any work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


def describe(out: Any) -> str:
    """What a forward returned, in a few words: `a dict with keys ['ctr', 'cvr']`, `a tuple of 2 outputs`."""
    if isinstance(out, Mapping):
        return f"a {type(out).__name__} with keys {sorted(map(str, out))}"
    if isinstance(out, (tuple, list)):
        return f"a {type(out).__name__} of {len(out)} outputs"
    return f"a {type(out).__name__}"


def several(out: Any) -> bool:
    return isinstance(out, (Mapping, tuple, list))


def pick(out: Any, key: str) -> tuple[Any, str | None]:
    """(the output `key` names, None), or (None, why not: one line that says what to set)."""
    if isinstance(out, Mapping):
        if key in out:
            return out[key], None
        return None, f"its forward returned {describe(out)}, and model.output_key={key} is not one of them: set one of those keys"
    if isinstance(out, (tuple, list)):
        index = int(key) if key.lstrip("-").isdigit() else None
        if index is not None and 0 <= index < len(out):
            return out[index], None
        return None, (f"its forward returned {describe(out)}, and model.output_key={key} is not an index of it: "
                      f"set model.output_key to 0..{len(out) - 1}")
    return None, f"model.output_key={key}, but its forward returned {describe(out)}, not a tuple or dict: remove model.output_key"


class OutputOf(nn.Module):
    """`model` seen as one that returns the output `key` names (a dict's key, a tuple's index)."""

    def __init__(self, model: nn.Module, key: str) -> None:
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, *args) -> torch.Tensor:
        out, why = pick(self.model(*args), self.key)
        if why is not None:
            raise ValueError(why)
        return out
