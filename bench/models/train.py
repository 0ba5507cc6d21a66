"""Train the fp32 model on a workload's train split, with a checkpoint cache.

The cache key is a hash of the resolved workload, model (less `checkpoint`) and training config
plus the seed, the data files' identity and a custom model's source digest, so any change that could
change the weights (an edited model, a replaced data file) trains anew, and a second run with the
same config, code and data loads the stored state dict instead of training.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

from bench.config import CUSTOM_ARCH
from bench.errors import UserError
from bench.hashing import config_hash, plain
from bench.io import write_json_atomic, write_text_atomic
from bench.models.checkpoint import load_checkpoint
from bench.models.build import build_model
from bench.models.custom import as_logits, code_identity
from bench.models.logits import CLAMP, LogitsOf
from bench.models.random_weights import RANDOM, WEIGHTS
from bench.progress import once_per_machine, progress
from bench.workloads.workload import Workload

log = logging.getLogger(__name__)


def model_cache_key(workload_cfg, model_cfg, seed: int, data: dict | None = None, code: dict | None = None) -> str:
    model = dict(model_cfg)
    model.pop("checkpoint", None)
    model.get("train", {}).pop("progress", None)  # display only
    for added in ("output_key", "hstu"):  # added later: unset, the weights cached before it are the same
        if model.get(added, 0) is None:
            del model[added]
    parts = {"workload": dict(workload_cfg), "data": data or {}, "model": model, "seed": seed}
    if code:  # a custom model's source (bench.models.custom.code_identity)
        parts["code"] = code
    return config_hash(parts)


def input_identity(model_cfg, workload: Workload) -> dict:
    """The user's data and code behind a model, beyond its config: the data files' identity and a custom
    model's source digest; {} for a built-in model on generated data."""
    out = {}
    data, code = workload.data_identity(), code_identity(model_cfg)
    if data:
        out["data"] = data
    if code:
        out["code"] = code
    return out


def trained_model(model_cfg, workload: Workload, seed: int, cache_dir: Path) -> tuple[nn.Module, dict]:
    """The fp32 model: from `model.checkpoint`, from the cache, or trained now and cached.

    Returns the model (CPU, eval mode, returning logits: `bench.models.custom.as_logits`) and facts
    about where it came from. With `weights=random` the model is untrained and its tables stay on the
    meta device (`bench.models.random_weights`).
    """
    if model_cfg.weights not in WEIGHTS:
        raise UserError(f"model.weights={model_cfg.weights!r} is not one of {', '.join(WEIGHTS)}")
    torch.manual_seed(seed)  # the initial weights, when this model is trained now
    key = model_cache_key(plain(workload.cfg), plain(model_cfg), seed, workload.data_identity(), code_identity(model_cfg))
    if model_cfg.weights == RANDOM:
        model = as_logits(build_model(model_cfg, workload.tables, workload.num_dense, table_device="meta", sequences=workload.sequences), model_cfg)
        model.random_weights_seed = seed
        return model.eval(), {"source": RANDOM, "key": key}
    model = build_model(model_cfg, workload.tables, workload.num_dense, sequences=workload.sequences)
    if model_cfg.checkpoint:
        load_checkpoint(model, model_cfg.checkpoint)  # into the module as the user wrote it
        model = as_logits(model, model_cfg, probe_for(model_cfg, workload))
        return model.eval(), {"source": "checkpoint", "path": str(model_cfg.checkpoint), **read_info(model)}
    model = as_logits(model, model_cfg, probe_for(model_cfg, workload))
    read = read_info(model)
    if read.get("score_read", CLAMP) != CLAMP:
        # trained through its pre-sigmoid value, not through the clamp: not the weights a cache entry trained
        # through the clamp holds (a model read through the clamp keeps the key it always had)
        key = model_cache_key(plain(workload.cfg), plain(model_cfg), seed, workload.data_identity(),
                              {**code_identity(model_cfg), "read": read["score_read"]})

    path = Path(cache_dir) / "models" / f"{key}.pt"
    if path.exists():
        try:
            model.load_state_dict(torch.load(path, weights_only=True))
            meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
            return model.eval(), {"source": "cache", "key": key, **meta, **read}
        except Exception as exc:  # noqa: BLE001 - a damaged cache entry is a miss: train again
            log.warning("cached checkpoint %s is unreadable (%s); training again", path, type(exc).__name__)
            torch.manual_seed(seed)  # the load may have touched the weights: start from the seed again
            model = as_logits(build_model(model_cfg, workload.tables, workload.num_dense, sequences=workload.sequences), model_cfg, probe_for(model_cfg, workload))

    steps = max(1, model_cfg.train.samples // model_cfg.train.batch_size)
    log.info("model: training it once, then cached (%s training samples in %d steps; %s); cached in %s",
             f"{steps * model_cfg.train.batch_size:,}", steps, training_time_words(steps * model_cfg.train.batch_size), path)
    with once_per_machine("training"):
        meta = train(model, workload, model_cfg.train)
    log.info("model: trained in %.0f s", meta["train_seconds"])
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    write_text_atomic(path, buffer.getvalue())
    write_json_atomic(path.with_suffix(".json"), meta)
    return model.eval(), {"source": "trained", "key": key, **meta, **read}


def needs_training(model_cfg, workload: Workload, seed: int, cache_dir: Path) -> bool:
    """Whether `trained_model` would train a built-in model now (trained weights, no checkpoint, no cache
    entry); False for a custom model, whose cache key waits on how its scores are read."""
    if model_cfg.weights == RANDOM or model_cfg.checkpoint or model_cfg.arch == CUSTOM_ARCH:
        return False
    key = model_cache_key(plain(workload.cfg), plain(model_cfg), seed, workload.data_identity(), code_identity(model_cfg))
    return not (Path(cache_dir) / "models" / f"{key}.pt").exists()


RATE_STEPS = 2  # steps timed (after one untimed) to estimate how long training takes here


def training_seconds(model_cfg, workload: Workload) -> float:
    """How long training `model_cfg` takes on this machine: a few steps of it timed now, on a throwaway
    copy, times the steps the recipe runs (the first step, which allocates the optimizer state, untimed)."""
    model = build_model(model_cfg, workload.tables, workload.num_dense, sequences=workload.sequences)
    recipe = model_cfg.train
    probe = dataclasses.replace(recipe, samples=(1 + RATE_STEPS) * recipe.batch_size, progress=False)
    at: list[float] = []
    train(model, workload, probe, after_step=lambda _: at.append(time.perf_counter()))
    return (at[-1] - at[0]) / (len(at) - 1) * max(1, recipe.samples // recipe.batch_size)


PROBE_SAMPLES = 8
# At or above this many training samples the words say minutes: the default model (conf/model/small.yaml)
# (655,360 samples) trained in 12 s on the idle 2-core machine and in 348 s while other work loaded its cores;
# +preset=tiny's 16,384 samples train in seconds.
MINUTES_FROM_SAMPLES = 500_000


def training_time_words(samples: int) -> str:
    """A rough time for training `samples` samples, in words, for the line printed before training."""
    return "minutes on 2 cores" if samples >= MINUTES_FROM_SAMPLES else "seconds to a minute on 2 cores"


def probe_for(model_cfg, workload: Workload) -> tuple | None:
    """The probe batch `as_logits` runs to find a probabilities model's trailing sigmoid; None for a model that
    returns logits, which runs none (the batch costs a chunk of the calibration split: tenths of a second)."""
    return probe_inputs(workload) if model_cfg.output == "probabilities" else None


def probe_inputs(workload: Workload) -> tuple | None:
    """A few calibration rows as model inputs: the batch that finds a probabilities model's trailing sigmoid."""
    batch = next(iter(workload.batches("calibration", PROBE_SAMPLES)), None)
    return batch.model_inputs() if batch is not None else None


def read_info(model: nn.Module) -> dict:
    """How a probabilities model's scores are read (`score_read`); {} for a model that returns logits."""
    return {"score_read": model.score_read()} if isinstance(model, LogitsOf) else {}


def train(model: nn.Module, workload: Workload, cfg, after_step: Callable[[int], None] | None = None) -> dict:
    """Minimise log loss: Adagrad on the embedding tables (as DLRM trains them), Adam on the MLPs.

    `after_step(samples)`, if given, is called after each step with the samples seen so far (the
    learning-curve script scores the model there: the learning rates are constant, so the weights after
    n samples of a long run are those of a run of n samples)."""
    # The tables are the parameters of the model's EmbeddingBagCollections and EmbeddingCollections (sequence
    # features), wherever they sit in it.
    ebcs = [m for m in model.modules() if isinstance(m, (EmbeddingBagCollection, EmbeddingCollection))]
    table_ids = {id(p) for ebc in ebcs for p in ebc.parameters()}
    sparse_params = [p for p in model.parameters() if id(p) in table_ids]
    dense_params = [p for p in model.parameters() if id(p) not in table_ids]
    optimizers = [
        *([torch.optim.Adagrad(sparse_params, lr=cfg.sparse_lr)] if sparse_params else []),
        *([torch.optim.Adam(dense_params, lr=cfg.dense_lr)] if dense_params else []),
    ]
    loss_fn = nn.BCEWithLogitsLoss()
    steps = max(1, cfg.samples // cfg.batch_size)
    # Sparse row gradients: a step reads and writes only the rows its batch looked up, not every
    # table (Adagrad with a zero gradient leaves a row as it is, so the updates are the same; a
    # 2 GB table set trains in minutes instead of rewriting 2 GB of state per step).
    bags = [m for ebc in ebcs for m in ebc.modules() if isinstance(m, (nn.EmbeddingBag, nn.Embedding))]
    for bag in bags:
        bag.sparse = True
    model.train()
    start = time.perf_counter()
    losses = []
    batches = itertools.chain.from_iterable(workload.batches("train", cfg.batch_size) for _ in itertools.count())
    try:
        with progress(total=steps, desc="train", enabled=cfg.progress) as bar:
            for _, batch in zip(range(steps), batches):
                # logits whatever the model declares (a probabilities model is wrapped by as_logits): log loss
                logits = model(*batch.model_inputs()).reshape(-1)
                loss = loss_fn(logits, batch.labels)
                for opt in optimizers:
                    opt.zero_grad(set_to_none=True)
                loss.backward()
                for opt in optimizers:
                    opt.step()
                losses.append(loss.item())
                bar.update(1)
                if after_step is not None:
                    after_step(len(losses) * cfg.batch_size)
                if len(losses) % 50 == 0:
                    bar.set_postfix(loss=f"{sum(losses[-50:]) / 50:.4f}")
    finally:
        for bag in bags:
            bag.sparse = False
    model.eval()
    tail = losses[-max(1, len(losses) // 10):]
    return {
        "train_steps": steps,
        "train_samples": steps * cfg.batch_size,
        "train_seconds": round(time.perf_counter() - start, 2),
        "final_train_loss": sum(tail) / len(tail),
    }
