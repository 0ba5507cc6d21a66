"""The serving function's batch times at one batcher size, the backend's beside fp32's (`measure=served`): recommend's
stage 3 (bench.recommend).

The backend's prepared module (the one its offline jobs just timed, still held by the session's shared work) and
the fp32 reference beside it run `predict`, the function the SUT's workers call, on packed batches of at most
`batch_size` rows of the query set a serving job would cut (`serve`'s query-set keys), in turn
(bench.serve.path.paired_served_times). The record holds the medians under `served`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from bench.backends.backend import Backend
from bench.config import SERVED, Config
from bench.pipeline.job import reference_module
from bench.pipeline.shared import SharedWork
from bench.registry import BASELINE_BACKEND
from bench.routes.route import PartRoute
from bench.serve.path import paired_served_times
from bench.serve.queries import QuerySet



class ServedRoute(PartRoute):
    name = SERVED
    uncalibrated = "served batches are timed on the wall clock, beside fp32's"

    def skip_reason(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork) -> str | None:
        if cfg.serve is None:
            return "a job of served batch times needs the serving keys of its query set (serve)"
        return super().skip_reason(cfg, backend, device, work)

    def measure(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork,
                setting: dict[str, Any]) -> dict[str, Any]:
        workload = work.workload(cfg)
        work.release_leftovers(cfg, backend, device)
        model = work.model(cfg, workload)
        module = work.prepared(cfg, backend, model, workload, device)
        reference, why = reference_module(cfg, backend, model, workload, device, work, True, "")
        if reference is None and backend.cfg.name != BASELINE_BACKEND:
            raise RuntimeError(f"no fp32 beside it: {why}")
        reference = reference if reference is not None else module  # fp32 itself: each batch twice
        queries = QuerySet.from_eval(work.split_batches(cfg, workload, "eval"), cfg.serve, cfg.seed, workload.sequences)
        return {SERVED: dataclasses.asdict(paired_served_times(module, reference, queries, device, cfg.batch_size))}
