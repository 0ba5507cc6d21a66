"""Where a backend's ΔAUC comes from: its embeddings or its dense layers.

For a backend whose dense layers run in int8 or fp16/bf16 (`mlp: int8` in its config), the same backend with
`mlp=fp32` isolates the embeddings: its ΔAUC against fp32 is the embeddings' share, and the paired
delta between the two is the dense layers' share on top of those embeddings. With 26 tables of 300k
rows at dim 64, int8 and int4 embeddings (both with the int8 MLP) lost the same -0.0011: this split
shows such a loss belongs to the MLP. A backend whose MLP is already fp32 owes its whole delta to the
embeddings, and nothing more is measured. The extra scores go through the score cache like every
other, so a warm sweep pays nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from bench.backends.half_mlp import HALF_SCHEMES
from bench.config import BackendConfig
from bench.metrics import AUC_DELTA_EMBEDDINGS, AUC_DELTA_MLP, hi, lo
from bench.stats import paired_auc_delta

Scores = tuple[np.ndarray, np.ndarray]


def attribute_delta(backend_cfg: BackendConfig, labels: np.ndarray, base_logits: np.ndarray, logits: np.ndarray,
                    scores_of: Callable[[BackendConfig], Scores]) -> dict[str, Any]:
    """`auc_delta_embeddings` and `auc_delta_mlp` (each with `_lo`/`_hi`), or {} where nothing splits."""
    mlp = getattr(backend_cfg, "mlp", None)
    if mlp == "fp32":
        total = paired_auc_delta(labels, base_logits, logits)
        return {**_named(total, AUC_DELTA_EMBEDDINGS), AUC_DELTA_MLP: 0.0, lo(AUC_DELTA_MLP): 0.0, hi(AUC_DELTA_MLP): 0.0}
    if mlp not in ("int8", *HALF_SCHEMES):
        return {}
    try:
        _, emb_logits = scores_of(dataclasses.replace(backend_cfg, mlp="fp32"))
    except Exception as exc:  # noqa: BLE001 - the split is extra: keep what the job measured
        return {"attribution_error": f"{type(exc).__name__}: {exc}"}
    embeddings = paired_auc_delta(labels, base_logits, emb_logits)
    dense = paired_auc_delta(labels, emb_logits, logits)
    return {**_named(embeddings, AUC_DELTA_EMBEDDINGS), **_named(dense, AUC_DELTA_MLP)}


def _named(delta, name: str) -> dict[str, float]:
    return {name: delta.delta, f"{name}_lo": delta.lo, f"{name}_hi": delta.hi}
