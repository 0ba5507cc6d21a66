"""Measure one job: accuracy of the prepared backend on the eval split, its delta against fp32 and
its fake-quant twin, timing at the job's batch size, and memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import nn

from bench import devices, hardware, registry, stats
from bench.backends.backend import Backend
from bench.backends.tables import embedding_bytes
from bench.backends.modules import table_tensors
from bench.config import BackendConfig, Config
from bench.errors import UserError
from bench.metrics import AUC, DISTINCT_SCORES, N_EVAL
from bench.hashing import plain
from bench.measure.accuracy import accuracy_metrics, non_finite_scores, score
from bench.measure.cuda_graph import GraphedModule
from bench.measure.figures import Held, JobFigures, Timed
from bench.measure.memory import PeakMemory, model_bytes
from bench.measure.noise import LoadWatch, reference_speed, stability
from bench.measure.timing import (
    CLOCKS,
    PairedTiming,
    Timing,
    loop_options,
    time_module,
    time_paired,
)
from bench.metrics import (CUDA_GRAPH_NOTE, CUDA_GRAPH_SPEEDUP, CUDA_GRAPH_THROUGHPUT, GAUC, TIMED_INPUTS, AUC_DELTA, AUC_FP32, FIDELITY_GAP, ORACLE_AUC,
    POPULARITY_AUC, PREPARE_SECONDS, SCORES_SATURATED, SPEEDUP, SPEEDUP_PROCESS_DF, THREADS,
                           THROUGHPUT, hi, lo, with_interval)
from bench.models.logits import saturated_share
from bench.models.random_weights import RANDOM
from bench.pipeline.attribution import attribute_delta
from bench.pipeline.guard import memory_estimate
from bench.pipeline.layers import attribution_line, auc_margin, layer_rows
from bench.pipeline.nonfinite import explain
from bench.pipeline.profile import job_profile
from bench.pipeline.scores import Scores, scores_key
from bench.pipeline.shared import SharedWork, TrainedModel
from bench.registry import BASELINE_BACKEND
from bench.stats import INCONCLUSIVE, paired_auc_delta, paired_gauc_delta, paired_ne_acc_delta, practical_verdict
from bench.workloads.workload import Workload

# What the record and the report say of a model with random weights (`model.weights=random`).
PERFORMANCE_ONLY = "performance only, no accuracy (untrained weights)"
# A trained fp32 model whose eval AUC lies within this of 0.5 ranks nothing: it is no reference. Its job is an
# error record, and every backend's job compared with it says "no valid reference" (an error too).
CHANCE_MARGIN = 0.01


def measure(cfg: Config, backend: Backend, device: torch.device, shared: SharedWork,
            setting: dict[str, Any] | None = None) -> dict[str, Any]:
    """The job's metrics; `setting`: the timing setting `cfg.timing` was resolved with (bench.pipeline.calibrate)."""
    try:
        return _measured(cfg, backend, device, shared, setting)
    finally:
        if cfg.device.huge_pages:  # its tables may be in huge pages now, even if it failed midway: a later job (one
            shared.drop_modules()  # without them) builds its own rather than time these


def _measured(cfg: Config, backend: Backend, device: torch.device, shared: SharedWork,
              setting: dict[str, Any] | None) -> dict[str, Any]:
    setting = setting or {"threads": cfg.timing.threads, "clock": cfg.timing.clock, "how": "given", "process_sd": None}
    workload = shared.workload(cfg)
    n_eval = workload.num_samples("eval")
    if cfg.batch_size > n_eval:  # checked before the model is trained or loaded
        raise UserError(f"batch_size {cfg.batch_size} is larger than the eval split ({n_eval} samples): lower batch_size")
    model = shared.model(cfg, workload)
    performance_only = model.info.get("source") == RANDOM

    shared.release_leftovers(cfg, backend, device)  # earlier jobs' leftovers are not this job's memory
    # The machine's own speed around the job (a fixed GEMM and gather, bench.measure.noise): a run-vs-run
    # compare normalizes absolute throughput by it (bench.comparison.run_probe). Outside the memory peak's window.
    reference_start = reference_speed()
    with PeakMemory(device, devices.get(cfg.device)) as peak:
        prepared = shared.prepared(cfg, backend, model, workload, device)
        if not performance_only:
            labels, logits = _scores(cfg, backend.cfg, model, workload, device, shared, lambda: prepared)
            bad = non_finite_scores(logits)
            if bad:  # the job fails; its error names the layer where the NaN or inf starts (bench.pipeline.nonfinite)
                raise FloatingPointError(explain(bad, backend, prepared, model.module, shared.split_batches(cfg, workload, "calibration"),
                                                 shared.split_batches(cfg, workload, "eval"), logits, device))
        inputs = shared.timing_inputs(cfg, workload, device)
        # the candidate's own input format, converted before any clock starts (bench.backends.backend)
        candidate_inputs = backend.timed_inputs(prepared, inputs)
        if performance_only:
            reference, why_unpaired = None, "performance only (random weights): no fp32 reference is built"
        else:
            reference, why_unpaired = reference_module(cfg, backend, model, workload, device, shared, cfg.timing.paired,
                                                       "timing.paired=false")
        huge_pages = _huge_pages(cfg, device, prepared, reference)
        backend.before_timing(prepared, max(1, cfg.timing.warmup_batches))
        faults = hardware.minor_faults()
        with hardware.timing_threads(cfg.timing.threads) as threads, LoadWatch() as load:
            if reference is None:
                timing, paired = time_module(prepared, candidate_inputs, cfg.batch_size, device, **loop_options(cfg.timing, cfg.device)), None
            else:
                paired = time_paired(prepared, reference, inputs, cfg.batch_size, device, **loop_options(cfg.timing, cfg.device),
                                     process_sd=setting.get("process_sd") or 0.0, process_df=setting.get("process_df"),
                                     decided=speed_decided(cfg), candidate_inputs=candidate_inputs)
                timing = paired.candidate
        faults = hardware.minor_faults() - faults
        all_threads = _all_threads(cfg, prepared, candidate_inputs, device, threads)
    machine = {"reference_start": reference_start, "reference_end": reference_speed()}
    graphed = _cuda_graph_figures(cfg, backend, prepared, reference, inputs, device, threads, setting)

    if performance_only:
        metrics: dict[str, Any] = {"accuracy": PERFORMANCE_ONLY}
    else:
        _, base_logits = scores_of(cfg, backend_config({"name": BASELINE_BACKEND}), model, workload, device, shared)

        def accuracy_figures() -> dict[str, Any]:
            figures = _accuracy(cfg, backend, model, workload, device, shared, labels, logits)
            # the embeddings' and the dense layers' shares of the delta (bench.pipeline.attribution)
            figures.update(attribute_delta(backend.cfg, labels, base_logits, logits,
                                           lambda other: scores_of(cfg, other, model, workload, device, shared)))
            return figures

        # read from the eval scores alone, so the same for each batch size of this backend: computed once per process
        metrics = shared.scored_figures(_scores_key(cfg, backend.cfg, model, device), accuracy_figures)
        metrics.update(score_figures(model, logits))
        metrics.update(_layers(cfg, backend, model, workload, device, shared, labels, base_logits, metrics))
    distinct_ids = shared.timing_access(cfg, workload, device)["distinct_rows"]
    metrics.update(_timing_figures(cfg, backend, timing, paired, why_unpaired, load.figures, distinct_ids))
    metrics["machine"] = machine
    if huge_pages is not None:
        metrics["huge_pages"] = huge_pages
    if backend.timed_input_format is not None:
        metrics[TIMED_INPUTS] = backend.timed_input_format
    calls = timing.timed_calls + (paired.reference.timed_calls if paired else 0)
    calls += cfg.timing.warmup_batches * (2 if paired else 1)
    throughput = timing.throughput_interval(setting.get("throughput_process_sd") or 0.0,
                                            process_df=setting.get("throughput_process_df"))
    tail = timing.latency_tail()
    metrics.update(JobFigures(
        timed=Timed(timing.throughput, timing.trial_throughput, timing.latency_percentiles(), timing.latency_ms,
                    throughput_interval=(throughput.lo, throughput.hi), calls=tail.n, p99_calls=tail.tail),
        held=Held(embedding_bytes(prepared), model_bytes(prepared), peak.peak_rss_bytes, peak.rss_scope, peak.cuda_peak_bytes),
        threads=threads,
        model_source=model.info.get("source"),
        workload_info=workload.describe(),
        extra={PREPARE_SECONDS: shared.prepare_seconds(backend, model, device), "page_faults_per_call": faults / calls,
               "rss_start_bytes": peak.rss_start_bytes, "table_rows": list({t.name: int(t.num_embeddings) for t in workload.tables}.values()),  # a shared table once
               "throughput_all_threads": all_threads, "timing_setting": setting},
    ).metrics())
    with hardware.timing_threads(threads):  # the roofline at the thread count the throughput was timed with
        metrics.update(job_profile(cfg, prepared, inputs, workload, timing, device, shared))
    metrics.update(backend.job_metrics(prepared))
    metrics.update(graphed)
    return metrics


def _huge_pages(cfg: Config, device: torch.device, prepared: nn.Module, reference: nn.Module | None) -> dict[str, Any] | None:
    """With `device.huge_pages` on a CPU job: the timed models' tables (the candidate's and a paired fp32
    reference's alike) backed with transparent huge pages, and what the kernel gave (bench.hardware)."""
    if not cfg.device.huge_pages:
        return None
    if device.type != "cpu":
        return {"error": f"a {device.type} job: huge pages back host memory, and its tables are on the device"}
    tables = table_tensors(prepared) + (table_tensors(reference) if reference is not None else [])
    return hardware.back_with_huge_pages(tables)


def _cuda_graph_figures(cfg: Config, backend: Backend, prepared: nn.Module, reference: nn.Module | None, inputs: list[tuple],
                        device: torch.device, threads: int, setting: dict) -> dict[str, Any]:
    """With `timing.cuda_graphs`, on CUDA: the candidate (and the fp32 reference, paired as the eager timing is)
    replayed from CUDA graphs; elsewhere a note saying why not."""
    if not cfg.timing.cuda_graphs:
        return {}
    if device.type != "cuda":
        return {CUDA_GRAPH_NOTE: f"a {device.type} job: CUDA graphs replay GPU work only"}
    if backend.timed_input_format is not None:
        return {CUDA_GRAPH_NOTE: f"{backend.cfg.name} takes its own inputs ({backend.timed_input_format}), not model(dense, KJT)"}
    with hardware.timing_threads(threads):
        return time_graphed(cfg, prepared, reference, inputs, device, setting)


def time_graphed(cfg: Config, prepared: nn.Module, reference: nn.Module | None, inputs: list[tuple], device: torch.device,
                 setting: dict, record: bool = True) -> dict[str, Any]:
    """The graphed figures (`record=False`: the same padded calls run eagerly, the CPU's check of this step).
    A call that cannot be recorded, or one past the graph's capacity, leaves a note; the eager figures stand."""
    candidate = GraphedModule(prepared, record)
    ref = GraphedModule(reference, record) if reference is not None else None
    try:
        if ref is None:
            timing, paired = time_module(candidate, inputs, cfg.batch_size, device, **loop_options(cfg.timing, cfg.device)), None
        else:
            paired = time_paired(candidate, ref, inputs, cfg.batch_size, device, **loop_options(cfg.timing, cfg.device),
                                 process_sd=setting.get("process_sd") or 0.0, process_df=setting.get("process_df"),
                                 decided=speed_decided(cfg))
            timing = paired.candidate
            ref.check()
        candidate.check()
    except RuntimeError as e:  # a recording refused (a host sync inside the call) or a call past the graph's capacity
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return {CUDA_GRAPH_NOTE: f"not recorded: {first}"}
    finally:
        del candidate, ref  # the graphs' memory pools go with them, before the next job
    out: dict[str, Any] = {CUDA_GRAPH_THROUGHPUT: timing.throughput}
    if paired is not None:
        out.update(dict(zip(with_interval(CUDA_GRAPH_SPEEDUP), paired.speedup())))
    return out


def _layers(cfg: Config, backend: Backend, model: TrainedModel, workload: Workload, device: torch.device, shared: SharedWork,
            labels, base_logits, metrics: dict[str, Any]) -> dict[str, Any]:
    """With `attribute_layers=true`, a ΔAUC past the gate's AUC margin named by layer (bench.pipeline.layers)."""
    delta, base = metrics.get(AUC_DELTA), metrics.get(AUC_FP32)
    if not cfg.attribute_layers or backend.cfg.name == BASELINE_BACKEND or delta is None or base is None:
        return {}
    margin = auc_margin(cfg, backend.cfg.name, base)
    if margin is None or stats.budget_verdict(delta, delta, margin) != stats.OVER_BUDGET:  # the point, by the gate's one rule
        return {}
    try:
        batches, n = shared.split_batches(cfg, workload, "eval"), workload.num_samples("eval")
        rows = layer_rows(backend, model.module, shared.split_batches(cfg, workload, "calibration"), device,
                          lambda m: score(m, batches, device, expected=n), labels, base_logits)
    except Exception as exc:  # noqa: BLE001 - the attribution is extra: keep what the job measured
        return {"auc_delta_layers_error": f"{type(exc).__name__}: {exc}"}
    return {"auc_delta_layers": rows, "auc_delta_layers_line": attribution_line(delta, rows)}


def score_figures(model: TrainedModel, logits) -> dict[str, Any]:
    """How a probabilities model's scores were read (`score_read`) and the share the clamp tied
    (`scores_saturated`); {} for a model that returns logits (bench.models.logits)."""
    read = model.info.get("score_read")
    return {} if read is None else {"score_read": read, SCORES_SATURATED: saturated_share(logits)}


def reference_fault(metrics: dict[str, Any], backend_name: str) -> str | None:
    """Why a trained fp32 reference at chance fails this job (None: it is a valid reference)."""
    base = metrics.get(AUC_FP32)
    if base is None or abs(base - 0.5) >= CHANCE_MARGIN:
        return None
    saturated = metrics.get(SCORES_SATURATED) if backend_name == BASELINE_BACKEND else None
    why = f"; {saturated:.0%} of its scores saturated" if saturated else ""
    if backend_name == BASELINE_BACKEND:
        return (f"the trained fp32 model stayed at chance: eval AUC {base:.4f}, within {CHANCE_MARGIN} of 0.5{why}; it ranks "
                "nothing, so no backend can be compared with it (train it longer: model.train.samples, or see docs/custom-model.md)")
    return f"no valid reference: the fp32 model stayed at chance (eval AUC {base:.4f}), so this backend's ΔAUC means nothing"


def output_fault(metrics: dict[str, Any], backend_name: str) -> str | None:
    """Why a backend's output fails its job though the fp32 reference ranks (None: it does not): every eval
    sample scored the same, or an AUC at chance. Either way the ΔAUC would only say "much worse", where the
    cause is a broken quantization (Neural Compressor's dynamic int8 converted without a calibration forward
    scores every sample the same) that no tolerance should pass as a figure."""
    auc, base = metrics.get(AUC), metrics.get(AUC_FP32)
    if backend_name == BASELINE_BACKEND or auc is None or base is None or abs(base - 0.5) < CHANCE_MARGIN:
        return None  # the reference itself: reference_fault judges it
    if metrics.get(DISTINCT_SCORES) == 1:
        return (f"the quantized output is constant: every one of the {metrics.get(N_EVAL)} eval samples got the same score "
                f"(AUC {auc:.4f}, fp32 {base:.4f}); the backend's quantization is broken, not merely inaccurate")
    if abs(auc - 0.5) < CHANCE_MARGIN:
        return (f"the quantized output is at chance: eval AUC {auc:.4f}, within {CHANCE_MARGIN} of 0.5, where fp32 ranks at "
                f"{base:.4f}; the backend's quantization is broken, not merely inaccurate")
    return None


def speed_decided(cfg: Config):
    """Whether a speedup interval (lo, hi) already decides what the job is judged on: the verdict against
    the practical margin (`compare.throughput_tolerance`, as the report reads it) and the gate's
    `min_speedup` for this backend, if any. Paired rounds stop once it does (bench.measure.timing)."""
    rules = cfg.gate.rules.get(cfg.backend.name) or cfg.gate.default_rules
    threshold = rules.min_speedup

    def decided(lo: float, hi: float) -> bool:
        if practical_verdict(lo, hi, cfg.compare.throughput_tolerance, null=1.0, ratio=True) == INCONCLUSIVE:
            return False
        return threshold is None or lo > threshold or hi < threshold

    return decided


def _all_threads(cfg: Config, prepared: nn.Module, inputs: list[tuple], device: torch.device, timed_threads: int) -> dict | None:
    """With `timing.report_all_threads`, the backend alone at the job's own thread count when the timed
    setting used fewer: its samples/s beside the paired figures (wall clock: the work runs on many threads)."""
    if not cfg.timing.report_all_threads or torch.get_num_threads() <= timed_threads:
        return None
    options = {**loop_options(cfg.timing, cfg.device), "clock": CLOCKS["wall"]}
    alone = time_module(prepared, inputs, cfg.batch_size, device, **options)
    return {THREADS: torch.get_num_threads(), THROUGHPUT: alone.throughput, "trial_cv": alone.trial_cv}


def reference_module(cfg: Config, backend: Backend, model: TrainedModel, workload: Workload, device: torch.device,
                     shared: SharedWork, paired: bool, unpaired_reason: str) -> tuple[nn.Module | None, str | None]:
    """The prepared fp32 module a paired measurement (a speedup, a serving search) runs beside, or None and why
    not: the job is fp32 itself, pairing is off (`paired`, `unpaired_reason` says which key), fp32 cannot run
    on the device, or there is no room for its copy."""
    if backend.cfg.name == BASELINE_BACKEND:
        return None, "this is the reference"
    if not paired:
        return None, unpaired_reason
    ref = registry.get("backend", BASELINE_BACKEND).factory(backend_config({"name": BASELINE_BACKEND}))
    why = ref.unsupported_reason(device)
    if why is None and cfg.memory_fraction is not None:
        estimate = memory_estimate(cfg, ref, workload, True, device)
        extra = estimate.fp32_model_bytes  # the reference's copy, beside the candidate
        if extra > cfg.memory_fraction * (hardware.mem_available_bytes() or float("inf")):
            why = f"no room for an fp32 reference ({estimate.describe()})"
    if why is not None:
        return None, why
    return shared.reference(cfg, ref, model, device), None


def _timing_figures(cfg: Config, backend: Backend, timing: Timing, paired: PairedTiming | None, why_unpaired: str | None,
                    load: dict[str, Any], distinct_ids: int) -> dict[str, Any]:
    """What was timed (distinct batches and ids, calls), the paired speedup, and whether it is stable."""
    out: dict[str, Any] = {
        "timing_distinct_batches": timing.distinct_batches,
        "timing_distinct_ids": distinct_ids,
        "timing_calls": timing.timed_calls,
        "timing_calls_per_batch": timing.calls_per_batch,
    }
    if paired is not None:
        out.update(dict(zip(with_interval(SPEEDUP), paired.speedup())))
        out.update(
            speedup_rounds=paired.ratios, speedup_first=paired.first,
            speedup_method=f"paired: {len(paired.ratios)} ABBA rounds against {BASELINE_BACKEND} in this process",
            speedup_stop=paired.stopped,
            speedup_round_se=paired.round_se, speedup_process_sd=paired.process_sd if paired.process_sd else None,
            **{SPEEDUP_PROCESS_DF: paired.process_df if paired.process_sd else None},
            reference_throughput=paired.reference.throughput, reference_throughput_trials=paired.reference.trial_throughput,
        )
    else:
        out["speedup_method"] = f"unpaired ({why_unpaired})"
    out.update(stability(timing, paired, load, cfg.timing.max_trial_cv))
    return out


def _accuracy(cfg: Config, backend: Backend, model: TrainedModel, workload: Workload, device: torch.device,
              shared: SharedWork, labels, logits) -> dict[str, Any]:
    """Accuracy on the eval split, its delta against fp32 and the fidelity gap to the fake-quant twin."""
    metrics: dict[str, Any] = accuracy_metrics(labels, logits)
    metrics[ORACLE_AUC] = workload.oracle_auc()
    popularity = workload.popularity_auc()  # a sequential workload's popularity-only baseline
    if popularity is not None:
        metrics[POPULARITY_AUC] = popularity
    _, base_logits = scores_of(cfg, backend_config({"name": BASELINE_BACKEND}), model, workload, device, shared)
    delta = paired_auc_delta(labels, base_logits, logits)
    metrics.update({AUC_FP32: delta.auc_base, **delta.as_metrics()})
    for d in paired_ne_acc_delta(labels, base_logits, logits):  # ΔNE and Δaccuracy, paired over the same samples
        metrics.update(d.as_metrics())
    metrics.update(grouped_auc_figures(cfg, workload, shared, labels, base_logits, logits))
    metrics.update(_fidelity(cfg, backend, model, workload, device, shared, labels, logits))
    return metrics


def grouped_auc_figures(cfg: Config, workload: Workload, shared: SharedWork, labels, base_logits, logits) -> dict[str, Any]:
    """A workload served by request: the grouped AUC (each request's AUC, averaged: MLPerf DLRMv3's AUC) of the
    click probabilities the serving path sends (the float32 sigmoid), and its delta against fp32's, paired by request."""
    sequences = workload.sequences
    if sequences is None or sequences.request is None:
        return {}
    sizes = sequences.request_sizes(shared.split_batches(cfg, workload, "eval"))
    if int(sizes.sum()) != len(labels):
        raise RuntimeError(f"the eval split's requests hold {int(sizes.sum())} rows, its scores {len(labels)}")
    probs = [torch.sigmoid(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).numpy() for x in (base_logits, logits)]
    delta = paired_gauc_delta(labels, probs[0], probs[1], sizes)
    return {GAUC: delta.new, **delta.as_metrics()}


def backend_config(overrides: dict[str, Any]) -> BackendConfig:
    """A backend's typed config from its schema and overrides that name it (`{"name": "fp32", ...}`)."""
    schema = registry.get("backend", overrides["name"]).config
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), overrides))


def _scores_key(cfg: Config, backend_cfg: BackendConfig, model: TrainedModel, device: torch.device) -> str:
    """What a backend's eval scores depend on: the model, the backend's config, the device type, the workload,
    the seed and the calibration batch size (and the harness's code, bench.pipeline.scores); not the job's batch size."""
    return scores_key({
        "model": model.key,
        "backend": plain(backend_cfg),
        "device": device.type,
        "workload": plain(cfg.workload),
        "seed": cfg.seed,
        "calibration_batch_size": cfg.calibration_batch_size,
    })


def _scores(cfg: Config, backend_cfg: BackendConfig, model: TrainedModel, workload: Workload, device: torch.device,
            shared: SharedWork, prepared) -> Scores:
    """(labels, logits) on the eval split: from memory, from disk, or scored now on `prepared()`."""
    key = _scores_key(cfg, backend_cfg, model, device)

    def score_now() -> Scores:
        batches = shared.split_batches(cfg, workload, "eval")
        return score(prepared(), batches, device, expected=workload.num_samples("eval"))

    return shared.scores.get(key, Path(cfg.cache_dir), score_now)


def backend_scores(cfg: Config, backend: Backend, model: TrainedModel, workload: Workload, device: torch.device,
                   shared: SharedWork) -> Scores:
    """(labels, logits) of the job's prepared backend on the eval split, through the same score cache."""
    return _scores(cfg, backend.cfg, model, workload, device, shared,
                   lambda: shared.prepared(cfg, backend, model, workload, device))


def scores_of(cfg: Config, backend_cfg: BackendConfig, model: TrainedModel, workload: Workload, device: torch.device,
               shared: SharedWork) -> Scores:
    """Scores of another backend (the fp32 baseline, a fake-quant twin), prepared only if not cached."""
    def prepare_other():
        other = registry.get("backend", backend_cfg.name).factory(backend_cfg)
        return other.prepare(model.module, shared.split_batches(cfg, workload, "calibration"), device)

    return _scores(cfg, backend_cfg, model, workload, device, shared, prepare_other)


def _fidelity(cfg: Config, backend: Backend, model: TrainedModel, workload: Workload, device: torch.device,
              shared: SharedWork, labels, logits) -> dict[str, Any]:
    """AUC gap between an integer backend and the fake-quant model that emulates it."""
    emulation = backend.emulation()
    if not emulation:
        return {}
    try:
        _, twin_logits = scores_of(cfg, backend_config(emulation), model, workload, device, shared)
    except Exception as exc:  # noqa: BLE001 - the twin is extra: keep what this job measured
        return {"fidelity_twin": emulation, "fidelity_error": f"{type(exc).__name__}: {exc}"}
    gap = paired_auc_delta(labels, twin_logits, logits)
    return {FIDELITY_GAP: gap.delta, lo(FIDELITY_GAP): gap.lo, hi(FIDELITY_GAP): gap.hi, "fidelity_twin": emulation}
