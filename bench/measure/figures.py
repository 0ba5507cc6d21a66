"""What every route measures of a job, typed, and the one function that turns it into a record's
metrics (`JobFigures.metrics`): the unsharded job, the sharded job and a serving scenario fill the
same fields, so their records name and shape the shared figures alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from bench.metrics import (
    CUDA_PEAK_BYTES,
    EMBEDDING_BYTES,
    LATENCY_CALLS,
    LATENCY_MS,
    LATENCY_P99_CALLS,
    MODEL_BYTES,
    PEAK_RSS_BYTES,
    THREADS,
    THROUGHPUT,
    THROUGHPUT_TRIALS,
    hi,
    lo,
)

SAMPLE = "one row (user-item pair) of the workload"  # what a sample counts in timed throughput


@dataclass
class Timed:
    """The timed calls: the throughput (median of trials) and the raw trials and latencies behind it."""

    throughput: float
    trial_throughputs: list[float]
    latency_ms: dict[str, float]  # p50, p90, p99
    latency_samples_ms: list  # [trial][call]
    throughput_interval: Optional[tuple[float, float]] = None  # 95%, over the trials (and processes, when measured)
    calls: Optional[int] = None  # the timed calls behind the latency percentiles
    p99_calls: Optional[int] = None  # how many of them make the p99 tail


@dataclass
class Held:
    """What the prepared model holds, and the job's memory at its peak."""

    embedding_bytes: int
    model_bytes: int
    peak_rss_bytes: Optional[int] = None
    peak_rss_scope: Optional[str] = None
    cuda_peak_bytes: Optional[int] = None


@dataclass
class JobFigures:
    held: Held
    threads: int
    model_source: Optional[str]
    workload_info: dict[str, Any]
    timed: Optional[Timed] = None  # None: the route times otherwise (a serving scenario's LoadGen runs)
    extra: dict[str, Any] = field(default_factory=dict)  # the route's own figures, by their vocabulary names

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            EMBEDDING_BYTES: self.held.embedding_bytes,
            MODEL_BYTES: self.held.model_bytes,
            THREADS: self.threads,
            "model_source": self.model_source,
            "workload_info": self.workload_info,
        }
        if self.held.peak_rss_bytes is not None:
            out.update({PEAK_RSS_BYTES: self.held.peak_rss_bytes, "peak_rss_scope": self.held.peak_rss_scope,
                        CUDA_PEAK_BYTES: self.held.cuda_peak_bytes})
        if self.timed is not None:
            out.update({THROUGHPUT: self.timed.throughput, THROUGHPUT_TRIALS: self.timed.trial_throughputs,
                        LATENCY_MS: self.timed.latency_ms, "latency_samples_ms": self.timed.latency_samples_ms, "sample": SAMPLE})
            if self.timed.throughput_interval is not None:
                out[lo(THROUGHPUT)], out[hi(THROUGHPUT)] = self.timed.throughput_interval
            if self.timed.calls is not None:
                out.update({LATENCY_CALLS: self.timed.calls, LATENCY_P99_CALLS: self.timed.p99_calls})
        return {**out, **self.extra}
