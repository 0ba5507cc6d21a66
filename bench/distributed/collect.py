"""Measure a sharded job: what each rank does (`collect`), and the record's metrics from what rank 0
gathered (`sharded_metrics`).

`batch_size` is the global batch. On the `process_group` route each rank feeds its own contiguous
slice of every batch (eval and timing), as a data-parallel front end would; rank 0 gathers the
slices' scores back in sample order. On the `one_process` route the one process feeds whole
batches. Either way every eval sample is scored exactly once (a count check), in the order the
unsharded run scored it, so the two runs' scores can be compared sample by sample.

Throughput is global: per trial, the rows of all ranks over the slowest rank's time in the model
calls; the record quotes the median over trials with a bootstrap interval. The ranks agree on the
number of calls per trial (their calls meet in collectives). Latency is the step latency, the
slowest rank's time for each call; every rank's raw samples are kept.

Accuracy through sharding: AUC(sharded) - AUC(unsharded run of the same backend) on the same
samples must be exactly zero (`accuracy_error` turns anything else into an error).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench import cpuinfo_fix, devices
from bench.backends.backend import Backend, NotApplicable
from bench.backends.tables import table_storage
from bench.backends.tbe import row_alignment
from bench.batch import Batch
from bench.config import Config
from bench.registry import BASELINE_BACKEND
from bench.distributed import engine
from bench.distributed import ranks
from bench.distributed.plan import (
    SHARDING_TYPES,
    bytes_per_rank,
    plan_record,
    tables_per_rank,
)
from bench.errors import UserError
from bench.io import write_json_atomic
from bench.measure.accuracy import CountMismatch, accuracy_metrics
from bench.measure.figures import Held, JobFigures, Timed
from bench.measure.memory import PeakMemory, model_bytes
from bench.measure.timing import loop_options, time_module
from bench.metrics import AUC_FP32, EMBEDDING_BYTES, LATENCY_MS, ORACLE_AUC, PEAK_RSS_BYTES, THROUGHPUT, hi, lo
from bench.pipeline.job import scores_of, backend_config
from bench.pipeline.shared import SharedWork
from bench.stats import median_interval, paired_auc_delta, paired_ne_acc_delta


@dataclass
class ShardedRun:
    """What the ranks measured, gathered on rank 0 (or read back from ranks the harness launched)."""

    route: str
    world_size: int
    process_group: str | None  # gloo | nccl; None on the one_process route
    plan: dict
    labels: np.ndarray
    logits: np.ndarray
    latency_ms: list  # [rank][trial][call]; one "rank" (the process) on the one_process route
    per_rank: list[dict]  # per process: rank, rows_per_call, peak_rss_bytes, rss_scope, threads
    model_bytes: int  # the unsharded prepared model

    def save(self, directory: Path) -> None:
        np.savez(directory / "scores.npz", labels=self.labels, logits=self.logits)
        write_json_atomic(directory / "run.json", {k: v for k, v in asdict(self).items() if k not in ("labels", "logits")})

    @classmethod
    def load(cls, directory: Path) -> "ShardedRun":
        data = json.loads((directory / "run.json").read_text())
        with np.load(directory / "scores.npz") as scores:
            return cls(**data, labels=scores["labels"], logits=scores["logits"])


def check(cfg: Config) -> None:
    """Bad sharding input: one line naming the fix."""
    ws = cfg.world_size
    if not isinstance(ws, int) or isinstance(ws, bool) or ws < 1:
        raise UserError(f"world_size must be a positive integer, got {ws!r} (world_size=N)")
    if cfg.sharding.name not in ("none", "auto", *SHARDING_TYPES):
        raise UserError(f"unknown sharding {cfg.sharding.name!r}: choose one of none, table_wise, row_wise, column_wise, auto (sharding=NAME)")
    env = ranks.rank_env()
    if env is not None and env.world_size != ws:
        raise UserError(f"the launcher started {env.world_size} ranks but world_size={ws}: pass world_size={env.world_size}")
    if cfg.sharding.name != "none" and cfg.batch_size % ws:
        raise UserError(f"batch_size {cfg.batch_size} is the global batch and must split evenly over world_size={ws} ranks")


def split_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    return n * rank // world_size, n * (rank + 1) // world_size


def slice_rows(dense: torch.Tensor, sparse: KeyedJaggedTensor, lo: int, hi: int) -> tuple[torch.Tensor, KeyedJaggedTensor]:
    """Rows lo:hi of a batch's model inputs (every key's bags for those rows)."""
    n, keys = dense.shape[0], sparse.keys()
    offsets, values = sparse.offsets(), sparse.values()
    parts = [values[offsets[k * n + lo]:offsets[k * n + hi]] for k in range(len(keys))]
    lengths = sparse.lengths().view(len(keys), n)[:, lo:hi].reshape(-1)
    return dense[lo:hi], KeyedJaggedTensor(keys=keys, values=torch.cat(parts), lengths=lengths)


def collect(cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> ShardedRun | None:
    """This rank's part of a sharded job; rank 0 returns everything gathered, the others None."""
    workload = work.workload(cfg)
    if cfg.batch_size > workload.num_samples("eval"):
        raise UserError(f"batch_size {cfg.batch_size} is larger than the eval split ({workload.num_samples('eval')} samples): lower batch_size")
    tables = {t.name: int(t.num_embeddings) for t in workload.tables}
    way = engine.route(backend, tables)
    split = way == engine.ONE_PROCESS and not engine.float_tables(backend, tables)
    rank, n_ranks = ranks.rank(), ranks.world_size()
    if rank != 0:
        ranks.barrier()  # rank 0 trains or loads the model first; the others then load it from the cache
    model = work.model(cfg, workload)
    if rank == 0:
        ranks.barrier()
    refusal = engine.sequence_refusal(model.module, cfg)  # every rank refuses alike, before any collective
    if refusal is not None:
        raise NotApplicable(refusal)

    with PeakMemory(device, devices.get(cfg.device)) as peak:
        torch.manual_seed(cfg.seed)  # as the unsharded job prepares it
        with engine.split_scale_bias(model.module, split):
            prepared = backend.prepare(model.module, work.split_batches(cfg, workload, "calibration"), device)
        storage = table_storage(prepared)
        dense_bytes = model_bytes(prepared)
        if way == engine.ONE_PROCESS:
            sharded, plan = engine.shard_one_process(prepared, cfg, device, split)
        else:
            sharded, plan = engine.shard_process_group(prepared, cfg, device, dist.group.WORLD)
        eval_batches = work.split_batches(cfg, workload, "eval")
        local_scores = _score(sharded, eval_batches, device, rank, n_ranks)
        lo, hi = split_bounds(cfg.batch_size, rank, n_ranks)
        inputs = [slice_rows(*args, lo, hi) for args in work.timing_inputs(cfg, workload, device)]
        timing = time_module(sharded, inputs, hi - lo, device, **loop_options(cfg.timing, cfg.device), agree_calls=lambda n: int(ranks.agree_max(n)))

    mine = {"rank": rank, "rows_per_call": hi - lo, PEAK_RSS_BYTES: peak.peak_rss_bytes, "rss_scope": peak.rss_scope,
            "threads": torch.get_num_threads(), LATENCY_MS: timing.latency_ms, "scores": local_scores,
            "fbgemm_isa": cpuinfo_fix.fbgemm_isa()}  # the kernel path this rank ran on (bench.cpuinfo_fix)  # fmt: skip
    everyone = ranks.gather(mine)
    if everyone is None:
        return None
    labels = np.concatenate([b.labels.numpy() for b in eval_batches])
    logits = np.concatenate([r["scores"][i] for i in range(len(eval_batches)) for r in everyone])
    if logits.size != labels.size or labels.size != workload.num_samples("eval"):
        raise CountMismatch(f"the ranks scored {logits.size} eval samples, expected {workload.num_samples('eval')}: samples were dropped or repeated")
    return ShardedRun(
        route=way,
        world_size=cfg.world_size,
        process_group=dist.get_backend() if way == engine.PROCESS_GROUP else None,
        plan=plan_record(plan, storage, row_alignment(device)),
        labels=labels,
        logits=logits,
        latency_ms=[r.pop(LATENCY_MS) for r in everyone],
        per_rank=[{k: v for k, v in r.items() if k != "scores"} for r in everyone],
        model_bytes=dense_bytes,
    )


@torch.no_grad()  # not inference mode: the DMP route's slices must stay ordinary tensors (see engine.AutogradOff)
def _score(module: torch.nn.Module, batches: list[Batch], device: torch.device, rank: int, n_ranks: int) -> list[np.ndarray]:
    """This rank's scores, one array per eval batch (its slice of every batch)."""
    out = []
    for batch in batches:
        lo, hi = split_bounds(len(batch), rank, n_ranks)
        dense, sparse = batch.to(device).model_inputs()
        if n_ranks > 1:
            dense, sparse = slice_rows(dense, sparse, lo, hi)
        scores = module(dense, sparse).reshape(-1)
        if scores.numel() != hi - lo:
            raise CountMismatch(f"the sharded model returned {scores.numel()} scores for {hi - lo} samples")
        out.append(scores.float().cpu().numpy())
    return out


def sharded_metrics(cfg: Config, backend: Backend, device: torch.device, work: SharedWork, run: ShardedRun) -> dict[str, Any]:
    """The record's metrics from a gathered run: accuracy against the unsharded run, global speed, per-rank memory."""
    workload = work.workload(cfg)
    model = work.model(cfg, workload)
    metrics: dict[str, Any] = accuracy_metrics(run.labels, run.logits)
    metrics[ORACLE_AUC] = workload.oracle_auc()
    labels, unsharded = scores_of(cfg, backend.cfg, model, workload, device, work)
    if not np.array_equal(labels, run.labels):
        raise RuntimeError("the sharded run scored the eval samples in another order than the unsharded run")
    same = paired_auc_delta(labels, unsharded, run.logits)
    _, base_logits = scores_of(cfg, backend_config({"name": BASELINE_BACKEND}), model, workload, device, work)
    delta = paired_auc_delta(labels, base_logits, run.logits)
    metrics.update({AUC_FP32: delta.auc_base, **delta.as_metrics()})
    for d in paired_ne_acc_delta(labels, base_logits, run.logits):
        metrics.update(d.as_metrics())

    trials = _trial_throughputs(run, cfg.batch_size)
    interval = median_interval(trials)
    steps = [[max(lat[t][j] for lat in run.latency_ms) for j in range(len(run.latency_ms[0][t]))] for t in range(len(trials))]
    flat = np.concatenate([np.asarray(s) for s in steps])
    per_rank_bytes = bytes_per_rank(run.plan, run.world_size)
    per_rank_tables = tables_per_rank(run.plan, run.world_size)
    one_process = run.route == engine.ONE_PROCESS
    processes = {p["rank"]: p for p in run.per_rank}
    per_rank = []
    for r in range(run.world_size):
        proc = processes[0 if one_process else r]
        per_rank.append({
            "rank": r,
            EMBEDDING_BYTES: per_rank_bytes[r],
            "tables": per_rank_tables[r],
            PEAK_RSS_BYTES: proc[PEAK_RSS_BYTES],
            "rss_scope": "one process holds every rank" if one_process else proc["rss_scope"],
            "threads": proc["threads"],
            "rows_per_call": proc["rows_per_call"],
            "fbgemm_isa": proc.get("fbgemm_isa"),
            "latency_samples_ms": None if one_process else run.latency_ms[r],
        })  # fmt: skip
    metrics.update(JobFigures(
        timed=Timed(interval.ratio, trials, {f"p{q}": float(np.percentile(flat, q)) for q in (50, 90, 99)}, steps),
        held=Held(sum(per_rank_bytes), run.model_bytes, max(p[PEAK_RSS_BYTES] for p in run.per_rank),
                  "max over ranks" if not one_process else processes[0]["rss_scope"]),
        threads=processes[0]["threads"],
        model_source=model.info.get("source"),
        workload_info=workload.describe(),
    ).metrics())
    metrics.update(
        sharding={
            "type": cfg.sharding.name,
            "world_size": run.world_size,
            "route": run.route,
            "process_group": run.process_group,
            "plan": run.plan,
            "bytes_per_rank": per_rank_bytes,
            "tables_per_rank": per_rank_tables,
            "per_rank": per_rank,
            lo(THROUGHPUT): interval.lo,
            hi(THROUGHPUT): interval.hi,
            # both AUCs by one computation (bench.stats), so identical scores give exactly 0
            "auc_unsharded": same.auc_base,
            "auc_sharded": same.auc_new,
            "auc_delta_unsharded": same.delta,
            "max_abs_logit_diff": float(np.max(np.abs(run.logits - unsharded))),
        },
    )
    return metrics


def _trial_throughputs(run: ShardedRun, batch_size: int) -> list[float]:
    """Per trial: every rank's rows over the slowest rank's time in the model calls."""
    out = []
    for t in range(len(run.latency_ms[0])):
        calls = len(run.latency_ms[0][t])
        slowest_s = max(sum(lat[t]) for lat in run.latency_ms) / 1e3
        out.append(batch_size * calls / slowest_s)
    return out


def accuracy_error(metrics: dict[str, Any]) -> str | None:
    """Sharding must not change a single score's rank: a non-zero ΔAUC against the unsharded run is an error."""
    info = metrics.get("sharding") or {}
    delta = info.get("auc_delta_unsharded")
    if delta is None or delta == 0:
        return None
    return (
        f"sharded AUC {info['auc_sharded']:.6f} differs from the unsharded run's {info['auc_unsharded']:.6f} "
        f"(ΔAUC {delta:+.3g}, max |Δlogit| {info['max_abs_logit_diff']:.3g}): sharding must leave every score as it was"
    )
