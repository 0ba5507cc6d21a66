"""The default model's fp32 eval AUC against training samples, for one training recipe.

Trains the model once, as `bench.models.train.train` does, and scores the whole eval split whenever
the samples seen reach one of `--at` (the learning rates are constant, so the weights after n samples
of this run are those of a run of n samples). Prints one row per point: samples, the training's own
seconds up to there (wall and process CPU, the scoring left out) and the eval AUC.

    python benchmarks/scripts/train_curve.py [overrides...] --batch-size 2048 --dense-lr 3e-3 \\
        --sparse-lr 0.2 --at 131072 262144 524288 1048576

(the harness's overrides first: `--at` takes every number that follows it)

Overrides are the harness's own (`workload.train_samples=...`); the model and training keys are
taken from the composed config, then `--batch-size`, `--dense-lr`, `--sparse-lr` replace theirs.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from bench.config.compose import compose
from bench.measure.accuracy import accuracy_metrics, score
from bench.metrics import AUC
from bench.models.build import build_model
from bench.models.train import train
from bench.pipeline.shared import SharedWork


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--dense-lr", type=float, default=None)
    parser.add_argument("--sparse-lr", type=float, default=None)
    parser.add_argument("--at", type=int, nargs="+", required=True, help="sample counts to score the model at")
    args, overrides = parser.parse_known_args()
    cfg = compose(overrides)
    given = {"batch_size": args.batch_size, "dense_lr": args.dense_lr, "sparse_lr": args.sparse_lr}
    recipe = dataclasses.replace(cfg.model.train, samples=max(args.at), progress=False,
                                 **{k: v for k, v in given.items() if v is not None})
    shared = SharedWork()
    workload = shared.workload(cfg)
    eval_batches = shared.split_batches(cfg, workload, "eval")
    n_eval = workload.num_samples("eval")
    torch.manual_seed(cfg.seed)  # the initial weights, as bench.models.train.trained_model draws them
    model = build_model(cfg.model, workload.tables, workload.num_dense, sequences=workload.sequences)
    print(f"recipe: batch_size={recipe.batch_size} dense_lr={recipe.dense_lr} sparse_lr={recipe.sparse_lr}; "
          f"threads={torch.get_num_threads()}; eval {n_eval} samples")
    print("| samples | train wall s | train CPU s | fp32 eval AUC |\n| ---: | ---: | ---: | ---: |", flush=True)
    points = sorted(args.at)
    spent = {"wall": 0.0, "cpu": 0.0}
    mark = {"wall": time.perf_counter(), "cpu": time.process_time()}

    def after_step(samples: int) -> None:
        if not points or samples < points[0]:
            return
        spent["wall"] += time.perf_counter() - mark["wall"]
        spent["cpu"] += time.process_time() - mark["cpu"]
        while points and samples >= points[0]:
            points.pop(0)
        labels, logits = score(model, eval_batches, torch.device("cpu"), expected=n_eval)
        auc = accuracy_metrics(labels, logits)[AUC]
        print(f"| {samples:,} | {spent['wall']:.1f} | {spent['cpu']:.1f} | {auc:.4f} |", flush=True)
        mark["wall"], mark["cpu"] = time.perf_counter(), time.process_time()

    train(model, workload, recipe, after_step=after_step)


if __name__ == "__main__":
    main()
