"""The user's own model (`model=custom model.factory=package.module:function`).

The harness builds one EmbeddingBagCollection from the workload's pooled tables at `model.embedding_dim`
and calls the factory with the names torchrec's own `DLRM` takes, plus `model.kwargs`:

    factory(embedding_bag_collection=ebc, dense_in_features=num_dense, **kwargs) -> nn.Module

A workload with sequence features (docs/sequential.md) adds `embedding_collection=ec`, a torchrec
EmbeddingCollection of its sequence tables (unpooled lookups); a workload with no pooled feature passes no
`embedding_bag_collection=`. So a factory takes either or both.

The module's forward takes `(dense_features, KeyedJaggedTensor)` and returns one score per sample, or a
tuple or dict of outputs of which `model.output_key` names the score (`bench.models.outputs`;
`bench.models.contract` checks both before any work). `model.output` declares what the score is; a
model that returns probabilities is wrapped once (`bench.models.logits.LogitsOf`) so that everything
downstream, the training loss, every score, AUC and log loss, reads logits: the input of its trailing
`nn.Sigmoid` where the harness sees one, else the clamped `log(p / (1 - p))`.

What identifies the user's code for the caches (`code_identity`): the content of every `.py` file of
the factory's top-level package (or of the module file alone, for a top-level module), so an edit
anywhere in it retrains and re-scores; the files are hashed, not their modification times.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from bench.config import CUSTOM_ARCH
from bench.errors import UserError, one_line
from bench.models.dlrm import embedding_bag_collection, embedding_collection, pooled, sequence_tables
from bench.models.logits import LogitsOf, trailing_sigmoid
from bench.models.outputs import OutputOf
from bench.workloads.workload import TableSpec

DOCS = "docs/custom-model.md"


def is_custom(model_cfg) -> bool:
    return model_cfg.arch == CUSTOM_ARCH


def _cwd_on_path() -> None:
    """`python -m bench` puts the working folder first on sys.path; other entry points (a test's
    import, a launcher) may not, and the factory is named relative to it."""
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def factory_module(spec: str):
    """The imported module of `package.module:function`, or a one-line UserError."""
    module_name = spec.partition(":")[0]
    _cwd_on_path()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UserError(
                f"model.factory={spec}: no module named {exc.name!r} (run from the folder that holds it, or add that folder to PYTHONPATH)"
            ) from None
        raise UserError(f"model.factory={spec}: importing {module_name} failed: {one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import: one line
        raise UserError(f"model.factory={spec}: importing {module_name} failed: {one_line(exc)}") from None


def load_factory(spec: str) -> Callable[..., Any]:
    module = factory_module(spec)
    attr = spec.partition(":")[2]
    factory: Any = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise UserError(f"model.factory={spec}: {module.__name__} has no {attr!r}; {_callables_hint(module, attr)}")
    if not callable(factory):
        raise UserError(f"model.factory={spec}: {attr} is a {type(factory).__name__}, not a function or class")
    return factory


def _callables_hint(module, attr: str) -> str:
    """The functions and classes `module` defines itself, the closest to `attr` first."""
    own = sorted(n for n, v in vars(module).items()
                 if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__)
    if not own:
        return "it defines no public function or class"
    close = difflib.get_close_matches(attr, own, n=1, cutoff=0.6)
    listed = ", ".join(own[:12]) + (" ..." if len(own) > 12 else "")
    return (f"did you mean {module.__name__}:{close[0]}? " if close else "") + f"its functions and classes: {listed}"


def source_files(spec: str) -> list[Path]:
    """The files whose content identifies the factory's code: every .py file of its top-level package
    (the module file alone when it is a top-level module)."""
    module = factory_module(spec)
    top = importlib.import_module(module.__name__.split(".")[0])
    folders = list(getattr(top, "__path__", []))
    if folders:
        root = Path(folders[0])
        return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    return [Path(module.__file__)] if getattr(module, "__file__", None) else []


def code_identity(model_cfg) -> dict:
    """What identifies a custom model's code (a digest of its source files); {} for the built-in models."""
    if not is_custom(model_cfg):
        return {}
    files = source_files(model_cfg.factory)
    h = hashlib.sha256()
    root = files[0].parent if files else Path(".")
    for path in files:
        h.update(str(path.relative_to(root) if path.is_relative_to(root) else path.name).encode())
        h.update(path.read_bytes())
    return {"factory": model_cfg.factory, "files": len(files), "sha256": h.hexdigest()[:16]}


def collections_for(tables: list[TableSpec], embedding_dim: int, table_device: torch.device | str = "cpu") -> dict[str, nn.Module]:
    """The factory's table arguments: `embedding_bag_collection=` for the pooled tables, `embedding_collection=`
    for the sequence tables, each only where the workload has such tables."""
    out: dict[str, nn.Module] = {}
    if pooled(tables):
        out["embedding_bag_collection"] = embedding_bag_collection(tables, embedding_dim, table_device)
    if sequence_tables(tables):
        out["embedding_collection"] = embedding_collection(tables, embedding_dim, table_device)
    return out


def build_custom(cfg, tables: list[TableSpec], num_dense: int, table_device: torch.device | str = "cpu") -> nn.Module:
    """The user's module, as its factory returns it (not yet wrapped by `as_logits`)."""
    factory = load_factory(cfg.factory)
    collections = collections_for(tables, cfg.embedding_dim, table_device)
    kwargs = dict(cfg.kwargs or {})
    clash = sorted({"embedding_bag_collection", "embedding_collection", "dense_in_features"} & set(kwargs))
    if clash:
        raise UserError(f"model.kwargs sets {', '.join(clash)}: the harness passes it; remove it from model.kwargs")
    args = dict(**collections, dense_in_features=num_dense, **kwargs)
    try:
        inspect.signature(factory).bind(**args)
    except TypeError as exc:
        given = ", ".join(f"{k}=" for k in (*collections, "dense_in_features"))
        raise UserError(
            f"model.factory={cfg.factory} cannot be called with {given} and model.kwargs "
            f"({exc}): give a factory that takes them ({DOCS} shows a three-line adapter)"
        ) from None
    except ValueError:
        pass  # no signature to read (a builtin): the call below says what is wrong
    try:
        model = factory(**args)
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: one line
        raise UserError(f"model.factory={cfg.factory} raised {one_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise UserError(f"model.factory={cfg.factory} returned a {type(model).__name__}, not a torch nn.Module")
    return model


def with_output(model: nn.Module, model_cfg) -> nn.Module:
    """The model returning the one output `model.output_key` names (bench.models.outputs); as it is without one."""
    key = getattr(model_cfg, "output_key", None)
    return model if key is None else OutputOf(model, str(key))


def as_logits(model: nn.Module, model_cfg, probe: Sequence | None = None) -> nn.Module:
    """The model as the harness uses it: returning the one score `model.output_key` names, as logits,
    whatever `model.output` declares. For a probabilities model, `probe` (a batch's model inputs) finds the
    trailing nn.Sigmoid whose input is read (bench.models.logits); without one the scores are read through
    the clamp."""
    model = with_output(model, model_cfg)
    if model_cfg.output != "probabilities":
        return model
    return LogitsOf(model, trailing_sigmoid(model, probe) if probe is not None else None)
