"""The regime a GPU job ran in, said in the report: a batch time nearly flat across batch sizes means the GPU
mostly waited on kernel launches, so a speedup there measures launches, not bytes.

On a GPU a DLRM call is a few dozen small kernels; at small batches their launches, not the memory traffic,
set the time. Measured on an H100 before the dense path moved to fp16: eager fp32 took 2.55 ms a batch at 256
rows and about 2.25 ms at 4096 (16x the rows in less time). A row of the report whose p50 batch time grows
less than `FLAT`x while its batch grows at least `MIN_SPAN`x is named launch-bound. With `timing.cuda_graphs=true`
each CUDA row also carries its speedup with both calls replayed from CUDA graphs; the note gives both numbers.
"""

from __future__ import annotations

import pandas as pd

from bench.metrics import CUDA_GRAPH_NOTE, CUDA_GRAPH_SPEEDUP, SPEEDUP, hi, lo

FLAT = 2.0  # batch time grown by less than this ...
MIN_SPAN = 8  # ... over batch sizes at least this many times apart: launch-bound


def regime_sentences(g: pd.DataFrame) -> list[str]:
    """One reading note per CUDA backend whose batch time is nearly flat across its batch sizes."""
    needed = {"status", "device", "backend", "batch_size", "latency_p50_ms"}
    if not needed <= set(g.columns):
        return []
    rows = g[(g["status"] == "ok") & (g["device"] == "cuda") & g["latency_p50_ms"].notna()]
    out, bound = [], set()
    graphed = _graphed(rows)
    for backend, b in rows.groupby("backend", sort=False):
        b = b.sort_values("batch_size")
        small, large = b.iloc[0], b.iloc[-1]
        span = large["batch_size"] / small["batch_size"]
        growth = large["latency_p50_ms"] / small["latency_p50_ms"] if small["latency_p50_ms"] > 0 else float("nan")
        if span >= MIN_SPAN and growth < FLAT:
            bound.add(backend)
            out.append(f"**{backend}** on cuda is launch-bound: its batch time is nearly flat across batch sizes (p50 "
                       f"{small['latency_p50_ms']:.2f} ms at {small['batch_size']:,}, {large['latency_p50_ms']:.2f} ms at "
                       f"{large['batch_size']:,}: {growth:.1f}x the time for {span:.0f}x the rows), so the GPU mostly waits on "
                       "kernel launches and a speedup here measures launches, not bytes; a deployment captures the call in a "
                       "CUDA graph (or torch.compile with mode=\"reduce-overhead\") against that"
                       + (f": {graphed[backend]}." if backend in graphed else "; timing.cuda_graphs=true times it so."))
    return out + [f"**{b}** on cuda with CUDA graphs: {text}." for b, text in graphed.items() if b not in bound]


def _graphed(rows: pd.DataFrame) -> dict[str, str]:
    """Per backend, its rows' speedups replayed from CUDA graphs beside the eager ones (or why there are none)."""
    out: dict[str, str] = {}
    if CUDA_GRAPH_SPEEDUP not in rows.columns and CUDA_GRAPH_NOTE not in rows.columns:
        return out
    for backend, b in rows.groupby("backend", sort=False):
        parts = []
        for _, r in b.sort_values("batch_size").iterrows():
            x = r.get(CUDA_GRAPH_SPEEDUP)
            if pd.notna(x):
                eager = f"{r[SPEEDUP]:.2f}x eager" if pd.notna(r.get(SPEEDUP)) else "no eager speedup"
                parts.append(f"{x:.2f}x [{r[lo(CUDA_GRAPH_SPEEDUP)]:.2f}, {r[hi(CUDA_GRAPH_SPEEDUP)]:.2f}] graphed against "
                             f"{eager} at {int(r['batch_size']):,}")
            elif isinstance(r.get(CUDA_GRAPH_NOTE), str):
                parts.append(f"none at {int(r['batch_size']):,} ({r[CUDA_GRAPH_NOTE]})")
        if parts:
            out[backend] = "; ".join(parts)
    return out
