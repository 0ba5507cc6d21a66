"""Stages 1 and 2's figures for one backend: ΔAUC against fp32 from the eval scores, and its model's MB.

The eval scores come from the score cache every job uses (bench.pipeline.job.backend_scores: scored once
per model, backend and workload, kept in cache_dir), so a backend a sweep or an earlier recommend scored
costs a read and a DeLong interval here. The model MB needs the prepared module (built once, as a job
builds it). The figures are kept in `<cache_dir>/recommend/facts-<key>.json`, keyed by the backend's job
identity less its batch size, threads and timing, and by the harness's code (as the score cache is): a
second recommend reads them back without preparing anything.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from bench import registry
from bench.backends.backend import NotApplicable
from bench.backends.tables import embedding_bytes
from bench.backends.tbe import joined_per_table
from bench.config import Config
from bench.errors import UserError, one_line
from bench.hardware import prepare_process, resolve
from bench.hashing import config_hash
from bench.io import write_json_atomic
from bench.measure.memory import model_bytes
from bench.pipeline.job import backend_config, backend_scores
from bench.pipeline.scores import code_digest
from bench.recommend.decide import Facts
from bench.registry import BASELINE_BACKEND
from bench.runner import Session, job_hash
from bench.stats import paired_auc_delta, paired_ne_acc_delta

MB = 1e6
NOT_ACCURACY = ("batch_size", "threads", "timing", "serve")  # what a backend's accuracy and size do not depend on


def resolved(cfg: Config, leave_out: tuple[str, ...]) -> dict:
    """The config as data less `leave_out`, a per_table_file's mapping joined to per_table as a job resolves it
    (bench.runner): two contents of one file (a tune run again into reports/tune/latest) are two backends."""
    out = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in leave_out}
    if getattr(cfg.backend, "per_table_file", None) and "backend" in out:
        out["backend"]["per_table"] = joined_per_table(cfg.backend)
    return out


def facts_path(cfg: Config) -> Path:
    key = config_hash({"job": job_hash(resolved(cfg, NOT_ACCURACY)), "code": code_digest()})
    return Path(cfg.cache_dir) / "recommend" / f"facts-{key}.json"


def backend_facts(cfg: Config, session: Session) -> tuple[Facts, bool]:
    """The backend's Facts (stored, or measured now and stored), and whether they were read back."""
    path = facts_path(cfg)
    if path.is_file():
        try:
            return Facts(**json.loads(path.read_text(encoding="utf-8"))), True
        except (OSError, ValueError, TypeError):
            pass  # a damaged file is measured again
    facts = measure_facts(cfg, session)
    write_json_atomic(path, dataclasses.asdict(facts))
    return facts, False


def measure_facts(cfg: Config, session: Session) -> Facts:
    name = cfg.backend.name
    prepare_process(cfg.device, cfg.threads)
    device, skip = resolve(cfg.device)
    if skip is not None:
        return Facts(name, skipped=skip)
    backend = registry.get("backend", name).factory(cfg.backend)
    try:
        skip = backend.unsupported_reason(device)
        if skip is not None:
            return Facts(name, skipped=skip)
        work = session.work
        workload = work.workload(cfg)
        model = work.model(cfg, workload)
        work.release_leftovers(cfg, backend, device)
        labels, logits = backend_scores(cfg, backend, model, workload, device, work)
        fp32 = registry.get("backend", BASELINE_BACKEND).factory(backend_config({"name": BASELINE_BACKEND}))
        _, base = backend_scores(cfg, fp32, model, workload, device, work)
        prepared = work.prepared(cfg, backend, model, workload, device)
        delta = paired_auc_delta(labels, base, logits)
        ne, _ = paired_ne_acc_delta(labels, base, logits)
        return Facts(name, float(delta.delta), float(delta.lo), float(delta.hi), float(delta.auc_base),
                     model_bytes(prepared) / MB, embedding_bytes(prepared) / MB, ne_delta=ne.delta, ne_delta_lo=ne.lo, ne_delta_hi=ne.hi)
    except NotApplicable as exc:  # the model, not the machine: e.g. a toolkit's export on a sequential model
        return Facts(name, skipped=str(exc), not_applicable=True)
    except UserError as exc:
        return Facts(name, skipped=str(exc))
    except Exception as exc:  # noqa: BLE001 - one backend failing leaves the others to judge
        return Facts(name, skipped=f"it failed here: {type(exc).__name__}: {one_line(exc)}")
    finally:
        try:
            backend.close()
        except Exception:  # noqa: BLE001 - what was measured stays
            pass


def is_measured(f: Facts) -> bool:
    return f.skipped is None and not math.isnan(f.auc_delta)
