"""Does the runner's timing loop cost throughput? Runner vs a bare loop on the same module.

The runner times each model call on its own (per-call clock reads, raw samples kept). A bare loop
calls the same prepared module on the same prepared batches with one clock read around the whole
trial. Both are interleaved round by round so that machine noise hits them alike; the script
prints the median throughput of each and their ratio (goal: runner / bare >= 0.97).

    python benchmarks/scripts/runner_overhead.py [--rounds 15] [--backend fp32] [--batch-size 2048]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench import registry
from bench.config.compose import compose
from bench.measure.timing import loop_options, time_module
from bench.runner import Session, run_one


def bare_loop(module, inputs, batch_size: int, batches: int) -> float:
    with torch.inference_mode():
        start = time.perf_counter()
        for j in range(batches):
            module(*inputs[j % len(inputs)])
        return batch_size * batches / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--backend", default="fp32")
    parser.add_argument("--batch-size", type=int, default=2048)
    args = parser.parse_args()

    cfg = compose([f"backend={args.backend}", f"batch_size={args.batch_size}"])
    session = Session()
    record = run_one(cfg, session)  # trains or loads the model, prepares the backend, fills the shared work
    assert record.status == "ok", record.error
    device = torch.device("cpu")
    work = session.work
    workload = work.workload(cfg)
    backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)
    module = work.prepared(cfg, backend, work.model(cfg, workload), workload, device)  # held: not prepared again
    inputs = work.timing_inputs(cfg, workload, device)
    t = loop_options(cfg.timing)

    runner_tp, bare_tp = [], []
    for _ in range(args.rounds):
        timing = time_module(module, inputs, cfg.batch_size, device, **{**t, "trials": 1})
        runner_tp.append(timing.throughput)
        bare_tp.append(bare_loop(module, inputs, cfg.batch_size, len(timing.latency_ms[0])))  # the same number of calls
    r, b = statistics.median(runner_tp), statistics.median(bare_tp)
    print(f"backend {args.backend}, batch {cfg.batch_size}, trials of >= {cfg.timing.min_trial_seconds} s, {args.rounds} interleaved rounds, {torch.get_num_threads()} threads")
    print(f"runner (per-call timing)  median {r:,.0f} samples/s")
    print(f"bare loop                 median {b:,.0f} samples/s")
    print(f"ratio runner / bare       {r / b:.3f}  (goal >= 0.97)")


if __name__ == "__main__":
    main()
