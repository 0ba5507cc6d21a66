"""Load a user's state dict into the harness model (weights_only: no code runs on load)."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch
from torch import nn

from bench.errors import UserError


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path} (give an existing file with model.checkpoint=PATH)")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"checkpoint {path} was refused by torch.load(weights_only=True), which only loads tensors and plain "
            f"containers and never runs code from a file: {first}. Re-save it as a plain state dict"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"checkpoint {path} is not a readable torch file ({type(exc).__name__}); it may be truncated: re-save it") from None
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]  # facebookresearch/dlrm and Lightning wrap the weights
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise UserError(f"checkpoint {path} does not hold a state dict (a mapping of names to tensors)")
    return data


def load_checkpoint(model: nn.Module, path: str | Path) -> None:
    """Load a torchrec DLRM state dict, or a facebookresearch/dlrm one (mapped onto it)."""
    from bench.models.dlrm_import import (
        convert_fb_dlrm_state_dict,
        is_fb_dlrm_state_dict,
    )

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
