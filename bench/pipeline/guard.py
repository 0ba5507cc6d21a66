"""The memory estimate, made before anything is built.

A job whose estimated peak (fp32 model unless resident, the backend's copy, its stored tables at
FBGEMM's row bytes) exceeds `memory_fraction` of what is available is `skipped`. An untrained
model (`model.weights=random`) has no fp32 tables: each backend builds only its own.
"""

from __future__ import annotations

import functools
import json
import logging

import torch

from bench.backends.backend import Backend
from bench.backends.tbe import row_alignment
from bench.config import Config, ModelConfig
from bench.errors import UserError
from bench.hashing import plain
from bench.measure.memory import MemoryEstimate, estimate_job
from bench.models.build import build_model
from bench.models.random_weights import RANDOM
from bench.workloads.workload import Sequences, TableSpec, Workload

log = logging.getLogger(__name__)


def memory_estimate(cfg: Config, backend: Backend, workload: Workload, model_resident: bool, device: torch.device) -> MemoryEstimate:
    """The job's memory at its peak, from the workload's table sizes and the model config (nothing built)."""
    dim = int(cfg.model.embedding_dim)
    tables = {t.name: (int(t.num_embeddings), dim) for t in workload.tables}
    dtypes = backend.stored_table_dtypes({name: rows for name, (rows, _) in tables.items()})
    dense = _dense_bytes(json.dumps(plain(cfg.model), sort_keys=True), tuple((t.name, t.feature, t.sequence) for t in workload.tables),
                         workload.num_dense, workload.sequences)
    # random weights: no fp32 tables in the model; the backend builds its own (fp32 ones for fp32 backends)
    return estimate_job(tables, dense, dtypes, model_resident, row_alignment(device), fp32_tables=cfg.model.weights != RANDOM)


@functools.lru_cache(maxsize=8)
def _dense_bytes(model_json: str, tables: tuple, num_dense: int, sequences: Sequences | None = None) -> int:
    """Bytes of the model's non-embedding parameters and buffers, from a build on the meta device with one-row tables."""
    specs = [TableSpec(name, feature, 1, sequence=sequence) for name, feature, sequence in tables]
    cfg = ModelConfig(**json.loads(model_json))
    try:
        with torch.device("meta"):
            model = build_model(cfg, specs, num_dense, sequences=sequences)
    except UserError:
        raise
    except Exception:  # noqa: BLE001 - a user's factory that needs real tensors: build it on the CPU
        model = build_model(cfg, specs, num_dense, sequences=sequences)
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return sum(t.numel() * t.element_size() for n, t in tensors if "embedding_bags" not in n and "embeddings." not in n)
