"""Stage 3's serving-path timing for one backend: its prepared module (the one its offline jobs just timed, still
held by the session's shared work; built again where those jobs were reused from the store) and the fp32 reference
beside it, through the SUT's batch function on the query set a serving job would cut (bench.serve.path)."""

from __future__ import annotations

from typing import Optional

from bench import registry
from bench.config import Config
from bench.pipeline.job import reference_module
from bench.registry import BASELINE_BACKEND
from bench.runner import Session, device_of
from bench.serve.path import ServedTimes, paired_served_times
from bench.serve.queries import QuerySet


def measure_served(cfg: Config, serve_cfg: Config, sizes: list[int], session: Session) -> tuple[Optional[dict[int, ServedTimes]], Optional[str]]:
    """({size: the candidate's and fp32's served times} at `sizes`, None) or (None, why they could not be timed).
    `cfg`: the backend's offline job config (its threads); `serve_cfg`: a serving config of it (its query set)."""
    device, why = device_of(cfg)
    if why is not None:
        return None, why
    work = session.work
    backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)
    try:
        workload = work.workload(cfg)
        work.release_leftovers(cfg, backend, device)
        model = work.model(cfg, workload)
        module = work.prepared(cfg, backend, model, workload, device)
        reference, why = reference_module(cfg, backend, model, workload, device, work, True, "")
        if reference is None and cfg.backend.name != BASELINE_BACKEND:
            return None, f"no fp32 beside it: {why}"
        reference = reference if reference is not None else module  # fp32 itself: each batch twice
        queries = QuerySet.from_eval(work.split_batches(cfg, workload, "eval"), serve_cfg.serve, cfg.seed)
        return {size: paired_served_times(module, reference, queries, device, size) for size in sizes}, None
    except Exception as exc:  # noqa: BLE001 - a backend that cannot be timed this way keeps its offline-only estimate, said
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        backend.close()
