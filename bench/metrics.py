"""The one vocabulary of the figures a run record holds: each metric declared once, with its unit,
which way is better, how one value is printed, what it means and the stage that measures it.

A metric's name is a constant here (`THROUGHPUT`, `AUC_DELTA`, ...); every other module uses the
constant, never the spelled name. A metric with an interval keeps its bounds under `lo(name)` and
`hi(name)`. The routes assemble a record's metrics with these names, and the CLI summary, the report
table, the comparison engine, the gate, the history, the dashboard and `--help` read them from here.
Adding a metric is one `metric(...)` line here plus the code that measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HIGHER, LOWER, NEITHER = "higher", "lower", ""  # which way is better
ACCURACY, TIMING, MEMORY, SERVING = "accuracy", "timing", "memory", "serving"  # the stage that measures it


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # "" for a ratio or a score
    better: str  # HIGHER, LOWER or NEITHER
    fmt: str  # format spec of one value
    description: str
    stage: str
    interval: bool = False  # a 95% interval under lo(name) and hi(name)

    def format(self, value: Any) -> str:
        """One value as the summary prints it ("" for a missing one): "1.42x", "3,450 samples/s"."""
        if value is None:
            return ""
        try:
            text = format(value, self.fmt)
        except (TypeError, ValueError):
            return str(value)
        return text + self.unit if self.unit == "x" else f"{text} {self.unit}".rstrip()


METRICS: dict[str, Metric] = {}


def metric(name: str, unit: str, better: str, fmt: str, description: str, stage: str, interval: bool = False) -> str:
    if name in METRICS:
        raise ValueError(f"metric {name!r} is declared twice")
    METRICS[name] = Metric(name, unit, better, fmt, description, stage, interval)
    return name


def lo(name: str) -> str:
    """The lower bound of a metric's 95% interval."""
    return f"{name}_lo"


def hi(name: str) -> str:
    """The upper bound of a metric's 95% interval."""
    return f"{name}_hi"


def with_interval(name: str) -> tuple[str, str, str]:
    return name, lo(name), hi(name)


# ------------------------------------------------------------------------------------ accuracy
AUC = metric("auc", "", HIGHER, ".4f", "area under the ROC curve over every eval sample, each scored once", ACCURACY)
AUC_DELTA = metric("auc_delta", "", HIGHER, "+.4f", "AUC minus fp32's AUC on the same eval samples, with a paired 95% DeLong interval",
                   ACCURACY, interval=True)
AUC_DELTA_P = metric("auc_delta_p", "", NEITHER, ".2g", "the two-sided p-value of the paired ΔAUC (DeLong)", ACCURACY)
AUC_FP32 = metric("auc_fp32", "", HIGHER, ".4f", "fp32's AUC on the same eval samples (the ΔAUC's reference)", ACCURACY)
ORACLE_AUC = metric("oracle_auc", "", HIGHER, ".4f", "the synthetic teacher's own AUC: the best any model can do on that workload", ACCURACY)
POPULARITY_AUC = metric("popularity_auc", "", HIGHER, ".4f", "a sequential workload's popularity-only baseline: the eval AUC of each "
                        "candidate item's train click rate, what a ranker that reads no history reaches", ACCURACY)
FIDELITY_GAP = metric("fidelity_gap", "", NEITHER, "+.5f", "AUC of an integer backend minus its fake-quant twin's: does the QDQ emulation "
                      "predict the deployment?", ACCURACY, interval=True)
AUC_DELTA_EMBEDDINGS = metric("auc_delta_embeddings", "", HIGHER, "+.4f", "the share of the ΔAUC that the quantized tables alone cause",
                              ACCURACY, interval=True)
AUC_DELTA_MLP = metric("auc_delta_mlp", "", HIGHER, "+.4f", "the share of the ΔAUC that the quantized dense layers alone cause",
                       ACCURACY, interval=True)
SCORES_SATURATED = metric("scores_saturated", "", LOWER, ".1%", "the share of eval scores a probabilities model's clamp tied at a "
                          "bound (its sigmoid saturated, read without a trailing nn.Sigmoid in sight): ranking lost there", ACCURACY)
LOGLOSS = metric("logloss", "", LOWER, ".4f", "log loss over the eval samples", ACCURACY)
NE = metric("ne", "", LOWER, ".4f", "normalized entropy: log loss over the entropy of the base rate", ACCURACY)
NE_DELTA = metric("ne_delta", "", LOWER, "+.4f", "NE minus fp32's NE on the same eval samples, with a paired 95% interval over "
                  "the samples' differences, stratified by class as ΔAUC's bootstrap (bench.stats.paired_ne_acc_delta)", ACCURACY,
                  interval=True)
ACC = metric("acc", "", HIGHER, ".4f", "accuracy: the share of eval samples whose probability lies on their label's side of 0.5 "
             "(p >= 0.5 reads as a positive, as torchrec's accuracy that MLPerf's DLRMv3 reports)", ACCURACY)
ACC_DELTA = metric("acc_delta", "", HIGHER, "+.4f", "accuracy minus fp32's on the same eval samples, with a paired 95% interval "
                   "(as ne_delta's)", ACCURACY, interval=True)
GAUC = metric("gauc", "", HIGHER, ".4f", "grouped AUC: each request's AUC over its candidates, averaged over the requests that hold "
              "both labels (torchrec's GAUC, which MLPerf's DLRMv3 reports as its AUC); a workload served by request only", ACCURACY)
GAUC_DELTA = metric("gauc_delta", "", HIGHER, "+.4f", "grouped AUC minus fp32's on the same requests, with a paired 95% interval over "
                    "the requests' differences (bench.stats.paired_gauc_delta)", ACCURACY, interval=True)
DISTINCT_SCORES = metric("distinct_scores", "", NEITHER, ",d", "distinct score values over the eval samples: 1 is a constant output, "
                         "which fails the job (bench.pipeline.job.output_fault)", ACCURACY)
N_EVAL = metric("n_eval", "samples", NEITHER, ",d", "eval samples scored, each exactly once (a count check)", ACCURACY)

# -------------------------------------------------------------------------------------- timing
THROUGHPUT = metric("throughput", "samples/s", HIGHER, ",.0f", "rows (user-item pairs) per second of the model call, the median of the "
                    "trials, with a 95% interval over them (flagged, not hidden, when the trials vary too much)", TIMING, interval=True)
THROUGHPUT_TRIALS = metric("throughput_trials", "samples/s", HIGHER, ",.0f", "the throughput of every timing trial (raw samples)", TIMING)
SPEEDUP = metric("speedup", "x", HIGHER, ".2f", "throughput over fp32's, timed paired in the job's own process (alternating rounds), "
                 "with a 95% interval over the rounds and the spread between processes", TIMING, interval=True)
SPEEDUP_PROCESS_SD = metric("speedup_process_sd", "", NEITHER, ".3f", "the between-process spread of the log speedup measured on this "
                            "machine and carried into the speedup's interval (absent: the interval covers one process's rounds)", TIMING)
SPEEDUP_PROCESS_DF = metric("speedup_process_df", "", NEITHER, ".0f", "the degrees of freedom behind speedup_process_sd (the "
                            "calibration's processes and this machine's re-runs of identical jobs): the interval takes Student's t "
                            "at them", TIMING)
LATENCY_MS = metric("latency_ms", "ms", LOWER, ".2f", "per-call latency percentiles (p50, p90, p99) over every timed call, with a "
                    "distribution-free 95% interval of p99 (p99_lo, p99_hi)", TIMING)
LATENCY_CALLS = metric("latency_calls", "calls", NEITHER, ",d", "the timed calls behind the latency percentiles", TIMING)
LATENCY_P99_CALLS = metric("latency_p99_calls", "calls", NEITHER, ",d", "the calls at or above p99: how many make the tail", TIMING)
TOOLKIT = metric("toolkit", "", NEITHER, "s", "the quantization toolkit whose own runtime ran the backend (its pip extra; "
                 "docs/toolkits.md)", TIMING)
TIMED_INPUTS = metric("timed_inputs", "", NEITHER, "s", "what the timed calls of a runtime with its own input format took: "
                      "the batches converted to it before timing, as the KJTs are for the torch backends", TIMING)
CUDA_GRAPH_SPEEDUP = metric("cuda_graph_speedup", "x", HIGHER, ".2f", "with timing.cuda_graphs=true, on CUDA: the speedup over fp32 "
                            "with both calls captured in CUDA graphs and replayed (bench.measure.cuda_graph), timed paired as "
                            "`speedup` is; beside it, `speedup` is the same pair run eagerly", TIMING, interval=True)
CUDA_GRAPH_THROUGHPUT = metric("cuda_graph_throughput", "samples/s", HIGHER, ",.0f", "with timing.cuda_graphs=true, on CUDA: the "
                               "backend's samples/s with its call replayed from a CUDA graph (inputs copied into the graph's "
                               "buffers inside the timed call)", TIMING)
CUDA_GRAPH_NOTE = metric("cuda_graph_note", "", NEITHER, "s", "with timing.cuda_graphs=true: why no CUDA-graph figures were "
                         "taken (a CPU job, a runtime with its own inputs, a call that could not be recorded)", TIMING)
DENSE_PATH = metric("dense_path", "", NEITHER, "s", "the path the dense layers (MLP) ran: fp32, fp16/bf16 (torchrec's dense lowering, "
                    "the quantized backends' default on CUDA) or int8 (torch.ao's, their default on CPU, or torchao's)", TIMING)
RUNTIME_REFERENCE = metric("runtime_reference", "", NEITHER, "s", "the unquantized backend on the same runtime and export (a "
                           "toolkit's `_fp32` row, `compiled_fp32` for Neural Compressor): the quantization's part of the speedup "
                           "is over it", TIMING)
THREADS = metric("threads", "", NEITHER, "d", "torch intra-op threads the job ran with", TIMING)

# -------------------------------------------------------------------------------------- memory
EMBEDDING_BYTES = metric("embedding_bytes", "bytes", LOWER, ",.0f", "the stored embedding tables, at their real row bytes", MEMORY)
MODEL_BYTES = metric("model_bytes", "bytes", LOWER, ",.0f", "every storage the prepared model holds, each counted once", MEMORY)
PEAK_RSS_BYTES = metric("peak_rss_bytes", "bytes", LOWER, ",.0f", "the job's resident-memory high-water mark", MEMORY)
CUDA_PEAK_BYTES = metric("cuda_peak_bytes", "bytes", LOWER, ",.0f", "CUDA memory allocated at the job's peak (GPU jobs)", MEMORY)
PREPARE_SECONDS = metric("prepare_seconds", "s", LOWER, ".1f", "seconds the backend took to build its module from the fp32 model", MEMORY)

# ------------------------------------------------------------------------------------- serving
MAX_QPS = metric("max_qps", "QPS", HIGHER, ",.3g", "the highest Server target QPS LoadGen judged VALID under the p99 bound; the "
                 "bracket's bounds are the lowest INVALID and this", SERVING, interval=True)
SAMPLES_PER_S = metric("samples_per_s", "samples/s", HIGHER, ",.1f", "LoadGen samples (groups of pairs) per second completed", SERVING)
PAIRS_PER_S = metric("pairs_per_s", "pairs/s", HIGHER, ",.0f", "user-item pairs per second completed", SERVING)


ARROWS = {HIGHER: "↑", LOWER: "↓", NEITHER: ""}  # which way is better, as `--help` marks it
MEASURE_AGAIN = "measure_again"  # the metrics key of a record whose answer the host withheld (bench.record.reusable)


# The record's other keys under `metrics` that the results, the report and the gate read: structures and
# words rather than single figures of the vocabulary above (tests/test_metrics.py checks that every key
# they read is declared here or above).
RECORD_KEYS: dict[str, str] = {
    "access": "what the timed batches touched: unique ids per batch, rows touched, working set, last-level cache",
    "accuracy": "why a job has no accuracy (`performance only, ...`: untrained weights)",
    "auc_check": "serving: the accuracy-mode AUC against the offline one (equal, within tolerance, or not)",
    "auc_delta_layers_line": "attribute_layers=true: a ΔAUC past the gate's margin named by layer, one line",
    "auc_loadgen": "serving: the AUC of LoadGen's accuracy-mode run",
    "auc_offline": "serving: the offline AUC of the same backend on the same rows",
    "auc_shift": "serving: what dynamic batching moved the AUC by",
    "auc_tolerance": "serving: the tolerance auc_check read the shift against",
    "ne_loadgen": "serving: the NE of LoadGen's accuracy-mode run (torchrec's NE of the served probabilities)",
    "accuracy_loadgen": "serving: the accuracy of LoadGen's accuracy-mode run (p >= 0.5 on the positive side)",
    "gauc_loadgen": "serving: the grouped AUC of LoadGen's accuracy-mode run (each request's AUC, averaged: MLPerf DLRMv3's AUC)",
    "response_layout": "serving: how a response lays out its predictions (dlrm: pairs; dlrmv3: MLPerf DLRMv3's request)",
    "batch_dependent": "serving: whether a sample's score depends on its batch (activations quantized per batch)",
    "evidence": "serving: the runs agreeing on the max-QPS target (`VALID 2/3 at 410`)",
    "fidelity_twin": "the emulation twin the fidelity gap was measured against",
    "judgments": "serving: each target's verdict with its runs",
    "kernels": "the embedding and GEMM kernels one call ran (a dispatch mode's record)",
    "latency_samples_ms": "per-call latencies, [trial][call]",
    "loadgen_version": "serving: the LoadGen version that judged the runs",
    "lookups": "the table collections timed alone on the timed batches: ids and distinct rows per call, ns per id and per "
               "distinct row (bench.measure.lookups)",
    "measure_again": "why the job withheld its answer because the host disturbed it (a paired Server job whose rounds were "
                     "set aside has no ratio); a resumed sweep measures such a job again (bench.record.reusable)",
    "measured_again_after": "the record a resumed sweep measured this job again after: one that withheld its answer",
    "machine": "the reference GEMM and gather times (bench.measure.noise.reference_speed) at the start and end of the job "
               "(serving: with load and steal); a run-vs-run compare normalizes samples/s by them",
    "mlp_kept_fp32": "an int8 MLP's Linears kept fp32 by backend.mlp_wide=fp32 (a calibrated input range past "
                     "backend.mlp_wide_ratio times its median column's, and a score effect past WIDE_SCORE), each with why",
    "mlp_smoothed": "an int8 MLP's Linears smoothed by backend.mlp_wide=smooth (SmoothQuant's per-column smoothing: a "
                    "calibrated input range past backend.mlp_wide_ratio times its median column's, and a score effect "
                    "past WIDE_SCORE), each with why",
    "model_source": "where the weights came from: trained, cache or a checkpoint",
    "monotonic": "serving: whether the search's verdicts fell monotonically with the target",
    "noise": "timing noise: trial spread, ratio spread, load and steal over the timing",
    "offline_pairs_per_s": "serving: the Offline scenario's pairs per second",
    "offline_samples_per_s": "serving: the Offline scenario's samples per second",
    "page_faults_per_call": "minor page faults per timed call",
    "paired": "serving (serve.paired): the fp32 search run beside a Server job's, the ratio to it with its interval from both sides' tracking, every run and tracking run",
    "ps_cache_fraction": "ps_redis: the local cache's share of each table's rows",
    "ps_precision": "ps_redis: the precision of the rows it pulls (fp32, int8, int4)",
    "ps_twin": "ps_redis: the in-memory backend with the same rows and kernel",
    "query_set": "serving: the samples' sizes (pairs per sample)",
    "queue_estimate": "serving: the rate a simulated queue with the SUT's batcher holds under the bound",
    "roofline": "the embedding and GEMM traffic against the machine's rooflines",
    "rss_start_bytes": "resident memory when the job started",
    "score_read": "a probabilities model: how its scores were read (before its sigmoid, or the clamp)",
    "search_stop": "serving: why the QPS search stopped",
    "served": "measure=served: the serving function's median batch time at batch_size rows, the backend's and fp32's, "
              "each after its own batch and after the other's, and the packed batches' median pairs",
    "service_p99_ms": "serving: the SUT's own p99 batch time",
    "sharding": "a sharded run: its route, plan and ranks",
    "speedup_method": "how the speedup was timed: paired, unpaired or reference",
    "speedup_rounds": "the paired ABBA rounds' ratios",
    "speedup_stop": "why the paired rounds stopped: fixed, target or max_rounds",
    "stable": "whether the absolute throughput's timing was steady",
    "step_queries": "serving: queries per search step",
    "step_tells": "serving: what each search step's run said",
    "steps": "serving: the QPS search's steps, each with its verdict and percentiles",
    "table_precisions": "each embedding table's stored weight type and its lookup: pooled (an EmbeddingBagCollection's) "
                        "or sequence (an EmbeddingCollection's, one row per id)",
    "table_rows": "rows of each embedding table",
    "threads_used": "serving: workers, torch threads and LoadGen issue threads against the cores",
    "throughput_all_threads": "the throughput with every thread the machine has",
    "timing_calls_per_batch": "timed calls per distinct batch",
    "timing_distinct_batches": "distinct batches the timing cycled through",
    "timing_pool": "the timing pool: batches, samples, calls timed, passes",
    "timing_setting": "the timing's thread count and clock",
    "unstable_reason": "why the absolute throughput's timing was not steady",
    "workload_info": "what the workload said of its data (malformed lines skipped)",
}


def describe(width: int = 110) -> list[str]:
    """The vocabulary for `--help`: by stage, each metric with its unit and which way is better
    (`name± (unit ↑)`: ± has a 95% interval, ↑ higher is better, ↓ lower is better), wrapped at `width`."""
    stages: dict[str, list[str]] = {}
    for m in METRICS.values():
        mark = " ".join(part for part in (m.unit, ARROWS[m.better]) if part)
        stages.setdefault(m.stage, []).append(m.name + ("±" if m.interval else "") + (f" ({mark})" if mark else ""))
    lines = []
    for stage, names in stages.items():
        line = f"  {stage}:"
        for n, name in enumerate(names):
            piece = f" {name}" + ("," if n < len(names) - 1 else "")
            if len(line) + len(piece) > width:
                lines.append(line)
                line = "   "
            line += piece
        lines.append(line)
    return lines
