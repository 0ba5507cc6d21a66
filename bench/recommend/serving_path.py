"""Stage 3's serving-path measurement for one backend: its prepared module (the one its offline jobs just timed,
still held by the session's shared work; built again where those jobs were reused from the store) through the SUT's
batch function and in its offline form, on the query set a serving job would cut (bench.serve.path)."""

from __future__ import annotations

from typing import Optional

from bench import registry
from bench.config import Config
from bench.runner import Session, device_of
from bench.serve.path import PathCost, path_cost
from bench.serve.queries import QuerySet


def measure_path(cfg: Config, serve_cfg: Config, sizes: list[int], session: Session) -> tuple[Optional[PathCost], Optional[str]]:
    """(the backend's serving-path extra over its offline call at `sizes`, None) or (None, why it could not be
    measured). `cfg`: the backend's offline job config (its threads); `serve_cfg`: a serving config of it (its query set)."""
    device, why = device_of(cfg)
    if why is not None:
        return None, why
    work = session.work
    backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)
    try:
        workload = work.workload(cfg)
        work.release_leftovers(cfg, backend, device)
        module = work.prepared(cfg, backend, work.model(cfg, workload), workload, device)
        queries = QuerySet.from_eval(work.split_batches(cfg, workload, "eval"), serve_cfg.serve, cfg.seed)

        def timed_form(batch):
            return backend.timed_inputs(module, [batch.model_inputs()])[0]

        return path_cost(module, timed_form, queries, device, sizes), None
    except Exception as exc:  # noqa: BLE001 - a backend that cannot be served this way keeps its offline-only estimate, said
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        backend.close()
