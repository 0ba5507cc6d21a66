"""Load a user's state dict into the harness model (weights_only: no code runs on load).

`torch.load(weights_only=True)` rebuilds tensors and plain containers only. A facebookresearch/dlrm
`--save-model` file also carries numpy scalars (its metrics: `test_acc` np.float64, `train_loss`
np.float32), so exactly the globals that rebuild those are allowed through torch's safe-globals
mechanism: numpy's scalar constructor and the numeric dtypes. They rebuild numbers from bytes and
call nothing chosen by the file; anything else a file asks for is refused, naming it.

Every refusal is one line naming what the file is not (empty, not a torch file, a damaged archive:
`checkpoint_file`, which the pre-flight check also uses; a pickle asking for a global); none
repeats torch's advice to load with `weights_only=False`.
"""

from __future__ import annotations

import pickle
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bench.errors import UserError
from bench.models.checkpoint_file import checkpoint_problem
from bench.models.dlrm_import import convert_fb_dlrm_state_dict, is_fb_dlrm_state_dict

# numpy >= 2 pickles its scalars as numpy._core.multiarray.scalar, numpy 1.x as numpy.core.multiarray.scalar.
_SCALAR = np._core.multiarray.scalar
NUMPY_SCALAR_GLOBALS = [
    _SCALAR,
    (_SCALAR, "numpy.core.multiarray.scalar"),
    np.dtype,
    *sorted({type(np.dtype(code)) for code in "?bBhHiIlLqQefd"}, key=lambda t: t.__name__),
]
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_UNSUPPORTED = re.compile(r"Unsupported global: GLOBAL (\S+)")


def _torch_reason(exc: Exception) -> str:
    """The cause inside torch's message, without its formatting or its weights_only=False advice."""
    text = _ANSI.sub("", str(exc))
    if m := _UNSUPPORTED.search(text):
        return f"it asks for {m.group(1)}"
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first.rstrip(".") or type(exc).__name__


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    problem = checkpoint_problem(path)
    if problem is not None:
        raise UserError(problem)
    try:
        with torch.serialization.safe_globals(NUMPY_SCALAR_GLOBALS), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol")  # the refusal below says it
            data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UserError(
            f"checkpoint {path} was refused ({_torch_reason(exc)}): the harness loads tensors, plain containers "
            "and numpy scalars, and never runs code from a file; re-save the weights with torch.save(model.state_dict(), PATH)"
        ) from None
    except (RuntimeError, EOFError, KeyError, ValueError, zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"checkpoint {path} is not a readable torch file ({type(exc).__name__}: {_torch_reason(exc)}); it may be truncated: re-save it") from None
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]  # facebookresearch/dlrm and Lightning wrap the weights
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise UserError(f"checkpoint {path} does not hold a state dict (a mapping of names to tensors)")
    return data


def load_checkpoint(model: nn.Module, path: str | Path) -> None:
    """Load a torchrec DLRM state dict, or a facebookresearch/dlrm one (mapped onto it)."""
    state = read_state_dict(path)
    if is_fb_dlrm_state_dict(state):
        state = convert_fb_dlrm_state_dict(state, model)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise UserError(
            f"checkpoint {path} does not match the model: missing keys {_few(missing)}, unexpected keys {_few(unexpected)}; "
            "pick the model= config the checkpoint was trained with"
        )
    wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items() if state[k].shape != v.shape]
    if wrong:
        raise UserError(f"checkpoint {path} has shapes that differ from the model (checkpoint vs model): {_few(wrong)}; check model= and workload=")
    model.load_state_dict(state)


def _few(items: list[str], limit: int = 4) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")
