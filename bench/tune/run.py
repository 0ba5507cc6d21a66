"""`run_tune(cfg, work) -> TuneResult`: sensitivity, search and the held-out check, in that order.

1. The eval split is cut by sample index (`holdout.split_by_index`): a search half, itself a plan quarter
   and a check quarter, and a held-out half; the search sees only its half.
2. Sensitivity on the plan quarter (`sensitivity`), from one swappable copy of the fp32 model, over the
   tables the model holds (`model_tables`: pooled and sequence tables alike).
3. Search (`search`): planned from the sensitivities, combined candidates measured on the check quarter.
4. The chosen map, and every uniform precision, measured on the held-out half with the real integer
   backends (`validate`), and the chosen map's emulation beside it; the verdict comes from the chosen
   map's held-out interval (real backend) alone.

Every candidate measured is a run record stored as it is measured, and with `resume=true` one stored
before is read instead of measured (bench.tune.candidate_records). The device and the memory guard are every job's
(`runner.device_of`, `runner.memory_skip`).

Where the fp32 model cannot be built here (its estimated memory exceeds `memory_fraction` of what is
available, e.g. the full-size DLRM-v2 tables) or `tune.sizes_only=true`, accuracy is not measured:
the result holds table sizes at every precision and says why.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from bench import registry
from bench.backends.direct import ROW_RANGES
from bench.backends.linear import MLP_CHOICES, MODES, check_choice
from bench.backends.modules import table_dims, table_rows
from bench.config import Config
from bench.errors import UserError
from bench.hashing import config_hash, plain
from bench.pipeline.job import backend_config
from bench.pipeline.scores import code_digest
from bench.pipeline.shared import SharedWork, TrainedModel
from bench.runner import device_of, memory_skip
from bench.results.tune import NOTHING_COMPRESSED, TuneResult, nothing_compressed
from bench.tune.candidate import SwappableModel, dense_name
from bench.tune.holdout import CHECK, HOLDOUT, PLAN, num_samples, split_by_index
from bench.tune.measured import Budget, Row
from bench.tune.search import search
from bench.tune.sensitivity import cached, sensitivity
from bench.tune.sizes import PRECISIONS, Table, map_bytes, tables_of, uniform
from bench.tune.candidate_records import TuneRecords
from bench.tune.validate import CHOSEN_BACKEND, chosen_rows, holdout_rows


def check_tune(tune) -> None:
    unknown = [p for p in tune.precisions if p not in PRECISIONS[1:]]
    if unknown or not tune.precisions:
        raise UserError(f"tune.precisions={list(tune.precisions)} must name some of {', '.join(PRECISIONS[1:])}")
    check_choice(tune.mlp, MLP_CHOICES, "tune.mlp")
    check_choice(tune.mlp_mode, MODES, "tune.mlp_mode")
    check_choice(tune.row_range, ROW_RANGES, "tune.row_range")


def sizes_only_reason(cfg: Config, work: SharedWork, workload, device) -> Optional[str]:
    if cfg.tune.sizes_only:
        return "tune.sizes_only=true"
    fp32 = registry.get("backend", "fp32").factory(backend_config({"name": "fp32"}))
    reason = memory_skip(cfg, fp32, device, work)  # the memory guard every job passes
    return None if reason is None else f"the fp32 model cannot be built here to measure accuracy: {reason}"


def sizes_rows(tables: list[Table], precisions) -> list[Row]:
    """Uniform maps with their bytes and no accuracy (split `none`): what a sizes-only tune can say."""
    return [Row(f"uniform {p}", "uniform", "none", map_bytes(tables, uniform(tables, p)), "", "sizes", uniform(tables, p))
            for p in ("fp32", *precisions) if all(t.packs(p) for t in tables)]


def model_tables(module) -> list[Table]:
    """The tables the fp32 model holds, each at its own dim: its EmbeddingBagCollections' (pooled) and its
    EmbeddingCollections' (a sequence model's history), searched alike; names as the backends' per_table takes them."""
    dims, rows = table_dims(module), table_rows(module)
    return [Table(name, int(rows[name]), int(dims[name])) for name in dims]


def run_tune(cfg: Config, work: SharedWork, clock: Callable[[], float] = time.perf_counter) -> TuneResult:
    tune = cfg.tune
    check_tune(tune)
    budget = None if tune.sizes_only else Budget.of(cfg)  # bad input fails before anything is built
    started = clock()
    device, skip = device_of(cfg)  # the device path every job takes
    if skip is not None:
        raise UserError(skip)
    held_out = registry.get("backend", CHOSEN_BACKEND).factory(
        backend_config({"name": CHOSEN_BACKEND, "mlp": tune.mlp, "mlp_mode": tune.mlp_mode}))
    reason = held_out.unsupported_reason(device)
    if reason is not None and not tune.sizes_only:
        raise UserError(f"the tune's held-out check cannot run on {device.type} ({reason}): set tune.mlp=fp32 there")
    workload = work.workload(cfg)
    result = TuneResult(cfg, tables_of(workload.tables, cfg.model.embedding_dim))
    result.sizes_only = sizes_only_reason(cfg, work, workload, device)
    # sizes only: no candidate is measured, but its rows are the folder's records all the same
    result.records = TuneRecords(cfg, device, {"workload": plain(cfg.workload), "seed": cfg.seed, "device": device.type},
                                 result.tables)
    if result.sizes_only:
        result.holdout = sizes_rows(result.tables, tune.precisions)
        result.seconds["total"] = clock() - started
        return result
    result.budget = budget

    split = split_by_index(work.split_batches(cfg, workload, "eval"))
    result.n_plan, result.n_check, result.n_holdout = (num_samples(split[k]) for k in (PLAN, CHECK, HOLDOUT))
    if min(result.n_plan, result.n_check, result.n_holdout) == 0:
        raise UserError(f"the eval split ({result.n_search + result.n_holdout} samples) is too small to cut into plan, "
                        "check and held-out parts: raise workload.eval_samples")
    model = work.model(cfg, workload)
    result.tables = model_tables(model.module) or result.tables  # the model's own tables, sequence tables included
    calibration = work.split_batches(cfg, workload, "calibration")
    result.seconds["model and data"] = clock() - started
    base = {"model": model.key, "workload": plain(cfg.workload), "seed": cfg.seed, "device": device.type,
            "calibration_batch_size": cfg.calibration_batch_size, "code": code_digest()}
    result.records = TuneRecords(cfg, device, base, result.tables)
    holdout_base, emulated = _search_half(result, model, split, calibration, device, clock)

    mark = clock()
    result.holdout, result.emulation_gap = holdout_rows(result.search.chosen, result.tables, tune, model.module,
                                                        calibration, device, split[HOLDOUT], holdout_base, emulated,
                                                        records=result.records)
    result.seconds["holdout"] = clock() - mark
    result.seconds["total"] = clock() - started
    return result


def _search_half(result: TuneResult, model: TrainedModel, split, calibration, device, clock):
    """Sensitivity (plan quarter) and search (check quarter), on one swappable copy of the fp32 model that is
    freed on return (the real backends of the held-out check build their own). Returns the fp32 (labels,
    logits) of the held-out half, and the logits of the chosen map's emulation there, scored once the
    search is done (they only show the emulation's fidelity)."""
    cfg, tune = result.cfg, result.cfg.tune
    mark = clock()
    swappable = SwappableModel(model.module, calibration, device, tune.row_range)  # rows as the held-out backends store them
    plan_base = swappable.logits("fp32", split[PLAN], result.n_plan)
    result.seconds["swappable copy"] = clock() - mark

    mark = clock()
    key = config_hash({"model": model.key, "workload": plain(cfg.workload), "seed": cfg.seed, "device": device.type,
                       "precisions": list(tune.precisions), "calibration_batch_size": cfg.calibration_batch_size,
                       "samples": PLAN, "code": code_digest()})
    records = result.records
    result.sensitivity, result.sensitivity_cached = cached(
        Path(cfg.cache_dir) / "tune" / f"{key}.json",
        lambda: sensitivity(swappable, result.tables, tune.precisions, split[PLAN], plan_base, records.measure),
    )
    if result.sensitivity_cached:  # measured by an earlier tune: their records join this one's
        for row in result.sensitivity:
            records.adopt(row)
    result.seconds["sensitivity"] = clock() - mark

    mark = clock()
    dense = dense_name(tune.mlp, tune.mlp_mode)
    check_base = swappable.logits("fp32", split[CHECK], result.n_check)
    result.search = search(swappable, result.tables, tune.precisions, result.sensitivity, dense, result.budget,
                           split[CHECK], check_base, ratio=result.n_check / result.n_holdout, measure=records.measure)
    result.seconds["search"] = clock() - mark
    swappable.set_tables({})
    holdout_base = swappable.logits("fp32", split[HOLDOUT], result.n_holdout)
    if records.all_stored(chosen_rows(result.search.chosen, result.tables, tune)):
        return holdout_base, None  # resumed: the emulation was measured and stored with the chosen map
    swappable.set_tables(result.search.chosen)
    _, emulated = swappable.logits(dense, split[HOLDOUT], result.n_holdout)
    return holdout_base, emulated
