"""Work shared between the jobs of one process, held by an explicit `SharedWork` object.

A sweep runs its jobs in one process, batch size innermost, so the workload, its eval and
calibration batches, the fp32 model and each backend's prepared module are built once and reused.
Each piece is kept under a key made of exactly the config parts it depends on; a job with other
parts replaces it (one model, one prepared backend, one set of timing batches at a time: they can
be large). `clear()` drops everything, after an out-of-memory or between independent runs.
"""

from __future__ import annotations

import copy
import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from bench import hardware, registry
from bench.backends.backend import Backend, NotApplicable
from bench.backends.planted import plant_slowdown
from bench.batch import Batch
from bench.config import Config
from bench.hashing import config_hash, plain
from bench.measure.working_set import access_profile
from bench.errors import UserError, one_line
from bench.models.custom import is_custom
from bench.models.train import input_identity, trained_model
from bench.pipeline.scores import ScoreCache
from bench.workloads.workload import Workload



@dataclass
class TrainedModel:
    module: nn.Module
    key: str  # identifies the weights: cache keys of prepared backends and scores include it
    info: dict  # where it came from (checkpoint, cache, trained now)


class _Slot:
    """One value kept under a key; asking with another key builds anew (the old value is freed first)."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.value: Any = None

    def get(self, key: str, build: Callable[[], Any]) -> Any:
        if self.key != key:
            self.key, self.value = None, None  # free the old value before building the new one
            self.value = build()
            self.key = key
        return self.value

    def holds(self, key: str) -> bool:
        return self.key == key

    def drop(self) -> None:
        self.key, self.value = None, None


@dataclass
class SharedWork:
    _workloads: dict[str, Workload] = field(default_factory=dict)
    _model: _Slot = field(default_factory=_Slot)
    _splits: dict[str, _Slot] = field(default_factory=dict)
    _prepared: _Slot = field(default_factory=_Slot)
    _timing: _Slot = field(default_factory=_Slot)
    _reference: _Slot = field(default_factory=_Slot)
    _access: dict[str, dict] = field(default_factory=dict)  # per timing pool: a few numbers, kept for every batch size
    _prepare_seconds: dict[str, float] = field(default_factory=dict)  # build time of each prepared module
    _prepared_owner: str | None = None  # the (model config, backend, device) the prepared module serves
    scores: ScoreCache = field(default_factory=ScoreCache)
    _scored_figures: dict[str, dict] = field(default_factory=dict)  # per eval scores key: the figures read from them alone

    def clear(self) -> None:
        self._workloads.clear()
        for slot in (self._model, self._prepared, self._timing, self._reference, *self._splits.values()):
            slot.drop()
        self._access.clear()
        self.scores.clear()
        self._scored_figures.clear()
        gc.collect()
        hardware.release_gpu_cache()

    def drop_modules(self) -> None:
        """Forget the prepared module and the fp32 reference (a job changed how their memory is held: huge pages),
        so the next job builds its own rather than time this one's."""
        self._prepared.drop()
        self._reference.drop()
        gc.collect()

    def built(self) -> list[str]:
        """Names of the pieces held now (for tests and logs)."""
        slots = {"model": self._model, "prepared": self._prepared, "reference": self._reference, "timing": self._timing,
                 **{f"{k} batches": v for k, v in self._splits.items()}}
        held = ["workload"] if self._workloads else []
        return (held + [name for name, slot in slots.items() if slot.key is not None] + (["scores"] if self.scores else [])
                + (["scored figures"] * len(self._scored_figures)))

    def release_leftovers(self, cfg: Config, backend: Backend, device: torch.device) -> None:
        """Free what earlier jobs built and this one does not use (another backend's module, another
        batch size's timing batches) and hand the memory back to the kernel, so that neither the
        memory guard's view of what is available nor this job's peak RSS carries them."""
        if self._prepared_owner != self._owner(cfg, backend, device):
            self._prepared.drop()
        if not self._timing.holds(self._timing_key(cfg, device)):
            self._timing.drop()
        if backend.cfg.name == registry.BASELINE_BACKEND or not cfg.timing.paired:
            self._reference.drop()  # the fp32 copy paired jobs time against: this job does not
        gc.collect()
        hardware.release_free_memory()

    def prepared_resident(self, cfg: Config, backend: Backend, device: torch.device) -> bool:
        """Whether this job's prepared module is held already (an earlier job of the same model, backend and device)."""
        return self._prepared.key is not None and self._prepared_owner == self._owner(cfg, backend, device)

    def _owner(self, cfg: Config, backend: Backend, device: torch.device) -> str:
        # huge pages: a job that puts its tables in them builds its own (no earlier job's module stands in its peak)
        return config_hash({"model": self.model_ident(cfg), "backend": plain(backend.cfg), "device": str(device),
                            **({"huge_pages": True} if cfg.device.huge_pages else {})})

    # ------------------------------------------------------------------------------ the pieces

    def workload(self, cfg: Config) -> Workload:
        key = config_hash({"w": plain(cfg.workload), "seed": cfg.seed, "cache": str(cfg.cache_dir)})
        if key not in self._workloads:
            if len(self._workloads) >= 2:
                self._workloads.pop(next(iter(self._workloads)))
            entry = registry.get("workload", cfg.workload.name)
            self._workloads[key] = entry.factory(cfg.workload, cfg.seed, Path(cfg.cache_dir))
        return self._workloads[key]

    @staticmethod
    def model_ident(cfg: Config) -> str:
        return config_hash({"w": plain(cfg.workload), "m": plain(cfg.model), "seed": cfg.seed})

    def model_resident(self, cfg: Config) -> bool:
        return self._model.holds(self.model_ident(cfg))

    def model(self, cfg: Config, workload: Workload) -> TrainedModel:
        def build() -> TrainedModel:
            module, info = trained_model(cfg.model, workload, cfg.seed, Path(cfg.cache_dir))
            # A checkpoint's weights are the file's; what the harness scores them on is the data's, and a
            # custom model's code is its source: every key built on this one sees all three.
            key = info.get("key") or _checkpoint_key(info["path"], input_identity(cfg.model, workload))
            return TrainedModel(module, key, info)

        return self._model.get(self.model_ident(cfg), build)

    def split_batches(self, cfg: Config, workload: Workload, split: str) -> list[Batch]:
        """The eval or calibration split, batched once per process."""
        batch_size = cfg.eval_batch_size if split == "eval" else cfg.calibration_batch_size
        key = config_hash({"w": plain(cfg.workload), "seed": cfg.seed, "bs": batch_size})
        slot = self._splits.setdefault(split, _Slot())
        return slot.get(key, lambda: list(workload.batches(split, batch_size)))

    @staticmethod
    def _prepared_key(backend: Backend, model: TrainedModel, device: torch.device) -> str:
        return config_hash({"model": model.key, "backend": plain(backend.cfg), "device": str(device)})

    def prepared(self, cfg: Config, backend: Backend, model: TrainedModel, workload: Workload, device: torch.device) -> nn.Module:
        """The backend's module for this model and device; the sweep runs batch sizes innermost."""
        key = self._prepared_key(backend, model, device)

        def build() -> nn.Module:
            calibration = self.split_batches(cfg, workload, "calibration")
            torch.manual_seed(cfg.seed)
            start = time.perf_counter()
            module = plant_slowdown(_applied(backend, model.module, calibration, device, cfg.model),
                                    getattr(backend.cfg, "planted_slowdown", None))  # testing only
            self._prepare_seconds[key] = time.perf_counter() - start
            self._prepared_owner = self._owner(cfg, backend, device)
            return module

        return self._prepared.get(key, build)

    def reference(self, cfg: Config, reference: Backend, model: TrainedModel, device: torch.device) -> nn.Module:
        """The fp32 reference a paired speedup is timed against, kept beside the candidate."""
        key = config_hash({"model": model.key, "backend": plain(reference.cfg), "device": str(device),
                           **({"huge_pages": True} if cfg.device.huge_pages else {})})  # as `_owner`

        def build() -> nn.Module:
            torch.manual_seed(cfg.seed)
            return reference.prepare(model.module, [], device)

        return self._reference.get(key, build)

    def prepare_seconds(self, backend: Backend, model: TrainedModel, device: torch.device) -> float | None:
        """How long `backend.prepare` took to build the module held for this backend (in this job or an earlier one)."""
        return self._prepare_seconds.get(self._prepared_key(backend, model, device))

    @staticmethod
    def _timing_key(cfg: Config, device: torch.device) -> str:
        return config_hash({"w": plain(cfg.workload), "seed": cfg.seed, "bs": cfg.batch_size, "dev": str(device),
                            "n": cfg.timing.batches_per_trial, "pool": cfg.timing.pool_samples})

    def timing_inputs(self, cfg: Config, workload: Workload, device: torch.device) -> list[tuple]:
        """Distinct full eval batches at the job's batch size, already on device: `batches_per_trial` of
        them, and more (up to the eval split) until they hold `timing.pool_samples` samples. The timing
        loop cycles through them, so a pool much larger than the cache keeps the loop from replaying a
        working set that a stream of fresh requests would not keep in cache."""
        n = max(cfg.timing.batches_per_trial, -(-cfg.timing.pool_samples // cfg.batch_size))

        def build() -> list[tuple]:
            inputs = []
            for batch in workload.batches("eval", cfg.batch_size):
                if len(batch) < cfg.batch_size or len(inputs) == n:
                    break
                inputs.append(batch.to(device).model_inputs())
            return inputs

        return self._timing.get(self._timing_key(cfg, device), build)

    def scored_figures(self, scores_key: str, compute: Callable[[], dict]) -> dict:
        """Figures that read nothing but eval scores (a backend's ΔAUC and its intervals, against fp32 and its
        twins), for the scores under `scores_key`: computed at the first job that asks, a copy of them after
        (the jobs of one backend at other batch sizes share its scores; a deep one, so a job that edits a nested
        figure of its record leaves the next job's alone). A result naming an error is not kept."""
        if scores_key not in self._scored_figures:
            figures = compute()
            if any(name.endswith("_error") for name in figures):
                return figures
            self._scored_figures[scores_key] = figures
        return copy.deepcopy(self._scored_figures[scores_key])

    def timing_access(self, cfg: Config, workload: Workload, device: torch.device) -> dict:
        """What the timing batches touch (`bench.measure.working_set`), computed once per pool."""
        key = self._timing_key(cfg, device)
        if key not in self._access:
            self._access[key] = access_profile(self.timing_inputs(cfg, workload, device), workload.tables)
        return self._access[key]


def _file_key(path: str) -> str:
    stat = Path(path).stat()
    return config_hash({"path": str(Path(path).resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns})


def _checkpoint_key(path: str, inputs: dict) -> str:
    return config_hash({"checkpoint": _file_key(path), **inputs}) if inputs else _file_key(path)


def _applied(backend: Backend, model: nn.Module, calibration: list[Batch], device: torch.device, model_cfg) -> nn.Module:
    """`backend.prepare`; on a user's model (model=custom), a backend that fails to prepare it or to run
    one calibration batch through the result cannot apply to it: NotApplicable, and the job is skipped
    with the reason. On the built-in models such a failure is the harness's and fails the job."""
    if not is_custom(model_cfg):
        return backend.prepare(model, calibration, device)
    try:
        module = backend.prepare(model, calibration, device)
        if calibration:
            with torch.inference_mode():
                module(*calibration[0].to(device).model_inputs())
        return module
    except (UserError, NotApplicable, MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - the reason becomes the skipped record's
        raise NotApplicable(f"backend {backend.cfg.name!r} cannot apply to model.factory={model_cfg.factory}: {one_line(exc)}") from exc
