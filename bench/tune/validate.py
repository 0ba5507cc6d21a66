"""The held-out half, measured with the real integer backends: the chosen map and the uniform ones.

The chosen map runs as `uint4` with `backend.per_table` naming every table (the default weight type
then names none), its dense layers as the tune deploys them; the uniform maps run as the registered
backend of each precision with the same dense layers. Their stored table bytes are read from the
prepared modules. The verdict on the chosen map comes from this half alone, which the search never saw.
"""

from __future__ import annotations

import gc
from typing import Sequence

from torch import nn

from bench import registry
from bench.backends.tables import embedding_bytes
from bench.errors import UserError
from bench.measure.accuracy import score
from bench.pipeline.job import backend_config
from bench.tune.measured import Row, delta
from bench.tune.sizes import Table, uniform

CHOSEN_BACKEND = "uint4"
UNIFORM_BACKENDS = {"fp16": "fp16_tbe", "int8": "int8_tbe", "int4": "uint4", "int2": "int2_tbe"}


def real_row(name: str, kind: str, backend: str, per_table: dict[str, str], tune, model: nn.Module, calibration,
             device, batches, base) -> Row:
    """Prepare `backend` with `per_table` and the tune's dense layers, score `batches`, delta against `base`."""
    labels, base_logits = base
    cfg = backend_config({"name": backend, "per_table": per_table, "mlp": tune.mlp, "mlp_mode": tune.mlp_mode})
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
    dense = "fp32" if tune.mlp == "fp32" else f"int8 {tune.mlp_mode}"
    return Row(name, kind, "holdout", stored, dense, backend, dict(per_table)).with_delta(delta(labels, base_logits, logits))


def holdout_rows(chosen: dict[str, str], tables: Sequence[Table], tune, model: nn.Module, calibration, device,
                 batches, base) -> list[Row]:
    """The chosen map (first, marked chosen), then every uniform precision of the tune that packs."""
    rows = [real_row("chosen", "chosen", CHOSEN_BACKEND, chosen, tune, model, calibration, device, batches, base)]
    rows[0].chosen = True
    for precision in tune.precisions:
        if precision in UNIFORM_BACKENDS and all(t.packs(precision) for t in tables):
            backend = UNIFORM_BACKENDS[precision]
            rows.append(real_row(f"uniform {precision} ({backend})", "uniform", backend, uniform(tables, precision),
                                 tune, model, calibration, device, batches, base))
    return rows
