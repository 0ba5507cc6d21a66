"""AUC from LoadGen's accuracy log, checked against the offline AUC of the same backend on the same rows.

`mlperf_log_accuracy.json` holds one entry per response: `qsl_idx` and `data`, the hex of the
response bytes, in the layout of the query set (bench.serve.response): [prediction, label] float32 pairs
for a group of pairs (what MLPerf's `tools/accuracy-dlrm.py` reads; it keeps the first entry of a repeated
`qsl_idx` and takes scikit-learn's ROC AUC, and so does this), or DLRMv3's [ts_idx, query_idx,
predictions, labels, weights, count] for a request (what MLPerf's `recommendation/dlrm_v3/accuracy.py`
reads). Every sample of the query set must be there, with as many pairs as it holds and the labels the
query set gave it: a response that went to the wrong sample, or a sample answered short, fails here
instead of moving the AUC. Beside the AUC, the served NE and accuracy, as torchrec's metrics (which the
DLRMv3 script reports) read click probabilities, and for requests their grouped AUC (the DLRMv3 script's AUC).

Offline, the same rows are scored in the job's eval batches, the same float32 sigmoid applied. For
fp32 and every backend whose arithmetic does not depend on what else is in the batch, the two AUCs
agree to 1e-9; a backend that quantizes activations with scales taken from each batch gives scores
that move with the batch's make-up, so its check uses a stated tolerance and the record keeps the shift.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from bench.serve.queries import QuerySet
from bench.serve.response import DLRM, DLRMV3, ResponseError, pairs_of
from bench.stats import grouped_auc, ne_and_accuracy

EXACT_TOLERANCE = 1e-9


class AccuracyLogError(RuntimeError):
    pass


def read_accuracy_log(path: Path, layout: str = DLRM) -> dict[int, np.ndarray]:
    """qsl_idx -> [pairs, 2] float32 ([prediction, label]), the first entry of each index, its data read in `layout`
    (bench.serve.response)."""
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AccuracyLogError(f"cannot read LoadGen's accuracy log {path}: {exc}") from exc
    out: dict[int, np.ndarray] = {}
    for e in entries:
        idx = int(e["qsl_idx"])
        if idx not in out:
            try:
                out[idx] = pairs_of(layout, np.frombuffer(bytes.fromhex(e["data"]), dtype=np.float32), idx)
            except ResponseError as exc:
                raise AccuracyLogError(f"{path}: {exc}") from exc
    return out


def loadgen_scores(path: Path, queries: QuerySet) -> tuple[np.ndarray, np.ndarray]:
    """(labels, predictions) of every pair, in query-set order, after checking that each sample came
    back once, whole, with its own labels."""
    responses = read_accuracy_log(path, queries.layout)
    missing = sorted(set(range(len(queries))) - set(responses))
    if missing:
        raise AccuracyLogError(f"the accuracy log lacks {len(missing)} of {len(queries)} samples (first {missing[:5]})")
    labels = queries.batch.labels.numpy()
    preds = np.empty(queries.pairs, dtype=np.float32)
    for i in range(len(queries)):
        data, lo, n = responses[i], int(queries.starts[i]), int(queries.sizes[i])
        if data.shape[0] != n:
            raise AccuracyLogError(f"sample {i} came back with {data.shape[0]} pairs, it holds {n}")
        if not np.array_equal(data[:, 1], labels[lo:lo + n].astype(np.float32)):
            raise AccuracyLogError(f"sample {i} came back with other labels than its own: a response went to the wrong sample")
        preds[lo:lo + n] = data[:, 0]
    return labels[: queries.pairs].astype(np.float32), preds


def probabilities(logits: np.ndarray) -> np.ndarray:
    """The float32 sigmoid the serving path applies, for the offline scores."""
    return torch.sigmoid(torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float32))).numpy()


def accuracy_check(path: Path, queries: QuerySet, offline_logits: np.ndarray, batch_dependent: bool,
                   tolerance: float) -> dict[str, Any]:
    """The accuracy-mode AUC, the offline AUC on the same rows, their difference and the verdict."""
    labels, served = loadgen_scores(path, queries)
    offline = probabilities(offline_logits[: queries.pairs])
    auc_served, auc_offline = float(roc_auc_score(labels, served)), float(roc_auc_score(labels, offline))
    allowed = tolerance if batch_dependent else EXACT_TOLERANCE
    moved = np.abs(served.astype(np.float64) - offline)
    ne, accuracy = ne_and_accuracy(labels, served)
    return {
        "auc_loadgen": auc_served,
        "auc_offline": auc_offline,
        "auc_shift": auc_served - auc_offline,  # what serving (dynamic batching) moved the AUC by
        "auc_tolerance": allowed,
        "auc_check": "pass" if abs(auc_served - auc_offline) <= allowed else "fail",
        "ne_loadgen": ne,  # the served scores' NE and accuracy, as MLPerf's DLRMv3 script reads them (torchrec's metrics)
        "accuracy_loadgen": accuracy,
        "response_layout": queries.layout,
        # a request's own AUC, averaged: what MLPerf's DLRMv3 script reports as its AUC (lifetime_gauc)
        "gauc_loadgen": grouped_auc(labels, served, queries.sizes) if queries.layout == DLRMV3 else None,
        "batch_dependent": batch_dependent,
        "samples": len(queries),
        "pairs": queries.pairs,
        "prediction_max_abs_diff": float(moved.max()),
        "predictions_equal_share": float(np.mean(served == offline)),
        "accuracy_log": str(path),
    }
