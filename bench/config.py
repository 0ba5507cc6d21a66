"""Typed Hydra configs: one dataclass schema per config group option.

YAML files under `conf/` inherit these schemas (`defaults: [base_<name>]`), so a typo in a key or a
wrong type is rejected by Hydra at composition time. Plug-in schemas (backends, workloads) live in
their own modules and reach the ConfigStore through the registry, in one loop.
Configs only describe: hardware probing and environment changes belong to `bench.hardware`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from bench import registry


@dataclass
class WorkloadConfig:
    name: str = MISSING
    # Samples in each split; a workload may cap them at what its data holds.
    train_samples: int = MISSING
    eval_samples: int = MISSING
    calibration_samples: int = 16384
    # Appended to the name in records and reports (`name:tag`), so one workload swept over its own
    # options (access pattern, table size) gives rows that do not collide.
    tag: Optional[str] = None


def workload_label(cfg: WorkloadConfig) -> str:
    return f"{cfg.name}:{cfg.tag}" if cfg.tag else cfg.name


@dataclass
class TrainConfig:
    samples: int = 1_000_000  # budget: samples seen in training (wraps over the train split)
    batch_size: int = 2048
    dense_lr: float = 3e-3  # Adam on the dense and over arch
    sparse_lr: float = 0.2  # Adagrad on the embedding tables, as DLRM trains them
    progress: bool = True


@dataclass
class ModelConfig:
    name: str = MISSING
    arch: str = "dlrm"  # dlrm (dot interaction) | dlrm_dcn (DLRM-v2)
    embedding_dim: int = 16
    dense_arch_layer_sizes: list[int] = field(default_factory=lambda: [64, 16])
    over_arch_layer_sizes: list[int] = field(default_factory=lambda: [64, 32, 1])
    dcn_num_layers: int = 3
    dcn_low_rank_dim: int = 512
    # A state dict to load instead of training (weights_only).
    checkpoint: Optional[str] = None
    # trained: trained on the workload (or the checkpoint); random: untrained, tables never built in
    # fp32 (bench.models.random_weights) - speed and memory only, no accuracy.
    weights: str = "trained"
    train: TrainConfig = field(default_factory=TrainConfig)


@dataclass
class BackendConfig:
    name: str = MISSING


@dataclass
class DeviceConfig:
    type: str = "cpu"  # cpu | cuda
    index: int = 0
    # Fix glibc's mmap/trim thresholds before measuring: with glibc's moving threshold, large-batch
    # timings flip between two modes depending on what the process allocated before.
    pin_malloc: bool = True


@dataclass
class TimingConfig:
    warmup_batches: int = 5
    trials: int = 5
    batches_per_trial: int = 10  # at least; more when needed to fill min_trial_seconds
    # A trial of a few milliseconds is at the mercy of one preemption; small batches get more
    # calls per trial so every trial lasts about this long.
    min_trial_seconds: float = 0.25
    # Distinct samples the timing loop cycles through (in whole batches, at least batches_per_trial,
    # at most the eval split). A handful of batches replayed keeps their rows in cache: at 26 x 300k
    # rows, 10 Zipf-1.1 batches of 1024 touch 1.2% of each table (22 MiB fp32, inside a 32 MiB LLC)
    # where a stream of requests touches far more. 0: only batches_per_trial batches, the old replay.
    pool_samples: int = 262144
    # wall: elapsed time. thread_cpu: CPU time of the calling thread (needs threads=1, CPU only): on a
    # machine shared with other work it leaves out the time the thread waited for a core, which
    # moved wall-clock throughput by 2x between jobs minutes apart on the 2 shared cores here.
    clock: str = "wall"


@dataclass
class RuleSet:
    """Thresholds for one backend; None switches a rule off. Field names are rule names (`RULES`)."""

    max_auc_drop: Optional[float] = None  # fp32 AUC - AUC, absolute
    min_auc_ratio: Optional[float] = None  # AUC / fp32 AUC (MLPerf: 0.99, high accuracy 0.999)
    min_speedup: Optional[float] = None  # throughput / fp32 throughput, same workload/device/batch
    max_embedding_bytes: Optional[int] = None


@dataclass
class GateConfig:
    rules: dict[str, RuleSet] = field(default_factory=dict)  # backend name -> thresholds
    # A confidence interval that straddles a threshold reads "inconclusive"; by default that
    # passes (only a point estimate past the threshold fails); true makes it fail.
    inconclusive_fails: bool = False
    history_file: Optional[str] = None  # None: <reports_dir>/history.jsonl
    history_runs: int = 14  # runs shown in history.md
    # A change against the previous run is flagged when it exceeds the noise: the AUC CI
    # half-width / the throughput trial spread, and at least these tolerances.
    history_auc_tolerance: float = 0.0005  # absolute AUC
    history_throughput_tolerance: float = 0.05  # relative


@dataclass
class Config:
    workload: WorkloadConfig = MISSING
    model: ModelConfig = MISSING
    backend: BackendConfig = MISSING
    device: DeviceConfig = MISSING
    batch_size: int = 2048
    seed: int = 0
    threads: Optional[int] = None  # torch intra-op threads; None keeps torch's default
    reports_dir: str = "reports"
    cache_dir: str = ".cache/bench"
    # Accuracy does not depend on these: they stay fixed so one backend's AUC serves every batch size.
    eval_batch_size: int = 8192
    calibration_batch_size: int = 1024  # the calibration split is cut into batches of this size
    timing: TimingConfig = field(default_factory=TimingConfig)
    # Set by sweep configs: names the report folder `<reports_dir>/<sweep>/`, and whether the
    # sweep ends with the gate.
    sweep_name: Optional[str] = None
    run_gate: bool = False
    gate: GateConfig = field(default_factory=GateConfig)
    # Reuse the ok/skipped record of a job already in <reports_dir>/records.jsonl (same config hash,
    # same machine fingerprint) instead of measuring it again: re-run an interrupted sweep with it.
    resume: bool = False
    # Skip a job (status `skipped`) whose estimated memory exceeds this fraction of what is available
    # (MemAvailable; free GPU memory on CUDA). null turns the check off.
    memory_fraction: Optional[float] = 0.8


def register_configs() -> None:
    """Store every schema in Hydra's ConfigStore, and the registry's resolvers (idempotent)."""
    if not OmegaConf.has_resolver("registered_backends"):
        OmegaConf.register_new_resolver("registered_backends", lambda: ",".join(registry.sweep_backends()))
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="device", name="base_device", node=DeviceConfig)
    cs.store(group="gate", name="base_gate", node=GateConfig)
    for kind in registry.KINDS:
        for name, entry in registry.entries(kind).items():
            cs.store(group=kind, name=f"base_{name}", node=entry.config)
