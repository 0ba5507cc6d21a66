"""What a LoadGen sample is answered with: its bytes, in the layout MLPerf's accuracy script for the benchmark reads.

- `dlrm` (a sample is a group of user-item pairs, MLPerf's DLRM-v2): a [prediction, label] float32 pair for each
  row, in order; MLPerf's `tools/accuracy-dlrm.py` reads it.
- `dlrmv3` (a sample is one request, a user's history and its candidates, MLPerf's DLRMv3): float32
  [ts_idx, query_idx, the n candidates' predictions, their n labels, their n weights, n], what the DLRMv3
  reference's SUT answers with in accuracy mode and its `recommendation/dlrm_v3/accuracy.py` reads. ts_idx is
  -1 (the reference's value where its dataset gives no timestamp), query_idx the sample's index in the query
  set, every weight 1 (each candidate counts once).

A query set cut by request answers in `dlrmv3`'s layout, one cut into groups of pairs in `dlrm`'s
(`bench.serve.queries.QuerySet.layout`). A prediction is the click probability, the float32 sigmoid of the
logit, in both. The SUT encodes (`answers`), the accuracy check decodes (`pairs_of`): one module holds the layout.
"""

from __future__ import annotations

import numpy as np

DLRM, DLRMV3 = "dlrm", "dlrmv3"
NO_TIMESTAMP = -1.0  # ts_idx where the dataset has no timestamps, as the DLRMv3 reference writes it
HEADER, FOOTER = 2, 1  # dlrmv3: ts_idx and query_idx before the columns, the candidate count after them


class ResponseError(ValueError):
    """A response whose bytes do not hold the sample it answers."""


def answers(layout: str, rows: np.ndarray, indices: list[int], sizes: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The responses to samples `indices` (query-set indices, in order), whose rows' [prediction, label] pairs are
    `rows` ([sum of their sizes, 2] float32, samples in order): one contiguous float32 buffer, and each sample's
    (offset, length) in bytes into it. The buffer must stay alive until LoadGen has taken the responses."""
    if layout == DLRM:  # the pairs as they are: no copy
        buffer, counts = np.ascontiguousarray(rows, dtype=np.float32), [2 * int(sizes[i]) for i in indices]
    elif layout == DLRMV3:
        parts, counts, row = [], [], 0
        for i in indices:
            n = int(sizes[i])
            block = rows[row:row + n]
            parts.append(np.concatenate([[NO_TIMESTAMP, float(i)], block[:, 0], block[:, 1], np.ones(n), [float(n)]]).astype(np.float32))
            counts.append(n * 3 + HEADER + FOOTER)
            row += n
        buffer = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    else:
        raise ValueError(f"unknown response layout {layout!r}: {DLRM} or {DLRMV3}")
    spans, at = [], 0
    for count in counts:
        spans.append((at * 4, count * 4))
        at += count
    return buffer, spans


def pairs_of(layout: str, data: np.ndarray, index: int) -> np.ndarray:
    """[n, 2] float32 ([prediction, label]) of the response `data` (its float32 values) to sample `index`; a response
    whose layout does not hold together, or that names another sample, raises ResponseError."""
    if layout == DLRM:
        if data.size % 2:
            raise ResponseError(f"sample {index} came back with {data.size} floats, not [prediction, label] pairs")
        return data.reshape(-1, 2)
    if layout != DLRMV3:
        raise ValueError(f"unknown response layout {layout!r}: {DLRM} or {DLRMV3}")
    if data.size < HEADER + FOOTER:
        raise ResponseError(f"sample {index} came back with {data.size} floats, fewer than DLRMv3's ts_idx, query_idx and count")
    n = int(data[-1])
    if data[-1] != n or n < 0 or data.size != HEADER + 3 * n + FOOTER:
        raise ResponseError(f"sample {index} came back with {data.size} floats and a candidate count of {data[-1]:g}: "
                            f"DLRMv3's layout holds 3 + 3 x count")
    if data[1] != index:
        raise ResponseError(f"sample {index} came back as query_idx {data[1]:g}: a response went to the wrong sample")
    predictions, labels = data[HEADER:HEADER + n], data[HEADER + n:HEADER + 2 * n]
    return np.stack([predictions, labels], axis=1)
