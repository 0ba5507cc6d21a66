"""Train the fp32 model on a workload's train split, with a checkpoint cache.

The cache key is a hash of the resolved workload, model (less `checkpoint`) and training config
plus the seed, so any change that could change the weights trains anew, and a second run with the
same config loads the stored state dict instead of training.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from bench.hashing import config_hash
from bench.models.checkpoint import load_checkpoint
from bench.models.dlrm import build_dlrm
from bench.progress import progress
from bench.workloads.base import Workload

log = logging.getLogger(__name__)


def model_cache_key(workload_cfg, model_cfg, seed: int, data: dict | None = None) -> str:
    model = dict(model_cfg)
    model.pop("checkpoint", None)
    model.get("train", {}).pop("progress", None)  # display only
    return config_hash({"workload": dict(workload_cfg), "data": data or {}, "model": model, "seed": seed})


def trained_model(model_cfg, workload: Workload, seed: int, cache_dir: Path) -> tuple[nn.Module, dict]:
    """The fp32 model: from `model.checkpoint`, from the cache, or trained now and cached.

    Returns the model (CPU, eval mode) and facts about where it came from.
    """
    from omegaconf import OmegaConf

    model = build_dlrm(model_cfg, workload.tables, workload.num_dense)
    if model_cfg.checkpoint:
        load_checkpoint(model, model_cfg.checkpoint)
        return model.eval(), {"source": "checkpoint", "path": str(model_cfg.checkpoint)}

    as_dict = lambda c: OmegaConf.to_container(c, resolve=True) if OmegaConf.is_config(c) else _asdict(c)  # noqa: E731
    key = model_cache_key(as_dict(workload.cfg), as_dict(model_cfg), seed, workload.data_identity())
    path = Path(cache_dir) / "models" / f"{key}.pt"
    if path.exists():
        try:
            model.load_state_dict(torch.load(path, weights_only=True))
            meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
            return model.eval(), {"source": "cache", "key": key, **meta}
        except Exception as exc:  # noqa: BLE001 - a damaged cache entry is a miss: train again
            log.warning("cached checkpoint %s is unreadable (%s); training again", path, type(exc).__name__)

    torch.manual_seed(seed)
    model = build_dlrm(model_cfg, workload.tables, workload.num_dense)  # re-init under the seed
    meta = train(model, workload, model_cfg.train)
    _save_atomic(model.state_dict(), path)
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2))
    return model.eval(), {"source": "trained", "key": key, **meta}


def train(model: nn.Module, workload: Workload, cfg) -> dict:
    """Minimise log loss: row-wise-style Adagrad on embedding tables (as DLRM), Adam on the MLPs."""
    sparse_params = [p for n, p in model.named_parameters() if "embedding_bags" in n]
    dense_params = [p for n, p in model.named_parameters() if "embedding_bags" not in n]
    optimizers = [
        torch.optim.Adagrad(sparse_params, lr=cfg.sparse_lr),
        torch.optim.Adam(dense_params, lr=cfg.dense_lr),
    ]
    loss_fn = nn.BCEWithLogitsLoss()
    steps = max(1, cfg.samples // cfg.batch_size)
    model.train()
    start = time.perf_counter()
    losses = []
    batches = itertools.chain.from_iterable(workload.batches("train", cfg.batch_size) for _ in itertools.count())
    with progress(total=steps, desc="train", enabled=cfg.progress) as bar:
        for _, batch in zip(range(steps), batches):
            logits = model(*batch.model_inputs()).squeeze(-1)
            loss = loss_fn(logits, batch.labels)
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in optimizers:
                opt.step()
            losses.append(loss.item())
            bar.update(1)
            if len(losses) % 50 == 0:
                bar.set_postfix(loss=f"{sum(losses[-50:]) / 50:.4f}")
    model.eval()
    tail = losses[-max(1, len(losses) // 10):]
    return {
        "train_steps": steps,
        "train_samples": steps * cfg.batch_size,
        "train_seconds": round(time.perf_counter() - start, 2),
        "final_train_loss": sum(tail) / len(tail),
    }


def _asdict(cfg) -> dict:
    import dataclasses

    return dataclasses.asdict(cfg)


def _save_atomic(state_dict: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(state_dict, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
