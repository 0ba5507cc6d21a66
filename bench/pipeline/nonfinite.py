"""Non-finite scores, root-caused: the error names the first layer whose output goes NaN or infinite.

A backend whose scores hold a NaN or an infinity fails its job (the ΔAUC would mean nothing). Which layer it
starts at is found as the per-layer attribution (bench.pipeline.layers) looks for a ΔAUC's layer, by comparing
with fp32, here on the failing batch itself: the first eval batch with a non-finite score is run once more through
the prepared module and through the fp32 model, each layer's output kept (`Backend.layer_outputs`: a torch
module's submodules, a toolkit runtime's graph ops), and the first layer whose output is non-finite while its
inputs are finite is named, with what fp32 computed there:

    model produced 210 non-finite scores (NaN or inf) on the eval split; it starts at `/model/Log` (Log) on eval
    batch 3: 210 of 4096 values non-finite, its inputs finite; fp32's output there is finite (largest |value| 16.1)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from bench.backends.backend import Backend
from bench.backends.layer_outputs import LayerOutput, first_non_finite
from bench.batch import Batch


def failing_batch(batches: Sequence[Batch], logits: np.ndarray) -> tuple[int, Batch]:
    """The first batch (its index, itself) whose scores hold a NaN or an infinity; the scores are the batches' in order."""
    start = 0
    for i, batch in enumerate(batches):
        if not np.all(np.isfinite(logits[start:start + len(batch)])):
            return i, batch
        start += len(batch)
    raise ValueError("no batch holds a non-finite score")


def where_it_starts(candidate: Sequence[LayerOutput], reference: Sequence[LayerOutput], batch_index: int) -> str:
    """`it starts at `name` (op) on eval batch N: ...; fp32's output there is ...`, from the two runs' layer outputs."""
    first = first_non_finite(candidate)
    if first is None:
        return f"run again on eval batch {batch_index}, no layer's output was non-finite (the failure did not repeat)"
    inputs = "its inputs finite" if first.inputs_finite else "its inputs already non-finite (no layer with finite inputs gave it)"
    fp32 = {o.name: o for o in reference}.get(first.name)
    if fp32 is None:
        there = "fp32 has no layer of that name (the backend added it)"
    elif fp32.bad:
        there = f"fp32's output there is non-finite too ({fp32.bad} values): the model itself, not the backend"
    else:
        there = f"fp32's output there is finite (largest |value| {fp32.max_abs:.4g})"
    return f"it starts at {first.text()} on eval batch {batch_index}: {first.bad} of {first.size} values non-finite, {inputs}; {there}"


def explain(head: str, backend: Backend, prepared: nn.Module, fp32: nn.Module, calibration: Sequence[Batch], batches: Sequence[Batch],
            logits: np.ndarray, device: torch.device) -> str:
    """`head` (the count of non-finite scores) and where they start. Finding the layer is extra: when it fails, the
    line says why and the job still fails on the scores."""
    try:
        index, batch = failing_batch(batches, logits)
        candidate, reference = backend.layer_outputs(prepared, fp32, calibration, batch.to(device))
        return f"{head}; {where_it_starts(candidate, reference, index)}"
    except Exception as exc:  # noqa: BLE001 - the scores fail the job either way
        return f"{head}; the layer it starts at was not found ({type(exc).__name__}: {exc})"
