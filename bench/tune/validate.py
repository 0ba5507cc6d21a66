"""The held-out half, measured with the real integer backends: the chosen map and the uniform ones.

The chosen map runs as `uint4` with `backend.per_table` naming every table (the default weight type
then names none), its dense layers as the tune deploys them; the uniform maps run as the registered
backend of each precision with the same dense layers. Their stored table bytes are read from the
prepared modules. The verdict on the chosen map comes from this half alone, which the search never saw.

The search's own emulation of the chosen map (quantize-dequantize rows, torch.ao int8 Linear) is scored
on this half too, after the search is done, so a reader sees how faithful the search's figures are: the
emulated ΔAUC next to the real one, and their largest logit difference.
"""

from __future__ import annotations

import gc
import logging
from typing import Optional, Sequence

import numpy as np

from torch import nn

from bench import registry
from bench.backends.tables import embedding_bytes
from bench.backends.tbe import TbeBackend
from bench.errors import UserError
from bench.measure.accuracy import score
from bench.pipeline.job import backend_config
from bench.tune.measured import Row, delta
from bench.tune.sizes import Table, map_bytes, uniform
from bench.tune.candidate_records import TuneRecords, measure_now

log = logging.getLogger(__name__)

CHOSEN_BACKEND = "uint4"


def uniform_backends() -> dict[str, str]:
    """Table precision -> the registered table-batched backend that stores every table in it (its
    `weight_dtype`), for the precisions below fp32; the backends of the default sweeps only."""
    out: dict[str, str] = {}
    for name, entry in sorted(registry.entries("backend").items()):
        dtype = getattr(entry.factory, "weight_dtype", None)
        if entry.in_sweeps and isinstance(entry.factory, type) and issubclass(entry.factory, TbeBackend) and dtype not in (None, "fp32"):
            out.setdefault(dtype, name)
    return out


def real_row(name: str, kind: str, backend: str, per_table: dict[str, str], tune, model: nn.Module, calibration,
             device, batches, base) -> tuple[Row, np.ndarray]:
    """Prepare `backend` with `per_table` and the tune's dense layers, score `batches`, delta against `base`;
    returns the row and the logits."""
    labels, base_logits = base
    cfg = backend_config({"name": backend, "per_table": per_table, "mlp": tune.mlp, "mlp_mode": tune.mlp_mode, "row_range": tune.row_range})
    instance = registry.get("backend", backend).factory(cfg)
    reason = instance.unsupported_reason(device)
    if reason is not None:
        raise UserError(f"the held-out check cannot run here: {reason}")
    try:
        prepared = instance.prepare(model, calibration, device)
        _, logits = score(prepared, batches, device, len(labels))
        stored = embedding_bytes(prepared)
        del prepared
    finally:
        instance.close()
        gc.collect()
    dense = dense_label(tune)
    row = Row(name, kind, "holdout", stored, dense, backend, dict(per_table)).with_delta(delta(labels, base_logits, logits))
    log.info("tune: held-out check: %s: %.3f MB, ΔAUC %+.5f [%+.5f, %+.5f]", name, stored / 1e6, row.auc_delta,
             row.auc_delta_lo, row.auc_delta_hi)
    return row, logits


def dense_label(tune) -> str:
    """The tune's deployed dense layers as its labels name them: fp32, or `int8 dynamic` / `int8 static`."""
    return "fp32" if tune.mlp == "fp32" else f"int8 {tune.mlp_mode}"


def chosen_rows(chosen: dict[str, str], tables: Sequence[Table], tune) -> tuple[Row, Row]:
    """The chosen map's two held-out rows, not yet measured: with the real backend (marked chosen), and its emulation."""
    first = Row("chosen", "chosen", "holdout", 0, dense_label(tune), CHOSEN_BACKEND, dict(chosen), chosen=True)
    emulation = Row("chosen (emulation)", "emulation", "holdout", map_bytes(tables, chosen), dense_label(tune), "emulation", dict(chosen))
    return first, emulation


def holdout_rows(chosen: dict[str, str], tables: Sequence[Table], tune, model: nn.Module, calibration, device,
                 batches, base, emulated: Optional[np.ndarray] = None,
                 records: Optional[TuneRecords] = None) -> tuple[list[Row], float]:
    """The chosen map (first, marked chosen), its emulation when `emulated` (its logits) is given, then every
    uniform precision of the tune that packs; and the largest |logit| difference of emulation and real (nan
    without one). With `records` each is stored as measured, or found stored (resume): the chosen map and its
    emulation together (`TuneRecords.measure_together`), their logit difference kept with them."""
    labels, base_logits = base
    first_row, emulation_row = chosen_rows(chosen, tables, tune)
    both = emulated is not None or (records is not None and records.all_stored([first_row, emulation_row]))

    def measure_chosen() -> tuple[list[Row], dict]:
        first, logits = real_row("chosen", "chosen", CHOSEN_BACKEND, chosen, tune, model, calibration, device, batches, base)
        first.chosen = True
        if emulated is None:
            return [first], {}
        gap = float(np.max(np.abs(emulated - logits)))
        return [first, emulation_row.with_delta(delta(labels, base_logits, emulated))], {"emulation_gap": gap}

    wanted = [first_row, emulation_row] if both else [first_row]
    if records is None:
        rows, extra = measure_chosen()
    else:
        rows = records.measure_together(wanted, measure_chosen)
        extra = {"emulation_gap": records.stored_extra(rows[0], "emulation_gap")}
    gap = extra.get("emulation_gap")
    gap = float("nan") if gap is None else float(gap)
    measure = records.measure if records is not None else measure_now
    backends = uniform_backends()
    for precision in tune.precisions:
        if precision in backends and all(t.packs(precision) for t in tables):
            backend = backends[precision]
            name = f"uniform {precision} ({backend}, {dense_label(tune)} MLP)"
            row = Row(name, "uniform", "holdout", 0, dense_label(tune), backend, uniform(tables, precision))
            rows.append(measure(row, lambda: real_row(name, "uniform", backend, uniform(tables, precision), tune, model,
                                                      calibration, device, batches, base)[0]))
    return rows, gap
