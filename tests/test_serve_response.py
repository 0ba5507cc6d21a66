"""A response's bytes in the layout MLPerf's accuracy script for the benchmark reads (bench.serve.response), read back
by the accuracy check; and the served NE and accuracy as torchrec's metrics (MLPerf's DLRMv3 script) read them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torchrec.metrics.accuracy import compute_accuracy, compute_accuracy_sum
from torchrec.metrics.ne import compute_cross_entropy, compute_ne

from bench.serve.accuracy_log import AccuracyLogError, read_accuracy_log
from bench.serve.queries import QuerySet
from bench.serve.response import DLRM, DLRMV3, ResponseError, answers, pairs_of
from bench.stats import ne_and_accuracy

SIZES = np.array([3, 1, 4, 2])


def _rows(indices: list[int]) -> np.ndarray:
    """[prediction, label] pairs of the samples, in order: prediction i / 10 + sample / 100, label i % 2."""
    parts = [np.stack([np.arange(SIZES[i]) / 10 + i / 100, np.arange(SIZES[i]) % 2], axis=1) for i in indices]
    return np.concatenate(parts).astype(np.float32)


def _split(buffer: np.ndarray, spans: list[tuple[int, int]]) -> list[np.ndarray]:
    raw = buffer.tobytes()
    return [np.frombuffer(raw[at:at + size], dtype=np.float32) for at, size in spans]


@pytest.mark.parametrize("layout", [DLRM, DLRMV3])
def test_each_sample_s_response_reads_back_as_its_own_pairs(layout):
    indices = [2, 0, 3]  # a batch takes samples in arrival order, not index order
    rows = _rows(indices)
    buffer, spans = answers(layout, rows, indices, SIZES)
    assert buffer.dtype == np.float32 and buffer.flags.c_contiguous
    read = [pairs_of(layout, data, i) for data, i in zip(_split(buffer, spans), indices)]
    assert [r.shape for r in read] == [(SIZES[i], 2) for i in indices]
    np.testing.assert_array_equal(np.concatenate(read), rows)


def test_a_request_is_answered_as_the_dlrmv3_reference_answers_it():
    """recommendation/dlrm_v3/main.py (mlcommons/inference), accuracy mode: float32 [ts_idx, query_idx, predictions,
    labels, weights, candidate count]; its accuracy.py takes the count from the last value and asserts 3 + 3 x count."""
    buffer, spans = answers(DLRMV3, _rows([2]), [2], SIZES)
    (data,) = _split(buffer, spans)
    expected = [-1.0, 2.0, 0.02, 0.12, 0.22, 0.32, 0, 1, 0, 1, 1, 1, 1, 1, 4.0]
    np.testing.assert_array_equal(data, np.asarray(expected, dtype=np.float32))
    count = int(data[-1])
    assert data.size == 3 + count * 3


def test_a_response_that_does_not_hold_together_is_named():
    buffer, spans = answers(DLRMV3, _rows([1]), [1], SIZES)
    (data,) = _split(buffer, spans)
    with pytest.raises(ResponseError, match="query_idx 1: a response went to the wrong sample"):
        pairs_of(DLRMV3, data, 0)
    with pytest.raises(ResponseError, match="3 \\+ 3 x count"):
        pairs_of(DLRMV3, data[1:], 1)  # ts_idx dropped
    with pytest.raises(ResponseError, match="fewer than"):
        pairs_of(DLRMV3, data[:2], 1)
    with pytest.raises(ResponseError, match="not \\[prediction, label\\] pairs"):
        pairs_of(DLRM, np.zeros(3, dtype=np.float32), 0)


def _log(path, layout: str, indices: list[int]) -> None:
    buffer, spans = answers(layout, _rows(indices), indices, SIZES)
    raw = buffer.tobytes()
    entries = [{"seq_id": k, "qsl_idx": i, "data": raw[at:at + size].hex().upper()} for k, (i, (at, size)) in enumerate(zip(indices, spans))]
    path.write_text(json.dumps(entries))


def test_the_accuracy_log_of_a_request_set_reads_in_dlrmv3_s_layout(tmp_path):
    path = tmp_path / "mlperf_log_accuracy.json"
    _log(path, DLRMV3, [3, 1, 0, 2])
    responses = read_accuracy_log(path, DLRMV3)
    assert sorted(responses) == [0, 1, 2, 3] and all(responses[i].shape == (SIZES[i], 2) for i in range(4))
    _log(path, DLRM, [0, 1, 2, 3])  # a log of pairs is not read as requests
    with pytest.raises(AccuracyLogError, match="3 \\+ 3 x count"):
        read_accuracy_log(path, DLRMV3)


def test_the_query_set_says_its_layout():
    requests = QuerySet(batch=None, sizes=SIZES, starts=np.array([0, 3, 4, 8]), history=np.array([5, 6, 7, 8]))
    pairs = QuerySet(batch=None, sizes=SIZES, starts=np.array([0, 3, 4, 8]))
    assert (requests.layout, pairs.layout) == (DLRMV3, DLRM)


def test_ne_and_accuracy_read_probabilities_as_torchrec_s_metrics_do():
    rng = np.random.default_rng(0)
    labels = (rng.random(500) < 0.3).astype(np.float32)
    probs = np.clip(rng.random(500) * 0.6 + labels * 0.3, 0, 1).astype(np.float32)
    probs[:3] = [0.0, 1.0, 0.5]  # clamped ends, and the threshold itself reads positive
    ne, accuracy = ne_and_accuracy(labels, probs)
    y, p, w = torch.from_numpy(labels).double(), torch.from_numpy(probs), torch.ones(500, dtype=torch.float64)
    eta = 1e-12
    ce = compute_cross_entropy(y, p.clone(), w, eta).sum()
    theirs_ne = compute_ne(ce, w.sum(), (y * w).sum(), ((1 - y) * w).sum(), eta)
    theirs_acc = compute_accuracy(compute_accuracy_sum(y, p, w), w.sum())
    assert ne == pytest.approx(float(theirs_ne), rel=1e-12)
    assert accuracy == pytest.approx(float(theirs_acc), rel=1e-12)
