"""Accuracy over a whole eval split: AUC, log loss, normalized entropy, accuracy at 0.5, with a count check."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from bench.batch import Batch
from bench.errors import UserError
from bench.metrics import ACC, AUC, DISTINCT_SCORES, LOGLOSS, NE, N_EVAL
from bench.stats import base_entropy, correct
from bench.progress import progress


class CountMismatch(RuntimeError):
    pass


def score(module: nn.Module, batches: Iterable[Batch], device: torch.device, expected: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels for every eval sample; each sample must be scored exactly once.

    A model or loader that drops or duplicates samples (the offsets off-by-one that once dropped
    the last sample of every batch) fails here instead of skewing the AUC.
    """
    labels, logits = [], []
    with torch.inference_mode(), progress(total=expected, desc="eval", unit="sample") as bar:
        for batch in batches:
            out = module(*batch.to(device).model_inputs()).reshape(-1)
            if out.numel() != len(batch):
                raise CountMismatch(f"model returned {out.numel()} scores for a batch of {len(batch)} samples")
            logits.append(out.float().cpu().numpy())
            labels.append(batch.labels.numpy())
            bar.update(len(batch))
    n = sum(len(x) for x in labels)
    if n != expected:
        raise CountMismatch(f"scored {n} eval samples, expected {expected}: samples were dropped or repeated")
    return np.concatenate(labels), np.concatenate(logits)


def non_finite_scores(logits: np.ndarray) -> str | None:
    """How many scores are NaN or infinite, as the error says it; None when every one is finite."""
    if np.all(np.isfinite(logits)):
        return None
    return f"model produced {int(np.sum(~np.isfinite(logits)))} non-finite scores (NaN or inf) on the eval split"


def accuracy_metrics(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    bad = non_finite_scores(logits)
    if bad:
        raise FloatingPointError(bad)
    positives = float(labels.mean(dtype=np.float64))  # a float32 mean is off in the 8th digit
    if positives in (0.0, 1.0):
        raise UserError(
            f"the eval split has a single class (all labels {int(positives)}): AUC is undefined; use a larger or different eval split"
        )
    logloss = float(torch.nn.functional.binary_cross_entropy_with_logits(torch.from_numpy(logits).double(), torch.from_numpy(labels).double()))
    # Normalized entropy: log loss over the entropy of the base rate (DLRM's NE; below 1 beats
    # predicting the positive rate for everyone).
    return {
        AUC: float(roc_auc_score(labels, logits)),
        LOGLOSS: logloss,
        NE: logloss / base_entropy(positives),
        ACC: float(correct(labels, logits).mean()),  # at 0.5 on the probability, as MLPerf's DLRMv3 reads it
        N_EVAL: int(len(labels)),
        "positive_rate": positives,
        DISTINCT_SCORES: int(np.unique(logits).size),
    }
