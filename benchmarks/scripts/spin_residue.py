"""What one module's leftover work between calls costs the next call: stage 3's served batch times (bench.serve.path),
each backend beside fp32, split by what ran just before (its own previous batch, or the other module's on the same
samples). ONNX Runtime's intra-op threads spin after a call by default; the harness stops them when a call returns
(`session.force_spinning_stop`, bench.backends.ort_runtime): an ONNX Runtime backend is timed both ways beside fp32,
and each form alone, every batch twice (does stopping the spin cost ONNX Runtime its own speed?); then each form
called back to back on inputs built beforehand, nothing between the calls, as a paired offline job times it.

    python benchmarks/scripts/spin_residue.py cache_dir=/work/cache-45 [--backends onnxruntime_int8_static openvino_int8]
        [--sizes 1024 4096] [--threads 2] [--batches 16] [--rounds 3]
Overrides (key=value) go before --backends, which takes every word after it. Prints, per backend, the medians over
rounds of: the candidate's and fp32's ms after their own batch and after the other's, the residue (the worse of the
two slow-downs), and the ratio to fp32 from own-order batches beside the ratio from both orders pooled; then, per
ONNX Runtime backend and size, the median ms per back-to-back call stopped and spinning (blocks of calls alternating,
a quiet 0.1 s before each, so that neither form's spin reaches into the other's block).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.backends.ort_runtime import OrtRunner
from bench.batch import take_rows
from bench.serve.path import ServedTimes, paired_served_times

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts' shared setup beside them (serving_setup.py)
from serving_setup import serving_bench, unknown_backend  # noqa: E402

DEFAULT = ["onnxruntime_int8_static", "onnxruntime_fp32", "openvino_int8", "inc_int8_static", "compiled_fp32", "int8_tbe"]


def spinning(module):
    """The same ONNX Runtime module with ONNX Runtime's default (`backend.spin_between_calls=true`): its threads spin
    on after each call."""
    twin = copy.copy(module)
    twin.runner = OrtRunner(module.runner.model_bytes, spin_between_calls=True)
    return twin


def back_to_back(forms: dict, inputs: tuple, blocks: int, calls: int) -> dict[str, float]:
    """{form: median ms per call} over `blocks` blocks of `calls` calls each, the forms' blocks alternating."""
    found: dict[str, list[float]] = {label: [] for label in forms}
    for b in range(blocks):
        for label, module in (forms.items() if b % 2 == 0 else reversed(forms.items())):
            time.sleep(0.1)  # the other form's spin ends before this block starts
            module(*inputs)
            start = time.perf_counter()
            for _ in range(calls):
                module(*inputs)
            found[label].append((time.perf_counter() - start) / calls * 1000)
    return {label: float(np.median(v)) for label, v in found.items()}


def row(label: str, times: list[ServedTimes]) -> str:
    med = {k: float(np.median([getattr(t, k) for t in times])) for k in ("ms", "fp32_ms", "ms_after_other", "fp32_ms_after_other")}
    pooled = (med["fp32_ms"] + med["fp32_ms_after_other"]) / (med["ms"] + med["ms_after_other"])
    return (f"{label:40s} {med['ms']:7.3f} {med['ms_after_other']:7.3f} {med['fp32_ms']:7.3f} {med['fp32_ms_after_other']:7.3f} "
            f"{float(np.median([t.residue() for t in times])):6.2f}x {med['fp32_ms'] / med['ms']:6.2f}x {pooled:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=DEFAULT)
    parser.add_argument("--sizes", nargs="+", type=int, default=[1024, 4096])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if unknown_backend(args.backends):
        parser.error(unknown_backend(args.backends))
    torch.set_num_threads(args.threads)
    bench = serving_bench(["fp32", *args.backends], max(args.sizes), args.overrides, args.threads)
    device, queries, reference = torch.device("cpu"), bench.queries, bench.modules["fp32"]
    pairs: dict[str, tuple] = {}  # label -> (candidate module, reference module)
    offline: dict[str, tuple] = {}  # an ONNX Runtime backend -> (its backend, its module)
    for name in args.backends:
        module = bench.modules[name]
        pairs[name] = (module, reference)
        if isinstance(getattr(module, "runner", None), OrtRunner):
            alone = spinning(module)
            pairs[f"{name} (spinning on)"] = (spinning(module), reference)
            pairs[f"{name} alone"] = (module, module)
            pairs[f"{name} alone, spinning on"] = (alone, alone)
            offline[name] = (bench.backends[name], module)
    found: dict[tuple[int, str], list[ServedTimes]] = {(size, label): [] for size in args.sizes for label in pairs}
    for r in range(args.rounds):  # rounds interleave the backends and sizes, so the host's speed phases hit them alike
        for size, label in found:
            candidate, ref = pairs[label]
            found[(size, label)].append(paired_served_times(candidate, ref, queries, device, size, batches=args.batches, seed=r))
    print(f"{args.threads} threads, {args.batches} batches x {args.rounds} rounds; median ms per served batch after its own "
          "batch / after the other's ('alone': the module is both, each batch twice)")
    print(f"{'candidate':40s} {'own':>7s} {'after':>7s} {'fp32':>7s} {'after':>7s} {'residue':>7s} {'ratio':>7s} {'pooled':>7s}")
    for size in args.sizes:
        print(f"batcher {size} rows")
        for label in pairs:
            print(row(label, found[(size, label)]))
    if offline:
        print(f"back to back, {args.rounds * 4} blocks of calls: median ms per call, stopped / spinning")
    for name, (backend, module) in offline.items():
        for size in args.sizes:
            batch = take_rows(bench.eval_batches[0], torch.arange(min(size, len(bench.eval_batches[0]))))
            inputs = backend.timed_inputs(module, [batch.to(device).model_inputs()])[0]
            got = back_to_back({"stopped": module, "spinning": spinning(module)}, inputs, args.rounds * 4, max(10, 100_000 // size))
            print(f"{name:28s} {len(batch):5d} rows {got['stopped']:8.3f} {got['spinning']:8.3f}  stopped/spinning {got['stopped'] / got['spinning']:.2f}x")


if __name__ == "__main__":
    main()
