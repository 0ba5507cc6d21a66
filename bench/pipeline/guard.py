"""Guards that run before anything is built: the memory estimate and resume.

- Memory: a job whose estimated peak (fp32 model unless resident, the backend's copy, its stored
  tables at FBGEMM's row bytes) exceeds `memory_fraction` of what is available is `skipped`. An
  untrained model (`model.weights=random`) has no fp32 tables: each backend builds only its own.
- Resume: with `resume=true`, a job whose ok or skipped record is already in
  `<reports_dir>/records.jsonl` for the same config hash and machine fingerprint is not measured
  again; that record is re-emitted with `resumed_from` set to its id.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path

import torch

from bench.backends.base import Backend
from bench.backends.tbe import row_alignment
from bench.config import Config, ModelConfig
from bench.errors import UserError
from bench.hashing import plain
from bench.measure.memory import MemoryEstimate, estimate_job
from bench.models.build import build_model
from bench.models.random_weights import RANDOM
from bench.record import RunRecord
from bench.store import RECORDS, StoreIndex
from bench.workloads.base import TableSpec, Workload

log = logging.getLogger(__name__)


def memory_estimate(cfg: Config, backend: Backend, workload: Workload, model_resident: bool, device: torch.device) -> MemoryEstimate:
    """The job's memory at its peak, from the workload's table sizes and the model config (nothing built)."""
    dim = int(cfg.model.embedding_dim)
    tables = {t.name: (int(t.num_embeddings), dim) for t in workload.tables}
    dtypes = backend.stored_table_dtypes({name: rows for name, (rows, _) in tables.items()})
    dense = _dense_bytes(json.dumps(plain(cfg.model), sort_keys=True), tuple((t.name, t.feature) for t in workload.tables), workload.num_dense)
    # random weights: no fp32 tables in the model; the backend builds its own (fp32 ones for fp32 backends)
    return estimate_job(tables, dense, dtypes, model_resident, row_alignment(device), fp32_tables=cfg.model.weights != RANDOM)


@functools.lru_cache(maxsize=8)
def _dense_bytes(model_json: str, tables: tuple, num_dense: int) -> int:
    """Bytes of the model's non-embedding parameters and buffers, from a build on the meta device with one-row tables."""
    specs = [TableSpec(name, feature, 1) for name, feature in tables]
    cfg = ModelConfig(**json.loads(model_json))
    try:
        with torch.device("meta"):
            model = build_model(cfg, specs, num_dense)
    except UserError:
        raise
    except Exception:  # noqa: BLE001 - a user's factory that needs real tensors: build it on the CPU
        model = build_model(cfg, specs, num_dense)
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return sum(t.numel() * t.element_size() for n, t in tensors if "embedding_bags" not in n)


class ResumeIndex:
    """Stored records by store path, read incrementally (one index per records.jsonl)."""

    def __init__(self) -> None:
        self._stores: dict[str, StoreIndex] = {}

    def stored(self, reports_dir: str, config_hash: str, fingerprint: str) -> RunRecord | None:
        path = os.path.abspath(Path(reports_dir) / RECORDS)
        if path not in self._stores:
            self._stores[path] = StoreIndex(Path(path))
        return self._stores[path].latest(config_hash, fingerprint)


def resumed(prior: RunRecord, record: RunRecord) -> RunRecord:
    """The stored measurement, re-emitted for this run: its results and environment, this run's config."""
    record.status, record.error = prior.status, prior.error
    record.metrics, record.env = prior.metrics, prior.env
    record.resumed_from = prior.record_id
    log.info("resume: %s %s bs=%s already measured (record %s)", record.backend, record.device, record.batch_size, prior.record_id)
    return record
