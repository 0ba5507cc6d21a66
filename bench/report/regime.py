"""The regime a GPU job ran in, said in the report: a batch time nearly flat across batch sizes means the GPU
mostly waited on kernel launches, so a speedup there measures launches, not bytes.

On a GPU a DLRM call is a few dozen small kernels; at small batches their launches, not the memory traffic,
set the time. Measured on an H100 before the dense path moved to fp16: eager fp32 took 2.55 ms a batch at 256
rows and about 2.25 ms at 4096 (16x the rows in less time). A row of the report whose p50 batch time grows
less than `FLAT`x while its batch grows at least `MIN_SPAN`x is named launch-bound.
"""

from __future__ import annotations

import pandas as pd

FLAT = 2.0  # batch time grown by less than this ...
MIN_SPAN = 8  # ... over batch sizes at least this many times apart: launch-bound


def regime_sentences(g: pd.DataFrame) -> list[str]:
    """One reading note per CUDA backend whose batch time is nearly flat across its batch sizes."""
    needed = {"status", "device", "backend", "batch_size", "latency_p50_ms"}
    if not needed <= set(g.columns):
        return []
    rows = g[(g["status"] == "ok") & (g["device"] == "cuda") & g["latency_p50_ms"].notna()]
    out = []
    for backend, b in rows.groupby("backend", sort=False):
        b = b.sort_values("batch_size")
        small, large = b.iloc[0], b.iloc[-1]
        span = large["batch_size"] / small["batch_size"]
        growth = large["latency_p50_ms"] / small["latency_p50_ms"] if small["latency_p50_ms"] > 0 else float("nan")
        if span >= MIN_SPAN and growth < FLAT:
            out.append(f"**{backend}** on cuda is launch-bound: its batch time is nearly flat across batch sizes (p50 "
                       f"{small['latency_p50_ms']:.2f} ms at {small['batch_size']:,}, {large['latency_p50_ms']:.2f} ms at "
                       f"{large['batch_size']:,}: {growth:.1f}x the time for {span:.0f}x the rows), so the GPU mostly waits on "
                       "kernel launches and a speedup here measures launches, not bytes; a deployment captures the call in a "
                       "CUDA graph (or torch.compile with mode=\"reduce-overhead\") against that.")
    return out
