"""Each int8 candidate Linear of a trained fp32 model, read as the `backend.mlp_wide` rule reads it
(bench.backends.linear): its input's range over its median column's on the calibration batches, and how far the
model's scores move when that layer alone runs on int8-rounded operands (RMS over the fp32 scores' SD). The
rule keeps a layer fp32 when both are past their bounds (`backend.mlp_wide_ratio`, `WIDE_SCORE`).

    python benchmarks/scripts/wide_layers.py +zoo=din cache_dir=/work/cache-zoodef
    python benchmarks/scripts/wide_layers.py model=hstu +preset=dlrmv3 workload.history_length=32 workload.candidates=8

Overrides are the harness's own (the model is trained, or read from cache_dir, as a job would); prints one row a layer.
"""

from __future__ import annotations

import copy
import sys

import torch

from bench.backends.linear import WIDE_RATIO, WIDE_SCORE, column_ratio, input_columns, quantized_slots, score_effects, slot_name
from bench.config.compose import compose
from bench.pipeline.shared import SharedWork


def rows(overrides: list[str]) -> list[tuple[str, float, float]]:
    """(layer, range ratio, score effect) of every Linear an int8 MLP quantizes (the output layers left out)."""
    cfg = compose(["backend=fp32", *overrides])
    work, device = SharedWork(), torch.device("cpu")
    workload = work.workload(cfg)
    model = copy.deepcopy(work.model(cfg, workload).module).eval()
    batches = work.split_batches(cfg, workload, "calibration")
    slots = quantized_slots(model, "fp32")
    ranges = input_columns(model, slots, batches, device)
    effects = score_effects(model, slots, batches, device)
    return [(name, column_ratio(*ranges[name]), effects[name]) for name in (slot_name(model, p, n) for p, n in slots)]


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    print(f"{'layer':50s} {'range ratio':>11s} {'score effect':>12s}  kept fp32 (ratio > {WIDE_RATIO:g} and effect > {WIDE_SCORE:g})")
    for name, ratio, effect in rows(argv):
        print(f"{name:50s} {ratio:11.1f} {effect:12.4f}  {'yes' if ratio > WIDE_RATIO and effect > WIDE_SCORE else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
