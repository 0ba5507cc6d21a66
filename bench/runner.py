"""`run_one(cfg) -> RunRecord`: the one code path from a resolved config to a run record.

`python -m bench`, the sweep, the suites and the tests all call it. It never raises for a job
that fails: the failure becomes a record with status `error` (or `skipped`, with a reason, when
the device or backend cannot run here), so a sweep goes on and nothing measured is lost.

Work is shared between the jobs of one process (a sweep runs its jobs in-process): the workload
and its eval batches are built once, the fp32 model is trained or loaded once, and a backend's
prepared model and eval scores are computed once per (model, backend, device) and reused across
batch sizes. Eval scores are also cached on disk, keyed by config hashes and a digest of the
harness's code, so a warm re-run skips evaluation but never reuses scores from other code; a cache
file that cannot be read (truncated by a kill) is a miss and is written anew.

Fault tolerance: an exception, a NaN or inf score, or running out of memory fails the job, not
the sweep (after an out-of-memory the shared work is dropped so the next job starts clean). Before
the fp32 model and the backend are built, their memory is estimated and a job that would not fit
is `skipped` with the reason (`memory_fraction`). With `resume=true`, a job whose ok or skipped
record is already in `<reports_dir>/records.jsonl` for the same config hash and machine
fingerprint is not measured again: that record is re-emitted with `resumed_from` set to its id.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import logging
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from bench import registry
from bench.backends.base import Backend
from bench.backends.tbe import WEIGHT_DTYPES, row_alignment
from bench.batch import Batch
from bench.device import prepare_process, resolve
from bench.errors import UserError
from bench.hashing import config_hash
from bench.hashing import plain as _plain
from bench.measure.accuracy import accuracy_metrics, score
from bench.measure.env import environment
from bench.measure.memory import MemoryEstimate, PeakMemory, estimate_job, memory_skip_reason, model_bytes
from bench.measure.stats import paired_auc_delta
from bench.measure.tables import embedding_bytes
from bench.measure.timing import time_module
from bench.models.dlrm import build_dlrm
from bench.models.train import trained_model
from bench.results import RunRecord, StoreIndex
from bench.workloads.base import Workload

log = logging.getLogger(__name__)

# Keys that change where output goes or how it is shown, never what is measured.
NON_SEMANTIC_KEYS = ("reports_dir", "cache_dir", "sweep_name", "gate", "run_gate", "resume", "memory_fraction")
OUT_OF_MEMORY = (MemoryError, torch.OutOfMemoryError)


def job_hash(resolved: dict[str, Any]) -> str:
    return config_hash({k: v for k, v in resolved.items() if k not in NON_SEMANTIC_KEYS})


def run_one(cfg: DictConfig) -> RunRecord:
    return run_job(cfg)[0]


def run_job(cfg: DictConfig) -> tuple[RunRecord, Exception | None]:
    """The record, and the exception behind an `error` record (None otherwise)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    record = RunRecord(
        status="ok",
        workload=cfg.workload.name,
        backend=cfg.backend.name,
        device=cfg.device.type,
        batch_size=cfg.batch_size,
        config=resolved,
        config_hash=job_hash(resolved),
        env={},
    )
    device = None
    try:
        _validate(cfg)
        prepare_process(cfg.device, cfg.threads)
        device, skip = resolve(cfg.device)
        if skip is None:
            backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)
            skip = backend.unsupported_reason(device)
        if skip is not None:
            device = None  # not usable here: describe the machine without it
        if cfg.get("resume"):
            prior = _stored_record(cfg, record.config_hash, environment(device)["fingerprint"])
            if prior is not None:
                return _resumed(prior, record), None
        if skip is None and cfg.get("memory_fraction") is not None:
            skip = memory_skip_reason(_memory_estimate(cfg, backend, device), device, cfg.memory_fraction)
        if skip is not None:
            record.status, record.error = "skipped", skip
        else:
            record.metrics = _measure(cfg, backend, device)
        return record, None
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        record.status = "error"
        if isinstance(exc, OUT_OF_MEMORY):
            clear_caches()  # the next job starts without this one's leftovers
            record.error = f"out of memory ({type(exc).__name__}: {exc}); the shared caches were dropped"
        else:
            record.error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
        log.debug("job failed", exc_info=True)
        return record, exc
    finally:
        if not record.resumed_from:
            record.env = environment(device)


# ------------------------------------------------------------------------------------------ resume

_stores: dict[str, StoreIndex] = {}


def _stored_record(cfg: DictConfig, config_hash_: str, fingerprint: str) -> RunRecord | None:
    path = os.path.abspath(Path(cfg.reports_dir) / "records.jsonl")
    if path not in _stores:
        _stores[path] = StoreIndex(Path(path))
    return _stores[path].latest(config_hash_, fingerprint)


def _resumed(prior: RunRecord, record: RunRecord) -> RunRecord:
    """The stored measurement, re-emitted for this run: its results and environment, this run's config."""
    record.status, record.error = prior.status, prior.error
    record.metrics, record.env = prior.metrics, prior.env
    record.resumed_from = prior.record_id
    log.info("resume: %s %s bs=%s already measured (record %s)", record.backend, record.device, record.batch_size, prior.record_id)
    return record


# ------------------------------------------------------------------------------ the resource guard


def _memory_estimate(cfg: DictConfig, backend: Backend, device: torch.device) -> MemoryEstimate:
    """The job's memory at its peak, from the workload's table sizes and the model config (nothing built)."""
    workload = _workload(cfg)
    dim = int(cfg.model.embedding_dim)
    tables = {t.name: (int(t.num_embeddings), dim) for t in workload.tables}
    weight = getattr(backend, "weight_dtype", None)  # TBE backends store tables of their own; others copy fp32 ones
    dtypes = None
    if weight is not None:
        # a per-table weight type that is not one leaves the default here; prepare() then names the mistake
        per_table = {k: str(v) for k, v in (getattr(backend.cfg, "per_table", None) or {}).items() if str(v) in WEIGHT_DTYPES}
        dtypes = {name: per_table.get(name, weight) for name in tables}
    resident = _model_ident(cfg) in _model_cache
    return estimate_job(tables, _dense_bytes(cfg, workload), dtypes, resident, row_alignment(device))


@functools.lru_cache(maxsize=8)
def _dense_bytes_cached(model_json: str, tables: tuple, num_dense: int) -> int:
    """Bytes of the model's non-embedding parameters and buffers, from a build on the meta device with one-row tables."""
    from bench.workloads.base import TableSpec

    specs = [TableSpec(name, feature, 1) for name, feature in tables]
    with torch.device("meta"):
        model = build_dlrm(OmegaConf.create(model_json), specs, num_dense)
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return sum(t.numel() * t.element_size() for n, t in tensors if "embedding_bags" not in n)


def _dense_bytes(cfg: DictConfig, workload: Workload) -> int:
    tables = tuple((t.name, t.feature) for t in workload.tables)
    return _dense_bytes_cached(json.dumps(_plain(cfg.model), sort_keys=True), tables, workload.num_dense)


def clear_caches() -> None:
    """Drop the work shared between jobs of this process (models, prepared variants, scores)."""
    for cache in (_model_cache, _split_cache, _prepared_cache, _score_cache, _timing_cache, _stores):
        cache.clear()
    for fn in (_workload_cached, _dense_bytes_cached):
        fn.cache_clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _validate(cfg: DictConfig) -> None:
    for key in ("batch_size", "eval_batch_size", "calibration_batch_size"):
        value = cfg[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{key} must be a positive integer, got {value!r} ({key}=N)")
    fraction = cfg.get("memory_fraction")
    if fraction is not None and not (isinstance(fraction, (int, float)) and fraction > 0):
        raise UserError(f"memory_fraction must be a positive number (or null to turn the memory check off), got {fraction!r}")
    for key in ("warmup_batches", "trials", "batches_per_trial"):
        if cfg.timing[key] < (0 if key == "warmup_batches" else 1):
            raise UserError(f"timing.{key} must be positive, got {cfg.timing[key]}")


def _measure(cfg: DictConfig, backend: Backend, device: torch.device) -> dict[str, Any]:
    workload = _workload(cfg)
    n_eval = workload.num_samples("eval")
    if cfg.batch_size > n_eval:  # checked before the model is trained or loaded
        raise UserError(f"batch_size {cfg.batch_size} is larger than the eval split ({n_eval} samples): lower batch_size")
    model, model_key, model_info = _model(cfg, workload)

    with PeakMemory(device) as peak:
        prepared = _prepared(cfg, backend, model, model_key, workload, device)
        labels, logits = _scores(cfg, cfg.backend, prepared, model_key, workload, device)
        inputs = _timing_inputs(cfg, workload, device)
        timing = time_module(prepared, inputs, cfg.batch_size, device, **OmegaConf.to_container(cfg.timing))

    metrics: dict[str, Any] = accuracy_metrics(labels, logits)
    metrics["oracle_auc"] = workload.oracle_auc()
    metrics.update(_delta_against_fp32(cfg, model, model_key, workload, device, labels, logits))
    metrics.update(_fidelity(cfg, backend, model, model_key, workload, device, labels, logits))
    metrics.update(
        throughput=timing.throughput,
        throughput_trials=timing.trial_throughput,
        latency_ms=timing.latency_percentiles(),
        latency_samples_ms=timing.latency_ms,
        embedding_bytes=embedding_bytes(prepared),
        model_bytes=model_bytes(prepared),
        peak_rss_bytes=peak.peak_rss_bytes,
        peak_rss_scope=peak.rss_scope,
        cuda_peak_bytes=peak.cuda_peak_bytes,
        threads=torch.get_num_threads(),
        model_source=model_info.get("source"),
        workload_info=workload.describe(),
        table_rows=[int(t.num_embeddings) for t in workload.tables],
        timing_batches=len(inputs),  # distinct batches the timing loop cycles over
        sample="one row (user-item pair) of the workload",
    )
    return metrics


# ---------------------------------------------------------------- shared work, cached per process


@functools.lru_cache(maxsize=2)
def _workload_cached(name: str, cfg_json: str, seed: int, cache_dir: str) -> Workload:
    entry = registry.get("workload", name)
    return entry.factory(OmegaConf.create(cfg_json), seed, Path(cache_dir))


def _workload(cfg: DictConfig) -> Workload:
    return _workload_cached(cfg.workload.name, json.dumps(_plain(cfg.workload), sort_keys=True), cfg.seed, str(cfg.cache_dir))


_model_cache: dict[str, tuple[nn.Module, str, dict]] = {}


def _model_ident(cfg: DictConfig) -> str:
    return config_hash({"w": _plain(cfg.workload), "m": _plain(cfg.model), "seed": cfg.seed})


def _model(cfg: DictConfig, workload: Workload) -> tuple[nn.Module, str, dict]:
    ident = _model_ident(cfg)
    if ident not in _model_cache:
        model, info = trained_model(cfg.model, workload, cfg.seed, Path(cfg.cache_dir))
        key = info.get("key") or _file_key(info["path"])
        _model_cache.clear()  # one model per process at a time: they can be large
        _model_cache[ident] = (model, key, info)
    return _model_cache[ident]


def _file_key(path: str) -> str:
    stat = Path(path).stat()
    return config_hash({"path": str(Path(path).resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns})


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """Digest of the harness's sources: cached scores never outlive a code change."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    h.update(torch.__version__.encode())
    return h.hexdigest()[:16]


_split_cache: dict[str, tuple[str, list[Batch]]] = {}


def _split_batches(cfg: DictConfig, workload: Workload, split: str) -> list[Batch]:
    """The eval or calibration split, batched once per process (one entry per split kept)."""
    batch_size = cfg.eval_batch_size if split == "eval" else cfg.calibration_batch_size
    key = config_hash({"w": _plain(cfg.workload), "seed": cfg.seed, "bs": batch_size})
    if _split_cache.get(split, ("",))[0] != key:
        _split_cache.pop(split, None)  # free the old batches before building the new ones
        _split_cache[split] = (key, list(workload.batches(split, batch_size)))
    return _split_cache[split][1]


def _calibration(cfg: DictConfig, workload: Workload) -> list[Batch]:
    return _split_batches(cfg, workload, "calibration")


_prepared_cache: dict[str, nn.Module] = {}


def _prepared(cfg, backend: Backend, model: nn.Module, model_key: str, workload: Workload, device: torch.device) -> nn.Module:
    key = config_hash({"model": model_key, "backend": _plain(backend.cfg), "device": str(device)})
    if key not in _prepared_cache:
        _prepared_cache.clear()  # keep one prepared variant alive: the sweep runs batch sizes innermost
        torch.manual_seed(cfg.seed)
        _prepared_cache[key] = backend.prepare(model, _calibration(cfg, workload), device)
    return _prepared_cache[key]


_score_cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def _scores_key(cfg, backend_cfg, model_key: str, device: torch.device) -> str:
    return config_hash(
        {
            "model": model_key,
            "backend": _plain(backend_cfg),
            "device": device.type,
            "workload": _plain(cfg.workload),
            "seed": cfg.seed,
            "calibration_batch_size": cfg.calibration_batch_size,
            "code": _code_digest(),
        }
    )


def _scores(cfg, backend_cfg, prepared: nn.Module | None, model_key: str, workload: Workload, device: torch.device):
    """(labels, logits) on the eval split: from memory, from disk, or scored now."""
    key = _scores_key(cfg, backend_cfg, model_key, device)
    if key in _score_cache:
        return _score_cache[key]
    path = Path(cfg.cache_dir) / "scores" / f"{key}.npz"
    result = _read_scores(path) if path.exists() else None
    if result is None:
        if prepared is None:
            return None
        result = score(prepared, _split_batches(cfg, workload, "eval"), device, expected=workload.num_samples("eval"))
        if not np.all(np.isfinite(result[1])):
            return result  # a failure (accuracy_metrics says so): never cached, so a retry scores again
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{key}.{os.getpid()}.tmp.npz")  # per process: parallel jobs may share the cache
        try:
            np.savez(tmp, labels=result[0], logits=result[1])
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    _score_cache[key] = result
    return result


def _read_scores(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """Cached scores, or None (a miss) when the file is truncated, foreign or inconsistent."""
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with data:
            labels, logits = data["labels"], data["logits"]
        if labels.ndim == 1 and labels.shape == logits.shape:
            return labels, logits
        raise ValueError("labels and logits do not match")
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        log.warning("scores cache %s is unreadable (%s: %s): scoring again", path, type(exc).__name__, exc)
    return None


def _scores_of(cfg, backend_cfg, model, model_key, workload, device):
    """Scores of another backend (the fp32 baseline, a fake-quant twin), prepared only if needed."""
    cached = _scores(cfg, backend_cfg, None, model_key, workload, device)
    if cached is not None:
        return cached
    other = registry.get("backend", backend_cfg.name).factory(backend_cfg)
    module = other.prepare(model, _calibration(cfg, workload), device)
    return _scores(cfg, backend_cfg, module, model_key, workload, device)


def _backend_config(overrides: dict[str, Any]) -> DictConfig:
    """A backend's config from its schema and overrides that name it (`{"name": "fp32", ...}`)."""
    schema = registry.get("backend", overrides["name"]).config
    return OmegaConf.merge(OmegaConf.structured(schema), overrides)


def _delta_against_fp32(cfg, model, model_key, workload, device, labels, logits) -> dict[str, Any]:
    _, base_logits = _scores_of(cfg, _backend_config({"name": "fp32"}), model, model_key, workload, device)
    delta = paired_auc_delta(labels, base_logits, logits)
    return {"auc_fp32": delta.auc_base, **delta.as_metrics()}


def _fidelity(cfg, backend: Backend, model, model_key, workload, device, labels, logits) -> dict[str, Any]:
    """AUC gap between an integer backend and the fake-quant model that emulates it."""
    emulation = getattr(backend, "emulation", lambda: None)()
    if not emulation:
        return {}
    try:
        _, twin_logits = _scores_of(cfg, _backend_config(emulation), model, model_key, workload, device)
    except Exception as exc:  # noqa: BLE001 - the twin is extra: keep what this job measured
        return {"fidelity_twin": emulation, "fidelity_error": f"{type(exc).__name__}: {exc}"}
    gap = paired_auc_delta(labels, twin_logits, logits)
    return {"fidelity_gap": gap.delta, "fidelity_gap_lo": gap.lo, "fidelity_gap_hi": gap.hi, "fidelity_twin": emulation}


_timing_cache: dict[str, list[tuple]] = {}


def _timing_inputs(cfg, workload: Workload, device: torch.device) -> list[tuple]:
    """The first `batches_per_trial` full eval batches at the job's batch size, already on device."""
    key = config_hash({"w": _plain(cfg.workload), "seed": cfg.seed, "bs": cfg.batch_size, "dev": str(device), "n": cfg.timing.batches_per_trial})
    if key not in _timing_cache:
        _timing_cache.clear()
        inputs = []
        for batch in workload.batches("eval", cfg.batch_size):
            if len(batch) < cfg.batch_size or len(inputs) == cfg.timing.batches_per_trial:
                break
            inputs.append(batch.to(device).model_inputs())
        _timing_cache[key] = inputs
    return _timing_cache[key]
