"""The contract a user's model (`model=custom`) must keep, checked on one tiny batch before any work.

    - the factory builds an nn.Module (`bench.models.custom`);
    - it holds at least one torchrec EmbeddingBagCollection (or, for sequence features, EmbeddingCollection),
      and its tables read exactly the workload's features, each with at least the rows the workload's ids reach;
    - its forward takes `(dense_features, KeyedJaggedTensor)`;
    - it returns one floating-point score per sample, shape [B] or [B, 1], finite; or a tuple, list or dict of
      outputs, of which `model.output_key` names that score (an index or a key);
    - declared `model.output=probabilities`, the scores lie in [0, 1] (logits that happen to lie there
      cannot be told apart; the declaration decides).

Each violation is one UserError line (exit code 2 from `python -m bench`, nothing trained or stored).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

from bench import registry
from bench.config import HSTU_ARCH
from bench.batch import Batch
from bench.errors import UserError, one_line
from bench.models.build import build_model
from bench.models.checkpoint import load_checkpoint
from bench.models.custom import DOCS, is_custom
from bench.models.dlrm import check_pooled_only
from bench.models.outputs import describe, pick, several
from bench.workloads.workload import Workload

PROBE_SAMPLES = 8  # the tiny batch: a few real rows of the calibration split


def check_model_and_data(cfg: DictConfig) -> None:
    """The pre-flight check of a composed config: the workload opens its data (a Parquet file's columns
    and types), and a `model=custom` keeps the contract on one tiny batch of it."""
    entry = registry.get("workload", cfg.workload.name)
    workload = entry.factory(OmegaConf.to_object(cfg.workload), int(cfg.seed), Path(str(cfg.cache_dir)))
    workload.check_data()
    mapping = workload.mapping()
    if mapping:
        print(mapping, flush=True)  # which column became which, before any work
    model_cfg = OmegaConf.to_object(cfg.model)
    if is_custom(model_cfg):
        check_model(model_cfg, workload)
    else:
        check_builtin(model_cfg, workload)


def check_builtin(model_cfg, workload: Workload) -> None:
    """A built-in model that cannot read the workload's features: a DLRM on sequences, HSTU without them."""
    if model_cfg.arch == HSTU_ARCH:
        if workload.sequences is None:
            raise UserError(f"model=hstu reads a history and candidates, and workload {workload.cfg.name} has none: use a sequential "
                            "workload (workload=synthetic_seq or workload=movielens; docs/sequential.md)")
    elif workload.sequences is not None or getattr(workload.cfg, "sequence_features", None):
        check_pooled_only(model_cfg, workload.tables)  # only then: a workload's tables may take a pass over its data


def check_model(model_cfg, workload: Workload) -> None:
    """Build the user's model for `workload` and run one tiny batch through it; UserError on a violation."""
    name = f"model.factory={model_cfg.factory}"
    with torch.random.fork_rng():  # the job seeds its own initial weights; the check leaves the RNG as it was
        model = build_model(model_cfg, workload.tables, workload.num_dense, sequences=workload.sequences)
    if model_cfg.checkpoint:
        load_checkpoint(model, model_cfg.checkpoint)
    check_tables(model, workload, name)
    batch = _probe_batch(workload)
    check_forward(model.eval(), batch, model_cfg.output, name, model_cfg.output_key)


def check_tables(model: nn.Module, workload: Workload, name: str) -> None:
    ebcs = [m for m in model.modules() if isinstance(m, EmbeddingBagCollection)]
    ecs = [m for m in model.modules() if isinstance(m, EmbeddingCollection)]
    has_sequences = any(t.sequence for t in workload.tables)
    if not ebcs and not ecs:
        given = "embedding_bag_collection= or embedding_collection=" if has_sequences else "embedding_bag_collection="
        raise UserError(
            f"{name} built a {type(model).__name__} without a torchrec EmbeddingBagCollection: look the sparse "
            f"features up in the {given} the harness passes ({DOCS})"
        )
    rows = {t.feature: int(t.num_embeddings) for t in workload.tables}
    tables = {feature: cfg for ebc in ebcs for cfg in ebc.embedding_bag_configs() for feature in cfg.feature_names}
    tables.update({feature: cfg for ec in ecs for cfg in ec.embedding_configs() for feature in cfg.feature_names})
    unknown = sorted(set(tables) - set(rows))
    if unknown:
        raise UserError(
            f"{name}: its EmbeddingBagCollection reads features {unknown} that workload {workload.cfg.name} does not have "
            f"(it has {sorted(rows)}): build the tables from the embedding_bag_collection= the harness passes"
        )
    unread = sorted(set(rows) - set(tables))
    if unread:
        raise UserError(
            f"{name}: no table of its EmbeddingBagCollections reads the workload's features {unread}: "
            "every feature of the workload needs a table (or leave the feature out of the workload)"
        )
    short = [f"{tables[f].name} ({tables[f].num_embeddings} rows, feature {f} needs {n})" for f, n in rows.items() if tables[f].num_embeddings < n]
    if short:
        raise UserError(f"{name}: tables smaller than the workload's ids reach: {', '.join(short)}")


def _probe_batch(workload: Workload) -> Batch:
    try:
        return next(iter(workload.batches("calibration", PROBE_SAMPLES)))
    except StopIteration:
        raise UserError(f"workload {workload.cfg.name}: the calibration split is empty, so the model cannot be checked") from None


def check_forward(model: nn.Module, batch: Batch, output: str, name: str, output_key: str | None = None) -> None:
    args = batch.model_inputs()
    try:
        inspect.signature(model.forward).bind(*args)
    except TypeError as exc:
        raise UserError(f"{name}: its forward does not take (dense_features, KeyedJaggedTensor): {exc}") from None
    except ValueError:
        pass  # no signature to read: the call says
    n = len(batch)
    try:
        with torch.no_grad():
            out = model(*args)
    except Exception as exc:  # noqa: BLE001 - the user's forward failed: one line
        raise UserError(f"{name}: its forward failed on a batch of {n} samples of (dense_features, KeyedJaggedTensor): {one_line(exc)}") from None
    if output_key is not None:
        out, why = pick(out, str(output_key))
        if why is not None:
            raise UserError(f"{name}: {why}")
        name = f"{name} model.output_key={output_key}"
    elif several(out):
        raise UserError(f"{name}: its forward returned {describe(out)}; name the score among them with model.output_key= "
                        f"(a key, or an index) ({DOCS})")
    if not isinstance(out, torch.Tensor):
        raise UserError(f"{name}: its forward returned a {type(out).__name__}; return a tensor of one score per sample, shape [{n}] or [{n}, 1]")
    if tuple(out.shape) not in ((n,), (n, 1)):
        raise UserError(f"{name}: its forward returned shape {list(out.shape)} for a batch of {n} samples; return one score per sample, shape [{n}] or [{n}, 1]")
    if not out.is_floating_point():
        raise UserError(f"{name}: its forward returned {out.dtype} scores; return floating-point scores")
    if not bool(torch.isfinite(out).all()):
        raise UserError(f"{name}: its forward returned NaN or inf scores on a batch of {n} samples")
    lo, hi = float(out.min()), float(out.max())
    if output == "probabilities" and (lo < 0 or hi > 1):
        raise UserError(
            f"{name}: model.output=probabilities, but the model returned scores from {lo:.3g} to {hi:.3g}, outside [0, 1]: "
            "it returns logits; set model.output=logits (or end the model with a sigmoid)"
        )
