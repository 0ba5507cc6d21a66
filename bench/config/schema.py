"""Typed Hydra configs: one dataclass schema per config group option.

YAML files under `conf/` inherit these schemas (`defaults: [base_<name>]`), so a typo in a key or a
wrong type is rejected by Hydra at composition time. Plug-in schemas (backends, workloads) live in
their own modules and reach the ConfigStore through the registry, in one loop.
Configs only describe: hardware probing and environment changes belong to `bench.hardware`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from bench import registry
from bench.errors import UserError


RECORDS_FILE = "records.jsonl"  # the record store in reports_dir (bench.store)
# Keys that change where output goes or what happens after measuring, never what a job measures: not
# part of a job's identity (its config hash, bench.runner) nor of a sweep's variant (bench.sweep).
NOT_THE_JOB = ("reports_dir", "cache_dir", "sweep_name", "gate", "compare", "run_gate", "resume", "measure_again", "memory_fraction", "tune",
               "one_job_per_host", "kernel_health", "attribute_layers", "slo", "accuracy", "memory", "recommend", "family")


@dataclass
class WorkloadConfig:
    name: str = MISSING
    # Samples in each split; a workload may cap them at what its data holds.
    train_samples: int = MISSING
    eval_samples: int = MISSING
    calibration_samples: int = 16384
    # Appended to the name in records and reports (`name:tag`). A swept option the results should show as
    # a column of its own is an axis of the row key instead (bench.results.key: access, table_rows).
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


# model.arch of a model built by the user's own factory (model=custom, bench.models.custom).
CUSTOM_ARCH = "custom"
HSTU_ARCH = "hstu"  # the sequential ranker (model=hstu, bench.models.hstu)


@dataclass
class HstuConfig:
    """The shape of `model=hstu` (DLRMv3's is 5 layers, 4 heads, attention and linear dims 128, tables 512 wide)."""

    num_layers: int = 2
    num_heads: int = 2
    attention_dim: int = 16  # per head, of Q and K
    linear_dim: int = 16  # per head, of U and V
    # The attention's fixed normaliser (SiLU(QK^T) / max_seq_len): fixed, so a row's score does not depend on
    # which rows share its batch; longer sequences are still read whole.
    max_seq_len: int = 128
    time_buckets: int = 64  # timestamp encodings: sqrt(age in minutes), clamped to this many buckets
    dropout: float = 0.1
    over_arch_layer_sizes: list[int] = field(default_factory=lambda: [64, 1])

    def validate(self) -> None:
        for key in ("num_layers", "num_heads", "attention_dim", "linear_dim", "max_seq_len", "time_buckets"):
            if getattr(self, key) < 1:
                raise UserError(f"model.hstu.{key} must be a positive integer, got {getattr(self, key)}")
        if not 0 <= self.dropout < 1:
            raise UserError(f"model.hstu.dropout must be in [0, 1), got {self.dropout}")
        if not self.over_arch_layer_sizes or self.over_arch_layer_sizes[-1] != 1:
            raise UserError(f"model.hstu.over_arch_layer_sizes must end with 1 (one logit), got {list(self.over_arch_layer_sizes)}")
MODEL_OUTPUTS = ("logits", "probabilities")


@dataclass
class ModelConfig:
    name: str = MISSING
    arch: str = "dlrm"  # dlrm (dot interaction) | dlrm_dcn (DLRM-v2) | custom (model.factory)
    # arch=custom: `package.module:function`, called with embedding_bag_collection= (built from the
    # workload's tables at embedding_dim), dense_in_features= and `kwargs`; it returns the nn.Module.
    factory: Optional[str] = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    # What the model's forward returns: logits, or probabilities (a sigmoid at its end). Declared, never
    # guessed: training, scoring and every AUC read the outputs as this says.
    output: str = "logits"
    # arch=custom, a forward that returns several outputs (a tuple, list or dict, as many production rankers
    # do): which one is the score, a dict's key or a tuple's index. null: the forward returns the score itself.
    output_key: Optional[str] = None
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
    # arch=hstu: the sequential ranker's shape (conf/model/hstu.yaml); null for the other models.
    hstu: Optional[HstuConfig] = None

    def validate(self) -> None:
        check_model_config(self)


def check_model_config(cfg) -> None:
    """Layer sizes that cannot build a DLRM, a factory that cannot name a function (the schema, or its
    composed DictConfig)."""
    if cfg.arch not in ("dlrm", "dlrm_dcn", CUSTOM_ARCH, HSTU_ARCH):
        raise UserError(f"unknown model.arch {cfg.arch!r}: choose dlrm, dlrm_dcn, hstu or custom (model=custom model.factory=package.module:build)")
    if cfg.arch == HSTU_ARCH and getattr(cfg, "hstu", None) is None:
        raise UserError("model.arch=hstu needs its shape in model.hstu: use model=hstu (conf/model/hstu.yaml)")
    if cfg.output not in MODEL_OUTPUTS:
        raise UserError(f"model.output={cfg.output!r}: choose logits or probabilities (what the model's forward returns)")
    train = cfg.train if isinstance(cfg.train, Mapping) else vars(cfg.train)  # a dataclass, a DictConfig or a dict
    for key in ("samples", "batch_size"):  # a budget under one batch would silently train one batch
        value = train.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"model.train.{key} must be a positive integer, got {value!r} (model.train.{key}=N)")
    for key in ("dense_lr", "sparse_lr"):
        if not train.get(key, 1) > 0:
            raise UserError(f"model.train.{key} must be above 0, got {train.get(key)!r}")
    if cfg.arch == CUSTOM_ARCH:
        module, _, function = str(cfg.factory or "").partition(":")
        if not module or not function:
            raise UserError(f"model.factory={cfg.factory!r}: give the model's factory as package.module:function (model.factory=examples.two_tower:build)")
        if "/" in module or "\\" in module or module.endswith(".py"):
            dotted = module.replace("\\", "/").removeprefix("./").removesuffix(".py").strip("/").replace("/", ".")
            raise UserError(f"model.factory={cfg.factory}: a file path; name the module by its dotted import path, "
                            f"model.factory={dotted}:{function} (run from the folder that holds {dotted.split('.')[0]}, or add that folder to PYTHONPATH)")
        return
    if cfg.output_key is not None:
        raise UserError(f"model.output_key={cfg.output_key}: the built-in DLRM models return one tensor; model.output_key is for model=custom")
    if cfg.factory:
        raise UserError(f"model.factory is read by model=custom only; model.arch is {cfg.arch!r}: add model=custom")
    if cfg.output != "logits":
        raise UserError(f"model.output={cfg.output!r}: the built-in DLRM models return logits; model.output is for model=custom")
    if cfg.arch == HSTU_ARCH:
        HstuConfig.validate(cfg.hstu)  # the schema or its composed DictConfig
        return
    if cfg.dense_arch_layer_sizes[-1] != cfg.embedding_dim:
        raise UserError(
            f"model.dense_arch_layer_sizes must end with embedding_dim={cfg.embedding_dim}, got {list(cfg.dense_arch_layer_sizes)}: fix the last size"
        )
    if cfg.over_arch_layer_sizes[-1] != 1:
        raise UserError(f"model.over_arch_layer_sizes must end with 1 (one logit), got {list(cfg.over_arch_layer_sizes)}")


@dataclass
class BackendConfig:
    name: str = MISSING
    # Testing only: the prepared module busy-waits inside its forward for (planted_slowdown - 1) of the call's
    # own time (1.2: 20% slower), so a paired speedup against fp32 sees a real slowdown of this backend alone
    # (tests/test_compare_runs.py plants one for the run-vs-run compare to find). None: no slowdown.
    planted_slowdown: Optional[float] = field(default=None, metadata={"testing_only": True})


@dataclass
class DeviceConfig:
    type: str = "cpu"  # a registered device (bench.devices): cpu | cuda
    index: int = 0
    # Fix glibc's mmap/trim thresholds before measuring: with glibc's moving threshold, large-batch
    # timings flip between two modes depending on what the process allocated before.
    pin_malloc: bool = True
    # Back the prepared model's tables with transparent huge pages (madvise MADV_HUGEPAGE + MADV_COLLAPSE on their
    # storage, bench.hardware.back_with_huge_pages), as a deployment of tables far beyond the caches asks for them:
    # a random row then misses the TLB once per 2 MiB, not per 4 KiB page. CPU jobs; recorded in metrics.huge_pages.
    huge_pages: bool = False


# The dense layers' (MLP's) default path per device type, for the backends whose dense layers are quantized
# (`mlp: ${dense_path:${device.type}}` in their conf/backend/*.yaml). On CPU: int8, torch.ao's int8 Linear on
# FBGEMM's kernels. On CUDA that Linear has no kernel; fp16 is what torchrec's inference lowering of the dense
# part gives (`torchrec.inference.modules.quantize_dense`: fp16 only), and what runs there
# (bench.backends.half_mlp). A device type not listed keeps fp32.
DENSE_PATHS = {"cpu": "int8", "cuda": "fp16"}


def dense_path(device_type: str) -> str:
    """The default dense path (`backend.mlp`) of a quantized backend on a device type."""
    return DENSE_PATHS.get(str(device_type), "fp32")


@dataclass
class ShardingConfig:
    """How the embedding tables are split over ranks by torchrec's planner (`bench.distributed`)."""

    name: str = MISSING  # none | table_wise | row_wise | column_wise | auto (the planner's choice)
    # Columns per column-wise shard (torchrec's `min_partition`); None: the embedding dim split evenly
    # over the ranks (torchrec's own default, 128 columns, keeps every dim up to 128 whole).
    column_shard_dim: Optional[int] = None
    # A rank that waits this long on a collective fails the job (gloo/NCCL timeout), and a job whose
    # ranks were launched by the harness is killed after job_timeout_s: a dead or hung rank becomes
    # an `error` record, not a hang.
    timeout_s: float = 120.0
    job_timeout_s: float = 1800.0


@dataclass
class TimingConfig:
    warmup_batches: int = 5
    # Trials of a backend alone; for a paired speedup, the fewest rounds of reference and candidate
    # halves (one ABBA cycle: each side leads twice).
    trials: int = 4
    batches_per_trial: int = 10  # at least; more when needed to fill min_trial_seconds
    # A trial of a few milliseconds is at the mercy of one preemption; small batches get more
    # calls per trial so every trial lasts about this long.
    min_trial_seconds: float = 0.2
    # Time the speedup against fp32 in the same process and window, in alternating (ABBA) rounds.
    paired: bool = True
    # Paired rounds go on past `trials` (two at a time, so both orders stay equally many) until the
    # speedup's 95% interval (the rounds, and the spread between processes measured on this machine)
    # spans at most `target_spread` of it, or the rounds' share of it has fallen to half the
    # between-process part (more rounds could not narrow it much), or `max_rounds` rounds are done.
    # A fixed count cannot fit both a quiet and a busy machine. max_rounds <= trials: fixed count.
    # Where the spread between processes dominates (docs/measuring.md), more rounds in one process
    # cannot narrow the interval, so most jobs stop after the first rounds.
    target_spread: float = 0.05
    max_rounds: int = 16
    # Distinct samples the timing loop walks through (in whole batches, at least batches_per_trial,
    # at most the eval split), never restarting at the first: a handful of batches replayed keeps their
    # rows in cache, where a stream of requests touches far more (docs/measuring.md). 0: batches_per_trial only.
    pool_samples: int = 262144
    # The timed calls' thread count and clock. None / auto: picked by measurement on this machine (once,
    # cached: bench.pipeline.calibrate), among the settings the other keys leave open; `threads`, when
    # given, fixes the count. wall: elapsed time. thread_cpu: CPU time of the calling thread (one
    # thread, CPU only): it leaves out the time the thread waited for a core, which on a shared
    # machine moves wall-clock throughput between jobs. Scoring and building run at `threads`
    # whatever is picked here; the record's config holds what was picked (part of the job's identity).
    threads: Optional[int] = None
    clock: str = "auto"
    # Measure this machine's timing noise once (about a minute, cached in cache_dir) to pick the setting
    # and to carry the spread between processes into every speedup interval. false: the given or the
    # default setting, and intervals that cover the rounds of one process only.
    calibrate: bool = True
    # Also time the backend alone at the job's own thread count when the picked setting uses fewer,
    # and report that samples/s beside the paired figures (`throughput_all_threads`).
    report_all_threads: bool = False
    # CUDA jobs: also time the candidate and the fp32 reference with each call replayed from a CUDA graph
    # (bench.measure.cuda_graph), as a GPU deployment runs a launch-bound model, and record that speedup and
    # samples/s beside the eager ones (cuda_graph_speedup, cuda_graph_throughput). No effect on CPU jobs.
    cuda_graphs: bool = False
    # The absolute throughput is flagged (stable=false, its own flag: the paired speedup is judged on
    # its own interval) when its trials vary more than this (std/mean).
    max_trial_cv: float = 0.10
    # Testing only: each timed CPU call busy-waits this fraction of its own duration more (0.2: 20%
    # slower), a real change of the timed work that the dashboard's step detection must find.
    test_delay: float = 0.0


@dataclass
class RuleSet:
    """Thresholds for one backend; None switches a rule off. Field names are rule names (`RULES`)."""

    max_auc_drop: Optional[float] = None  # fp32 AUC - AUC, absolute
    min_auc_ratio: Optional[float] = None  # AUC / fp32 AUC (MLPerf: 0.99, high accuracy 0.999)
    min_gauc_ratio: Optional[float] = None  # grouped AUC (per request, averaged) / fp32's (MLPerf DLRMv3's AUC: 0.999)
    min_acc_ratio: Optional[float] = None  # accuracy (at 0.5) / fp32 accuracy (MLPerf DLRMv3: 0.999)
    max_ne_ratio: Optional[float] = None  # NE / fp32 NE, lower is better (MLPerf DLRMv3: 1.001)
    min_speedup: Optional[float] = None  # throughput / fp32 throughput, same workload/device/batch
    max_embedding_bytes: Optional[int] = None
    # Serving rows (+sweep=serve), joined by (backend, scenario, bound):
    min_qps_at_sla: Optional[float] = None  # Server: highest target QPS LoadGen judged VALID
    min_qps_ratio: Optional[float] = None  # that QPS (Offline: samples/s) / fp32's, same scenario and bound
    max_p99_ms: Optional[float] = None  # Server: p99 latency at that QPS


# The reader's accuracy budget: the largest AUC drop against fp32 (absolute) that report.md's verdicts,
# its bottom line, tune's default budget and the gate's default rule accept (compare.max_auc_drop).
MAX_AUC_DROP = 0.001


@dataclass
class CompareConfig:
    """The comparison engine's noise rules (`bench.comparison`), shared by the gate, the baseline
    comparison and the nightly history. A change between runs is flagged only when its whole (1 - alpha)
    interval clears the tolerance around "no change". `max_auc_drop` is the one accuracy budget
    report.md's verdicts and bottom line are read against."""

    auc_tolerance: float = 0.0005  # absolute AUC
    throughput_tolerance: float = 0.05  # relative; also the speed margin: the bottom line reads "not slower" at or above 1 - it
    alpha: float = 0.05
    max_auc_drop: float = MAX_AUC_DROP  # absolute AUC drop vs fp32 a reader accepts
    # Two runs' absolute throughputs are judged (normalized by their machine probes, the reference GEMM and
    # gather) only when each probe moved by at most this between the runs; beyond it the machine itself moved.
    probe_tolerance: float = 0.10  # relative

    def validate(self) -> None:
        if self.auc_tolerance < 0 or self.throughput_tolerance < 0 or self.probe_tolerance < 0:
            raise UserError("compare.auc_tolerance, compare.throughput_tolerance and compare.probe_tolerance must not be negative")
        if not 0 <= self.max_auc_drop < 1:
            raise UserError(f"compare.max_auc_drop must be an AUC drop between 0 and 1 (compare.max_auc_drop=0.001), got {self.max_auc_drop}")
        if not 0 < self.alpha < 1:
            raise UserError(f"compare.alpha must be between 0 and 1 (0.05 for 95% intervals), got {self.alpha}")


@dataclass
class GateConfig:
    rules: dict[str, RuleSet] = field(default_factory=dict)  # backend name -> thresholds
    # Thresholds for a backend with no entry in `rules` (values in conf/gate/default.yaml).
    default_rules: RuleSet = field(default_factory=RuleSet)
    # A confidence interval that straddles a threshold reads "inconclusive"; by default that
    # passes (only a point estimate past the threshold fails); true makes it fail.
    inconclusive_fails: bool = False
    history_file: Optional[str] = None  # None: <reports_dir>/<history_name>
    # The history's file name under reports_dir when history_file is null: history.jsonl, where the
    # nightly's history lives; +preset=tiny sets history-tiny.jsonl, so tiny runs stay out of it unless
    # asked (gate.history_name=history.jsonl). history.md's name follows it (history-tiny.md).
    history_name: str = "history.jsonl"
    history_runs: int = 14  # runs shown in history.md (changes are judged by `compare`)

    def validate(self) -> None:
        if self.history_runs < 1:
            raise UserError(f"gate.history_runs must be at least 1, got {self.history_runs}")
        if "/" in self.history_name or "\\" in self.history_name or not self.history_name.endswith(".jsonl") or self.history_name == ".jsonl":
            raise UserError(f"gate.history_name must be a file name ending .jsonl, got {self.history_name!r} "
                            "(gate.history_name=history.jsonl; a path elsewhere is gate.history_file=PATH)")
        for where, rules in [*((f"rules.{b}", r) for b, r in self.rules.items()), ("default_rules", self.default_rules)]:
            for name, example in (("min_auc_ratio", 0.999), ("min_gauc_ratio", 0.999), ("min_acc_ratio", 0.999), ("max_ne_ratio", 1.001)):
                if getattr(rules, name) is not None and getattr(rules, name) <= 0:
                    raise UserError(f"gate.{where}.{name} must be positive (a fraction such as {example}), got {getattr(rules, name)}")
            if rules.max_embedding_bytes is not None and rules.max_embedding_bytes < 0:
                raise UserError(f"gate.{where}.max_embedding_bytes must not be negative")
            for name in ("min_qps_ratio", "max_p99_ms"):
                if getattr(rules, name) is not None and getattr(rules, name) <= 0:
                    raise UserError(f"gate.{where}.{name} must be positive, got {getattr(rules, name)}")
            if rules.min_qps_at_sla is not None and rules.min_qps_at_sla < 0:
                raise UserError(f"gate.{where}.min_qps_at_sla must not be negative, got {rules.min_qps_at_sla}")


@dataclass
class TuneConfig:
    """`+sweep=tune`: per-table precisions with the fewest embedding bytes inside an AUC budget (bench.tune)."""

    # The budget, one of the two: an absolute AUC drop (0.001), or a fraction of the fp32 AUC (0.01 = 1%,
    # Intel Neural Compressor's default criterion).
    max_auc_drop: Optional[float] = None
    max_auc_drop_relative: Optional[float] = None
    # Table weight types the search may choose below fp32 (fp16 | int8 | int4 | int2).
    precisions: list[str] = field(default_factory=lambda: ["fp16", "int8", "int4", "int2"])
    # The search keeps a candidate only when its search-half measurement predicts the held-out check passes
    # with at least this probability (0.5: its search-half interval merely clears the budget).
    holdout_confidence: float = 0.9
    mlp: str = "int8"  # the deployed dense layers: fp32 | int8
    mlp_mode: str = "dynamic"  # dynamic | static, when mlp=int8
    # How the int4/int2 rows' range is chosen, in the search's emulation and the held-out backends alike: greedy
    # (the default of uint4 and int2_tbe) | minmax (torchrec's quantize path); bench.backends.direct.ROW_RANGES
    row_range: str = "greedy"
    # Table sizes only (no sensitivity, search or validation); also taken when the fp32 model cannot be
    # built here (estimated memory above memory_fraction of what is available).
    sizes_only: bool = False


# MLPerf DLRM-v2's query sizes (its tools/dist_quantile.txt): a sample's pairs are drawn uniformly
# from these 20 quantiles, so the mean is 270.
MLPERF_PAIRS = [100, 100, *[200] * 12, 300, 300, 400, 500, 600, 700]
SCENARIOS = ("server", "offline")
# The share of CPU time the hypervisor may take (steal) before a measurement counts as disturbed: the
# timing's stability flag (bench.measure.noise) and the serving runs' default `serve.max_steal`.
MAX_STEAL = 0.05


@dataclass
class ServeConfig:
    """`+sweep=serve`: a backend served through MLPerf LoadGen (bench.serve). `batch_size` is the dynamic
    batcher's most rows per model call. The defaults are short runs sized for a small machine; MLPerf's own
    run lengths are `min_duration_s=600 min_query_count=null loadgen_seeds=mlperf` (docs/serving.md)."""

    scenario: str = "server"  # server: Poisson arrivals under a p99 bound | offline: every query at once
    bound_ms: float = 60.0  # the Server scenario's p99 latency bound (MLPerf DLRM-v2: 60 ms)
    # One LoadGen sample is one user's group of candidate pairs; its size is drawn from this list
    # (uniformly, as MLPerf's reference draws from its quantiles), or fixed at `fixed_pairs`. A sequential workload
    # with a `request` key is served one request per sample (its own sizes and histories), and ignores both.
    pairs_quantiles: list[int] = field(default_factory=lambda: list(MLPERF_PAIRS))
    fixed_pairs: Optional[int] = None
    max_samples: Optional[int] = None  # samples in the query set; null: as many as the eval split holds
    # The dynamic batcher: a free worker takes the waiting samples, up to batch_size rows, once the
    # oldest has waited max_wait_ms or the rows are there.
    max_wait_ms: float = 2.0
    workers: int = 1
    # How long each LoadGen run lasts at least, and its fewest queries (Server) or samples (Offline);
    # null keeps mlperf.conf's dlrm-v2 value.
    min_duration_s: float = 4.0
    min_query_count: Optional[int] = 500
    loadgen_seeds: str = "harness"  # harness: derived from `seed` | mlperf: mlperf.conf's official seeds
    # The Server search over target QPS: from qps_start (null: a quarter of the capacity a warm-up
    # measured), up or down by qps_factor until LoadGen's verdict flips, then halving the bracket until
    # its ends are within qps_resolution of each other, max_steps runs were made, or the next run would
    # take the search past max_search_s (a run lasts min_duration_s, or min_query_count / QPS if longer).
    # A target near the bound is run again, up to `judgments` runs, until a majority agrees (bench.serve.qps_search);
    # max_steps counts targets, max_search_s every run. Each Server run holds at least the queries with which
    # LoadGen's early stopping passes a run whose late queries are `step_late_share` of what the percentile
    # allows (0.3 at p99: 0.3% late, 1,157 queries); null: min_query_count alone (bench.serve.early_stopping).
    qps_start: Optional[float] = None
    qps_factor: float = 1.5
    qps_resolution: float = 0.1
    max_steps: int = 6
    max_search_s: float = 240.0
    judgments: int = 3
    step_late_share: Optional[float] = 0.3
    min_qps: float = 0.5  # the search gives up below this: no load meets the bound
    # A run during which the hypervisor took more than this share of the CPU time (steal) is disturbed: it
    # is kept but set aside from its target's verdict, which runs again; an Offline run is retried. null: none is.
    max_steal: Optional[float] = MAX_STEAL
    # A Server run the host served slower than this share past its usual pace here (its median batch time over the
    # same serving setup's stored runs: bench.serve.pace) is disturbed too, and set aside the same way; a paired
    # job leaves its round out of the ratio. null: none is.
    max_slowdown: Optional[float] = 0.15
    # Server: pair each backend's search with fp32's, interleaved run by run (ABBA) in the job's process, then
    # track both sides' limits in the same rounds and report max QPS relative to fp32 from them (bench.serve.paired).
    # false: one search, no ratio.
    paired: bool = True
    # Paired tracking: once a side's search has ended, its runs follow a 1-up-1-down staircase from its max (up
    # by a factor of 1 + track_step after a VALID run, down after an INVALID one), beside the other side's search
    # runs and then in ABBA rounds with it, until the ratio has its evidence: min_rounds joint rounds after both
    # sides' first reversals and min_reversals reversals on each side, however long a run lasts here. max_search_s
    # (each side's search and tracking runs together, as they took) and track_rounds (joint rounds) are caps: one
    # reached before that evidence leaves the job with no ratio ("not enough runs"). The ratio is read from the
    # tracking runs as ratio_fit says (below); its interval is where a re-run's should fall, with
    # rerun_spread the run-to-run SD (of the log ratio) one job's rounds cannot see (docs/serving.md).
    # track_rounds 0: no tracking (the ratio of the two searches' max QPS).
    track_step: float = 0.04
    track_rounds: int = 24
    min_rounds: int = 6
    min_reversals: int = 2
    rerun_spread: float = 0.03
    # How the ratio is read from the tracking runs (bench.serve.paired, bench.serve.limit_fit): logistic, each side's
    # limit fitted to its runs' verdicts against load; levels, the geometric mean of the per-round load ratios after
    # both first reversals (what records before the fit measured).
    ratio_fit: str = "logistic"
    # Paired: the most runs that judge each target of the two searches (null: judgments). Fewer than an unpaired
    # search's, since the tracking after it re-runs the limit; the time goes to tracking.
    paired_judgments: Optional[int] = 1
    # Scenarios whose job also makes a LoadGen AccuracyOnly run (every sample once) and checks its AUC.
    accuracy_scenarios: list[str] = field(default_factory=lambda: ["offline"])
    # Backends that quantize activations per batch give scores that depend on which samples share a
    # batch: their accuracy-mode AUC must be within this of the offline AUC (the others: 1e-9).
    batch_dependent_auc_tolerance: float = 0.002
    # Test-only: one model call of the job's first Server run sleeps this long (its 20th batch), a planted stall.
    test_stall_ms: Optional[float] = None

    def validate(self) -> None:
        check_serve_config(self)


def check_serve_config(cfg) -> None:
    """The serve settings that cannot run (the schema, or its composed DictConfig), before any work."""
    if cfg.scenario not in SCENARIOS:
        raise UserError(f"serve.scenario={cfg.scenario!r}: choose one of {', '.join(SCENARIOS)}")
    bad_accuracy = [s for s in cfg.accuracy_scenarios if s not in SCENARIOS]
    if bad_accuracy:
        raise UserError(f"serve.accuracy_scenarios has {bad_accuracy}: choose among {', '.join(SCENARIOS)}")
    if cfg.ratio_fit not in ("logistic", "levels"):
        raise UserError(f"serve.ratio_fit={cfg.ratio_fit!r}: choose logistic (each side's limit fitted to its verdicts) or levels "
                        "(the tracked levels' geometric mean)")
    if cfg.loadgen_seeds not in ("harness", "mlperf"):
        raise UserError(f"serve.loadgen_seeds={cfg.loadgen_seeds!r}: choose harness or mlperf")
    positive = {"bound_ms": cfg.bound_ms, "min_duration_s": cfg.min_duration_s, "min_qps": cfg.min_qps, "max_search_s": cfg.max_search_s,
                "qps_resolution": cfg.qps_resolution, "batch_dependent_auc_tolerance": cfg.batch_dependent_auc_tolerance}
    if cfg.qps_start is not None:
        positive["qps_start"] = cfg.qps_start
    for key, value in positive.items():
        if not value > 0:
            raise UserError(f"serve.{key} must be positive, got {value}")
    if cfg.max_wait_ms < 0:
        raise UserError(f"serve.max_wait_ms must not be negative, got {cfg.max_wait_ms}")
    if cfg.qps_factor <= 1:
        raise UserError(f"serve.qps_factor must be above 1, got {cfg.qps_factor}")
    if cfg.max_steal is not None and not 0 <= cfg.max_steal < 1:
        raise UserError(f"serve.max_steal must be in [0, 1) (a share of the CPU time), or null to set no run aside, got {cfg.max_steal}")
    if cfg.max_slowdown is not None and not cfg.max_slowdown > 0:
        raise UserError(f"serve.max_slowdown must be above 0 (0.15: a run 15% slower than the host's usual is set aside), "
                        f"or null to set no run aside for it, got {cfg.max_slowdown}")
    if cfg.step_late_share is not None and not 0 <= cfg.step_late_share < 1:
        raise UserError(f"serve.step_late_share must be in [0, 1) (a share of the late queries the percentile allows), got {cfg.step_late_share}")
    counts = {"workers": cfg.workers, "max_steps": cfg.max_steps, "fixed_pairs": cfg.fixed_pairs, "judgments": cfg.judgments,
              "max_samples": cfg.max_samples, "min_query_count": cfg.min_query_count, "paired_judgments": cfg.paired_judgments}
    for key, value in counts.items():
        if value is not None and value < 1:
            raise UserError(f"serve.{key} must be a positive integer, got {value}")
    if cfg.min_rounds < 4:
        raise UserError(f"serve.min_rounds must be at least 4 (two ABBA blocks of two rounds give the interval its spread), got {cfg.min_rounds}")
    if cfg.min_reversals < 1:
        raise UserError(f"serve.min_reversals must be a positive integer, got {cfg.min_reversals}")
    if not 0 <= cfg.rerun_spread < 1:
        raise UserError(f"serve.rerun_spread must be in [0, 1) (a run-to-run SD of the log ratio, e.g. 0.03), got {cfg.rerun_spread}")
    if cfg.track_rounds != 0 and cfg.track_rounds < cfg.min_rounds:
        raise UserError(f"serve.track_rounds must be 0 (no tracking) or at least serve.min_rounds ({cfg.min_rounds}), got {cfg.track_rounds}")
    if not 0 < cfg.track_step < 1:
        raise UserError(f"serve.track_step must be in (0, 1) (a staircase step's share of the load, e.g. 0.04), got {cfg.track_step}")
    if not cfg.pairs_quantiles or min(cfg.pairs_quantiles) < 1:
        raise UserError(f"serve.pairs_quantiles must be a non-empty list of positive sizes, got {list(cfg.pairs_quantiles)}")


@dataclass
class SloConfig:
    """`python -m bench recommend`: the service-level objective the deployment must meet."""

    p99_ms: float = 60.0  # the p99 latency bound of a query under load (MLPerf DLRM-v2: 60 ms)
    # A target rate (queries/s) the deployment must hold under the bound; null: the most QPS under the bound.
    # Given, the pick is the candidate with the fewest threads that meets it.
    qps: Optional[float] = None


@dataclass
class AccuracyBudgetConfig:
    """`python -m bench recommend`: the accuracy a deployment may give up against fp32."""

    # The largest AUC drop against fp32 a deployment may show: its whole paired 95% interval must lie above
    # minus this. null: compare.max_auc_drop (0.001), the budget report.md's bottom line reads.
    max_auc_drop: Optional[float] = None


@dataclass
class MemoryLimitConfig:
    """`python -m bench recommend`: the memory a deployment may hold."""

    max_model_mb: Optional[float] = None  # the most MB (10^6 bytes) the prepared model may hold; null: no limit


@dataclass
class RecommendConfig:
    """`python -m bench recommend`: the candidates, the funnel's sizes and the time budget (bench.recommend)."""

    # Backends to consider; null: every registered backend of the default and toolkit sweeps (one that cannot
    # run here is named with its reason).
    backends: Optional[list[str]] = None
    # The serving batcher's most rows per model call, one candidate each (the offline timing adds 256 rows,
    # about one query, so the batch times span what the batcher forms).
    batch_sizes: list[int] = field(default_factory=lambda: [1024, 4096])
    # Torch threads per deployment, one candidate each; null: 1, and the machine's core count where it has more.
    threads: Optional[list[int]] = None
    confirm: int = 3  # candidates confirmed under LoadGen's Server scenario, best estimates first
    budget_min: float = 20.0  # minutes the funnel may take; stage 3 stops timing new candidates when they would pass it
    # a tune's per_table.yaml as one more candidate (uint4 with the map's types); null: the one a tune left in
    # <reports_dir>/tune/latest, with the default candidates only
    tune_map: Optional[str] = None

    def validate(self) -> None:
        check_recommend_config(self)


def check_recommend_config(cfg) -> None:
    """The recommend settings that cannot run, before any work."""
    if not cfg.batch_sizes or any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in cfg.batch_sizes):
        raise UserError(f"recommend.batch_sizes must be a non-empty list of positive row counts, got {list(cfg.batch_sizes)} "
                        "(recommend.batch_sizes=[1024,4096])")
    if cfg.threads is not None and (not cfg.threads or any(not isinstance(t, int) or isinstance(t, bool) or t < 1 for t in cfg.threads)):
        raise UserError(f"recommend.threads must be a non-empty list of positive thread counts, got {list(cfg.threads)} "
                        "(recommend.threads=[1,2], or null)")
    if cfg.backends is not None and not cfg.backends:
        raise UserError("recommend.backends is empty: name some backends (recommend.backends=[fp32,int8_tbe]) or null for all")
    if not isinstance(cfg.confirm, int) or cfg.confirm < 1:
        raise UserError(f"recommend.confirm must be a positive integer, got {cfg.confirm!r} (recommend.confirm=3)")
    if not cfg.budget_min > 0:
        raise UserError(f"recommend.budget_min must be positive (minutes), got {cfg.budget_min} (recommend.budget_min=20)")


def check_objectives(slo, accuracy, memory) -> None:
    """The SLO, accuracy budget and memory limit of `python -m bench recommend`, before any work."""
    if not slo.p99_ms > 0:
        raise UserError(f"slo.p99_ms must be a positive latency in ms, got {slo.p99_ms} (slo.p99_ms=60)")
    if slo.qps is not None and not slo.qps > 0:
        raise UserError(f"slo.qps must be a positive rate in queries/s, or null for the most under the bound, got {slo.qps} (slo.qps=500)")
    if accuracy.max_auc_drop is not None and not 0 <= accuracy.max_auc_drop < 1:
        raise UserError(f"accuracy.max_auc_drop must be an AUC drop between 0 and 1, got {accuracy.max_auc_drop} "
                        "(accuracy.max_auc_drop=0.001)")
    if memory.max_model_mb is not None and not memory.max_model_mb > 0:
        raise UserError(f"memory.max_model_mb must be a positive size in MB, or null for no limit, got {memory.max_model_mb} "
                        "(memory.max_model_mb=100)")


def auc_budget(cfg) -> tuple[str, float]:
    """The accuracy budget a command reads, and the key that set it: the one setting, compare.max_auc_drop
    (report.md's verdicts and bottom line, and `python -m bench.report --max-auc-drop`), unless the command's
    one override is given: `python -m bench recommend`'s accuracy.max_auc_drop, or `+sweep=tune`'s
    tune.max_auc_drop (absolute) or tune.max_auc_drop_relative (a fraction of the fp32 AUC, the same budget
    in another unit: give one). Every reader resolves the budget here; `bench.stats.budget_verdict` judges
    a ΔAUC against it. `cfg` is a Config or a stored record's config read back as attributes."""
    given = []
    accuracy, tune = getattr(cfg, "accuracy", None), getattr(cfg, "tune", None)
    if accuracy is not None and accuracy.max_auc_drop is not None:
        given.append(("accuracy.max_auc_drop", accuracy.max_auc_drop))
    if tune is not None:
        given += [(k, v) for k, v in (("tune.max_auc_drop", tune.max_auc_drop),
                                      ("tune.max_auc_drop_relative", tune.max_auc_drop_relative)) if v is not None]
    if len(given) > 1:
        raise UserError(f"give the AUC budget once, not {' and '.join(k for k, _ in given)}: tune.max_auc_drop=0.001 (absolute) "
                        "or tune.max_auc_drop_relative=0.01 (of the fp32 AUC)")
    return given[0] if given else ("compare.max_auc_drop", cfg.compare.max_auc_drop)


@dataclass
class Config:
    workload: WorkloadConfig = MISSING
    model: ModelConfig = MISSING
    backend: BackendConfig = MISSING
    device: DeviceConfig = MISSING
    sharding: ShardingConfig = MISSING
    # Ranks the tables are sharded over (sharding != none); batch_size is the global batch, split
    # evenly over the ranks.
    world_size: int = 1
    batch_size: int = 2048
    seed: int = 0
    threads: Optional[int] = None  # torch intra-op threads; None keeps torch's default
    reports_dir: str = "reports"
    cache_dir: str = ".cache/bench"
    # Accuracy does not depend on these: they stay fixed so one backend's AUC serves every batch size.
    eval_batch_size: int = 8192
    calibration_batch_size: int = 1024  # the calibration split is cut into batches of this size
    timing: TimingConfig = field(default_factory=TimingConfig)
    # Time each kernel family the backends use once per machine and stack (seconds, cached beside the timing
    # calibration: bench.devices) and flag a degraded one in every record, report and gate.
    # false: FBGEMM's instruction set is still checked against the CPU's, without timing anything.
    kernel_health: bool = True
    # A ΔAUC that names its layer: a job whose ΔAUC passes the gate's AUC margin quantizes each int8 Linear and
    # each table alone to name the layers responsible (bench.pipeline.layers; the nightly sets it). A diagnostic
    # added to the record, not part of what the job measures: it leaves the job's identity as it is.
    attribute_layers: bool = False
    # Set by sweep configs: names the report folder `<reports_dir>/<sweep>/`, and whether the
    # sweep ends with the gate.
    sweep_name: Optional[str] = None
    run_gate: bool = False
    gate: GateConfig = field(default_factory=GateConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    # Reuse the ok/skipped record of a job already in <reports_dir>/records.jsonl (same config hash,
    # same machine fingerprint) instead of measuring it again: re-run an interrupted sweep with it.
    resume: bool = False
    # Once a sweep's jobs are done, measure again each job whose answer the host withheld (a paired Server job whose
    # rounds were set aside as slow or stolen: no ratio), up to this many times (bench.cli.measure_again; recommend's
    # stage 4 likewise, bench.recommend.funnel.serve_again); 0 leaves them to a re-run with resume=true, which measures
    # such a job again too.
    measure_again: int = 1
    # Skip a job (status `skipped`) whose estimated memory exceeds this fraction of what is available
    # (MemAvailable; free GPU memory on CUDA). null turns the check off.
    memory_fraction: Optional[float] = 0.8
    # Set by `+sweep=tune` (conf/sweep/tune.yaml): the run is a tune (bench.tune), not a job.
    tune: Optional[TuneConfig] = None
    # Set by `+sweep=serve` (conf/sweep/serve.yaml): the job serves the backend through MLPerf LoadGen (bench.serve).
    serve: Optional[ServeConfig] = None
    # Set by `python -m bench recommend` (conf/sweep/recommend.yaml): the objectives and the candidates (bench.recommend).
    slo: Optional[SloConfig] = None
    accuracy: Optional[AccuracyBudgetConfig] = None
    memory: Optional[MemoryLimitConfig] = None
    recommend: Optional[RecommendConfig] = None
    # Hold this host's job lock while a job runs, so parallel launchers never measure two jobs at once
    # (bench.distributed.host).
    one_job_per_host: bool = True
    # What the job measures where it is a part of a whole job, set by recommend's plan (bench.recommend.jobs):
    # `facts` its ΔAUC against fp32 and its model's bytes, nothing timed (bench.routes.facts); `served` the
    # serving function's batch times at batch_size rows beside fp32's (bench.routes.served). null: the whole job.
    measure: Optional[str] = None

    # Set by a model family of the zoo (`+zoo=NAME`, conf/zoo/; `+sweep=zoo`): names the family, so the families of
    # one sweep keep rows of their own (the results' `family` axis). A label: not part of a job's identity.
    family: Optional[str] = None


FACTS, SERVED = "facts", "served"
MEASURES = (FACTS, SERVED)  # the values of Config.measure (bench.routes picks the route by it)


def register_configs(plugins: bool = True) -> None:
    """Store every schema in Hydra's ConfigStore, and the registry's resolvers (idempotent).
    `plugins=False` skips the plug-in schemas, whose modules import torch (bench.preflight stands
    in for them)."""
    if not OmegaConf.has_resolver("registered_backends"):
        OmegaConf.register_new_resolver("registered_backends", lambda: ",".join(registry.sweep_backends()))
    if not OmegaConf.has_resolver("toolkit_backends"):  # +sweep=toolkits
        OmegaConf.register_new_resolver("toolkit_backends", lambda: ",".join(registry.toolkit_sweep_backends()))
    if not OmegaConf.has_resolver("zoo_backends"):  # +sweep=zoo: every registered backend, fp32 first
        OmegaConf.register_new_resolver("zoo_backends", lambda: ",".join(registry.every_backend()))
    if not OmegaConf.has_resolver("zoo_families"):  # +sweep=zoo: every model family of conf/zoo/
        from bench.config import zoo_families  # the package's, which imports this module

        OmegaConf.register_new_resolver("zoo_families", lambda: ",".join(zoo_families()))
    if not OmegaConf.has_resolver("dense_path"):  # a quantized backend's default backend.mlp per device
        OmegaConf.register_new_resolver("dense_path", dense_path)
    if not OmegaConf.has_resolver("pid"):  # in the run folder's name (conf/config.yaml)
        OmegaConf.register_new_resolver("pid", os.getpid)
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="device", name="base_device", node=DeviceConfig)
    cs.store(group="sharding", name="base_sharding", node=ShardingConfig)
    cs.store(group="gate", name="base_gate", node=GateConfig)
    cs.store(group="compare", name="base_compare", node=CompareConfig)
    for kind in registry.KINDS if plugins else ():
        for name, entry in registry.entries(kind).items():
            cs.store(group=kind, name=f"base_{name}", node=entry.config)


__all__ = [
    "FACTS",
    "MEASURES",
    "SERVED",
    "NOT_THE_JOB",
    "MAX_AUC_DROP",
    "RECORDS_FILE",
    "WorkloadConfig",
    "workload_label",
    "TrainConfig",
    "CUSTOM_ARCH",
    "HSTU_ARCH",
    "HstuConfig",
    "MODEL_OUTPUTS",
    "ModelConfig",
    "check_model_config",
    "BackendConfig",
    "DeviceConfig",
    "DENSE_PATHS",
    "dense_path",
    "ShardingConfig",
    "TimingConfig",
    "RuleSet",
    "CompareConfig",
    "GateConfig",
    "TuneConfig",
    "MLPERF_PAIRS",
    "SCENARIOS",
    "ServeConfig",
    "check_serve_config",
    "SloConfig",
    "AccuracyBudgetConfig",
    "MemoryLimitConfig",
    "RecommendConfig",
    "check_recommend_config",
    "check_objectives",
    "auc_budget",
    "Config",
    "register_configs",
]
