"""Where does the paired speedup's variance live? Kalibera & Jones's initial experiment, on this machine.

A paired speedup is repeated at three levels: processes (what a re-run of the sweep starts anew:
address-space layout, allocator state, page placement, what else runs), builds inside a process
(fresh copies of both modules: new allocations, new placement), and rounds inside a build (the
ABBA rounds the harness bootstraps over). This script runs `--processes` fresh processes per
timing setting; each builds the reference (fp32) and the candidate once, then times `--builds`
fresh copies of the pair for `--rounds` rounds each. It prints the variance of log(speedup) at
each level (nested random effects, ANOVA estimators) and the between-process standard deviation
that an interval drawn from rounds alone leaves out.

    python benchmarks/scripts/variance_levels.py [--cache-dir DIR] [--settings 2:wall,1:wall,1:thread_cpu] \
        [--backend int8_tbe] [--batch-size 1024] [--processes 4] [--builds 3] [--rounds 10] [--half-seconds 0.05] \
        [--fixed-layout]

`--fixed-layout` starts every process with address-space randomization off (`setarch -R`, Linux): where
the process level's variance shrinks with it, it lives in where the process placed its libraries and
generated kernels (docs/measuring.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def child(args: argparse.Namespace) -> None:
    """One process: build the pair once, time `builds` fresh copies; print per-round log ratios as JSON."""
    sys.path.insert(0, str(REPO))
    import torch

    from bench import registry
    from bench.config.compose import compose
    from bench.hardware import prepare_process
    from bench.measure.timing import CLOCKS, time_paired
    from bench.pipeline.job import backend_config
    from bench.pipeline.shared import SharedWork

    threads, clock = args.setting.split(":")
    weights = ["model.weights=random"] if args.random_weights else []
    cfg = compose([f"backend={args.backend}", f"batch_size={args.batch_size}", f"cache_dir={args.cache_dir}", *weights])
    prepare_process(cfg.device, int(threads))
    device, shared = torch.device("cpu"), SharedWork()
    workload = shared.workload(cfg)
    model = shared.model(cfg, workload)
    backend = registry.get("backend", args.backend).factory(cfg.backend)
    prepared = shared.prepared(cfg, backend, model, workload, device)
    ref_backend = registry.get("backend", "fp32").factory(backend_config({"name": "fp32"}))
    reference = shared.reference(cfg, ref_backend, model, device)
    inputs = shared.timing_inputs(cfg, workload, device)
    # Builds are made up front and visited in turn, one ABBA pair of rounds per visit, so a slow drift of
    # the machine (other work coming and going) spreads over every build alike and does not pass for a
    # difference between builds.
    pairs = [(copy.deepcopy(prepared), copy.deepcopy(reference)) for _ in range(args.builds)]
    builds = [{"log_ratios": [], "log_throughputs": [], "cv": []} for _ in pairs]
    offset = 0
    for _ in range(args.rounds // 2):
        for b, (cand, ref) in enumerate(pairs):
            window = inputs[offset:] + inputs[:offset]  # walk on through the pool across visits
            paired = time_paired(cand, ref, window, cfg.batch_size, device, warmup_batches=1, trials=2,
                                 batches_per_trial=1, min_trial_seconds=args.half_seconds, clock=CLOCKS[clock], max_rounds=2)
            offset = (offset + 1 + 2 * len(paired.candidate.latency_ms[0])) % len(inputs)
            builds[b]["log_ratios"] += [float(np.log(r)) for r in paired.ratios]
            builds[b]["log_throughputs"] += [float(np.log(t)) for t in paired.candidate.trial_throughput]
            builds[b]["cv"] += [float(np.std(t) / np.mean(t)) for t in paired.candidate.latency_ms]
    for b in builds:
        b["call_cv"] = float(np.median(b.pop("cv")))
    print(json.dumps({"setting": args.setting, "builds": builds}))


def components(y: np.ndarray) -> dict[str, float]:
    """Nested ANOVA variance components of y[process, build, round] (negative estimates read as 0)."""
    p, b, r = y.shape
    build_means, proc_means = y.mean(axis=2), y.mean(axis=(1, 2))
    ms_round = ((y - build_means[..., None]) ** 2).sum() / (p * b * (r - 1))
    ms_build = r * ((build_means - proc_means[:, None]) ** 2).sum() / (p * (b - 1)) if b > 1 else float("nan")
    ms_proc = b * r * ((proc_means - proc_means.mean()) ** 2).sum() / (p - 1)
    var_round = ms_round
    var_build = max(0.0, (ms_build - ms_round) / r) if b > 1 else 0.0
    var_proc = max(0.0, (ms_proc - (ms_build if b > 1 else ms_round)) / (b * r))
    return {"round": var_round, "build": var_build, "process": var_proc,
            "within_process_se_of_mean": float(np.sqrt(ms_round / (b * r))),
            "process_mean_sd": float(proc_means.std(ddof=1)), "speedup": float(np.exp(y.mean()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", default=str(REPO / ".cache"))
    parser.add_argument("--settings", default="2:wall,1:wall,1:thread_cpu", help="threads:clock, comma-separated")
    parser.add_argument("--backend", default="int8_tbe")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--half-seconds", type=float, default=0.05)
    parser.add_argument("--random-weights", action="store_true", help="time an untrained model (no trained model needed)")
    parser.add_argument("--fixed-layout", action="store_true", help="address-space randomization off in every process (setarch -R)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--setting", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help="also write the raw per-round figures here (JSON)")
    args = parser.parse_args()
    if args.child:
        return child(args)
    raw: dict[str, list] = {s: [] for s in args.settings.split(",")}
    start = time.perf_counter()
    for i in range(args.processes):  # settings interleaved, so slow drifts of the machine hit each alike
        for setting in raw:
            cmd = [sys.executable, __file__, "--child", "--setting", setting, *sys.argv[1:]]
            if args.fixed_layout:
                cmd = ["setarch", platform.machine(), "--addr-no-randomize", *cmd]
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            if done.returncode:
                sys.exit(f"child {setting} failed:\n{done.stderr[-3000:]}")
            raw[setting].append(json.loads(done.stdout.strip().splitlines()[-1])["builds"])
    if args.out:
        args.out.write_text(json.dumps(raw))
    print(f"{args.backend} vs fp32 at batch {args.batch_size}: {args.processes} processes x {args.builds} builds x "
          f"{args.rounds} rounds, halves of at least {args.half_seconds} s; {time.perf_counter() - start:.0f} s")
    print(f"{'setting':>14} {'speedup':>8} {'sd round':>9} {'sd build':>9} {'sd process':>11} {'sd proc means':>14} "
          f"{'se within':>10} {'call cv':>8}")
    for figure, field in (("speedup", "log_ratios"), ("throughput (candidate)", "log_throughputs")):
        print(f"{figure}:")
        for setting, procs in raw.items():
            y = np.array([[b[field] for b in builds] for builds in procs])
            c = components(y)
            call_cv = np.median([b["call_cv"] for builds in procs for b in builds])
            print(f"{setting:>14} {c['speedup']:8.4g} {np.sqrt(c['round']):9.2%} {np.sqrt(c['build']):9.2%} "
                  f"{np.sqrt(c['process']):11.2%} {c['process_mean_sd']:14.2%} {c['within_process_se_of_mean']:10.2%} {call_cv:8.1%}")


if __name__ == "__main__":
    main()
