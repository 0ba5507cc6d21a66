"""What the serving benchmark scripts share (spin_residue, serve_batch_breakdown, served_beside_bursts, stage3_vs_server):
their `--backends` check, and each backend's module prepared as a serving job of the command line's overrides
would prepare it, with the query set that job cuts. Hydra composes their configs here, outside the harness's
serving layer (bench.serve), which only measures.

A script imports it beside itself: `sys.path.insert(0, <this folder>)`, then `from serving_setup import ...`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from bench import registry
from bench.backends.backend import Backend
from bench.batch import Batch
from bench.config.compose import compose
from bench.pipeline.shared import SharedWork
from bench.serve.queries import QuerySet


def unknown_backend(names: list[str]) -> Optional[str]:
    """The scripts' check of their `--backends`, which takes every word after it (so an override given after it
    lands there): the message for the first name that is no backend, or None."""
    bad = next((name for name in names if name not in registry.names("backend")), None)
    return None if bad is None else f"unknown backend {bad!r}: name backends after --backends and overrides (key=value) before it"


@dataclass
class ServingBench:
    """What the scripts time served batches on: each backend and its prepared module (on the CPU), the query set a
    serving job cuts and the eval split's batches."""

    backends: dict[str, Backend]
    modules: dict[str, nn.Module]
    queries: QuerySet
    eval_batches: list[Batch]


def serving_bench(names: list[str], batch_size: int, overrides: list[str], threads: Optional[int] = None) -> ServingBench:
    """`names`' modules prepared as a serving job of `overrides` at `batch_size` (and `threads`) would prepare them."""
    work, device = SharedWork(), torch.device("cpu")
    backends, modules, queries, batches = {}, {}, None, []
    for name in names:
        cfg = compose([f"backend={name}", "+sweep=serve", f"batch_size={batch_size}",
                       *([f"threads={threads}"] if threads else []), *overrides])
        workload = work.workload(cfg)
        backends[name] = registry.get("backend", name).factory(cfg.backend)
        modules[name] = work.prepared(cfg, backends[name], work.model(cfg, workload), workload, device)
        if queries is None:
            batches = work.split_batches(cfg, workload, "eval")
            queries = QuerySet.from_eval(batches, cfg.serve, cfg.seed, workload.sequences)
    return ServingBench(backends, modules, queries, batches)
