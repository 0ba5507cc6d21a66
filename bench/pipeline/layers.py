"""A ΔAUC that names its layer: quantize one dense layer, or one table, at a time (`attribute_layers=true`).

The embeddings/dense split (bench.pipeline.attribution) says which side a loss is on. When a backend's ΔAUC
passes the gate's AUC margin (its `max_auc_drop`, or the drop `min_auc_ratio` allows), this goes one step
further, as the tune sweep's sensitivity does for tables (bench.tune.sensitivity): from the fp32 model,
each int8 Linear of the backend alone (`quantize_int8(only=...)`, the backend's mode, output-layer
and wide-input rules; a Linear the wide-input rule keeps fp32 has no row), and each table alone at the backend's weight type (FBGEMM's row-wise quantize-dequantize,
`fake_quant.qdq_rows`, as tune does), everything else fp32. Each one's paired ΔAUC against fp32, as a share
of the backend's, names the layers responsible:

    -0.2970: 99% from `over_arch.model.1` (Linear 64→1), int8 dynamic

Only on demand (a job with `attribute_layers=true` whose ΔAUC passes the margin: the nightly sets it), as it
scores the eval split once per layer and table.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from bench.backends.fake_quant import qdq_rows
from bench.backends.linear import WIDE_RATIO, quantize_int8, quantized_slots, slot_name, wide_inputs
from bench.backends.modules import table_weights
from bench.backends.tbe import BITS
from bench.metrics import AUC_DELTA
from bench.stats import paired_auc_delta

Scores = tuple[np.ndarray, np.ndarray]
TOP = 3  # layers named in the line


def auc_margin(cfg, backend_name: str, auc_fp32: float) -> float | None:
    """The AUC drop the gate allows this backend (None: no AUC rule)."""
    rules = cfg.gate.rules.get(backend_name) or cfg.gate.default_rules
    drops = [d for d in (rules.max_auc_drop, None if rules.min_auc_ratio is None else (1 - rules.min_auc_ratio) * auc_fp32)
             if d is not None]
    return min(drops) if drops else None


def _linear_text(module: nn.Module) -> str:
    linear = module[0] if isinstance(module, nn.Sequential) and len(module) and isinstance(module[0], nn.Linear) else module
    return f"Linear {linear.in_features}→{linear.out_features}" if isinstance(linear, nn.Linear) else type(module).__name__


def layer_rows(backend, fp32: nn.Module, calibration, device: torch.device,
               score: Callable[[nn.Module], Scores], labels: np.ndarray, base_logits: np.ndarray) -> list[dict[str, Any]]:
    """One row per int8 Linear and per quantized table: its name, what it is, the scheme and its ΔAUC alone."""
    cfg = backend.cfg
    rows = []
    if getattr(cfg, "mlp", None) == "int8" and getattr(cfg, "mlp_engine", "torch_ao") == "torch_ao":
        wide, ratio = getattr(cfg, "mlp_wide", "int8"), getattr(cfg, "mlp_wide_ratio", WIDE_RATIO)
        probe = copy.deepcopy(fp32).eval().to(device)
        slots = quantized_slots(probe, cfg.mlp_output)
        names = [(slot_name(probe, p, n), _linear_text(getattr(p, n))) for p, n in slots]
        _, touched = wide_inputs(probe, slots, calibration, device, wide, ratio)  # the backend's mlp_wide rule, as it acts
        for name, what in names:
            if wide == "fp32" and name in touched:
                continue  # kept fp32 by the rule: no int8 layer of the backend
            model = copy.deepcopy(fp32).eval().to(device)
            quantize_int8(model, cfg.mlp_mode, calibration, device, cfg.mlp_output, only={name}, wide=wide, wide_ratio=ratio)
            _, logits = score(model)
            rows.append({"layer": name, "what": what, "scheme": f"int8 {cfg.mlp_mode}" + (", smoothed" if name in touched else ""),
                         AUC_DELTA: paired_auc_delta(labels, base_logits, logits).delta})
    table_dtypes = getattr(backend, "table_dtypes", None)
    if table_dtypes is not None:
        dtypes = table_dtypes(fp32)
        model = copy.deepcopy(fp32).eval().to(device)
        for name, (weight, c) in table_weights(model).items():  # pooled and sequence tables alike
            if BITS.get(dtypes.get(name, "fp32"), 32) > 8:  # the integer row types only
                continue
            original = weight.detach().clone()
            with torch.no_grad():
                weight.copy_(qdq_rows(original, BITS[dtypes[name]], getattr(backend.cfg, "row_range", "minmax")))
            _, logits = score(model)
            with torch.no_grad():
                weight.copy_(original)
            rows.append({"layer": name, "what": f"table {c.num_embeddings}×{c.embedding_dim}", "scheme": f"{dtypes[name]} rows",
                         AUC_DELTA: paired_auc_delta(labels, base_logits, logits).delta})
    return sorted(rows, key=lambda r: r[AUC_DELTA])


def attribution_line(total: float, rows: list[dict[str, Any]]) -> str:
    """`-0.2970: 99% from `over_arch.model.1` (Linear 64→1), int8 dynamic; 1% from ...`: the layers whose own
    ΔAUC has the sign of the total, largest share first."""
    losing = [r for r in rows if total and r[AUC_DELTA] / total >= 0.005]  # a share that rounds to 0% names nothing
    if not losing:
        return f"{total:+.4f}: no single layer or table alone carries it (each one's ΔAUC is of the other sign or 0)"
    parts = [f"{r[AUC_DELTA] / total:.0%} from `{r['layer']}` ({r['what']}), {r['scheme']}" for r in losing[:TOP]]
    return f"{total:+.4f}: " + "; ".join(parts)
