"""Stage 3's serving-path timing for one backend: its prepared module (the one its offline jobs just timed, still
held by the session's shared work; built again where those jobs were reused from the store) and the fp32 reference
beside it, through the SUT's batch function on the query set a serving job would cut (bench.serve.path).

The times are kept like the accuracy facts (bench.recommend.facts), in `<cache_dir>/recommend/served-<key>.json`,
keyed by the backend's job identity at those sizes and threads, the query set's settings, this machine's and
stack's fingerprint (as a stored job's record is) and the harness's code: a second identical recommend reads them
back without preparing anything, and a change to any of them times them again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

from bench import registry
from bench.config import Config
from bench.hashing import config_hash
from bench.io import write_json_atomic
from bench.measure.environment import environment
from bench.pipeline.job import reference_module
from bench.pipeline.scores import code_digest
from bench.recommend.facts import resolved
from bench.registry import BASELINE_BACKEND
from bench.runner import Session, device_of, job_hash
from bench.serve.path import BATCHES, ServedTimes, paired_served_times
from bench.serve.queries import QuerySet

QUERY_SET = ("fixed_pairs", "pairs_quantiles", "max_samples")  # the serve settings the query set is cut by
NOT_SERVED = ("batch_size", "serve")  # the job identity less what the sizes and the query set say


def served_path(cfg: Config, serve_cfg: Config, sizes: list[int], fingerprint: str) -> Path:
    queries = {k: getattr(serve_cfg.serve, k) for k in QUERY_SET}
    key = config_hash({"job": job_hash(resolved(cfg, NOT_SERVED)), "queries": queries, "sizes": sorted(sizes), "batches": BATCHES,
                       "machine": fingerprint, "code": code_digest()})
    return Path(cfg.cache_dir) / "recommend" / f"served-{key}.json"


def served_times(cfg: Config, serve_cfg: Config, sizes: list[int], session: Session
                 ) -> tuple[Optional[dict[int, ServedTimes]], Optional[str], bool]:
    """`measure_served`'s answer, read back where this machine stored it before (and whether it was), else timed
    now and stored when timed."""
    device, why = device_of(cfg)
    if why is not None:
        return None, why, False
    path = served_path(cfg, serve_cfg, sizes, environment(device)["fingerprint"])
    if path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            return {int(size): ServedTimes(**t) for size, t in stored["served"].items()}, None, True
        except (OSError, ValueError, TypeError, KeyError):
            pass  # a damaged file is timed again
    served, why = measure_served(cfg, serve_cfg, sizes, session)
    if served is not None:
        write_json_atomic(path, {"backend": cfg.backend.name, "threads": cfg.threads,
                                 "served": {str(size): dataclasses.asdict(t) for size, t in served.items()}})
    return served, why, False


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
        queries = QuerySet.from_eval(work.split_batches(cfg, workload, "eval"), serve_cfg.serve, cfg.seed, workload.sequences)
        return {size: paired_served_times(module, reference, queries, device, size) for size in sizes}, None
    except Exception as exc:  # noqa: BLE001 - a backend that cannot be timed this way keeps its offline-only estimate, said
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        backend.close()
