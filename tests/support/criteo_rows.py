"""Generated (never real) rows in the Criteo layouts, for tests and benchmarks.

`write_text` streams any number of rows in the raw text layout (tab-separated, 40 fields, empty
fields, negative integers, 8-digit hex ids), chunk by chunk, so a 10M-row file needs no more
memory than one chunk. The binary writers produce the layouts of torchrec, facebookresearch/dlrm
and MLPerf from arrays, with the dtypes and names those tools use.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from bench.workloads.criteo.text import NUM_DENSE, NUM_SPARSE

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def random_rows(rng: np.random.Generator, n: int, vocab: int = 50_000) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(labels int8, dense int64, dense_missing bool, sparse uint32, sparse_missing bool)."""
    labels = (rng.random(n) < 0.25).astype(np.int8)
    dense = np.floor(rng.exponential(scale=np.geomspace(1, 2e4, NUM_DENSE), size=(n, NUM_DENSE))).astype(np.int64)
    dense[:, 1] -= rng.integers(0, 4, size=n) * (rng.random(n) < 0.1)  # I2 has -1..-3
    dense_missing = rng.random((n, NUM_DENSE)) < 0.2
    # ids: a per-table Zipf-ish draw from `vocab` values, spread over 32 bits by a fixed multiplier
    raw = np.minimum(rng.zipf(1.2, size=(n, NUM_SPARSE)), vocab).astype(np.uint64)
    sparse = ((raw * np.uint64(2654435761) + np.arange(NUM_SPARSE, dtype=np.uint64) * np.uint64(40503)) % np.uint64(2**32)).astype(np.uint32)
    sparse_missing = rng.random((n, NUM_SPARSE)) < 0.05
    return labels, dense, dense_missing, sparse, sparse_missing


def format_rows(labels, dense, dense_missing, sparse, sparse_missing, sep: str = "\t") -> bytes:
    """The text layout of the given rows (vectorized hex; decimal through numpy's str)."""
    n = labels.shape[0]
    hexes = np.empty((n, NUM_SPARSE, 8), dtype=np.uint8)
    for k in range(8):
        hexes[:, :, 7 - k] = _HEX[(sparse >> np.uint32(4 * k)) & np.uint32(15)]
    hex_str = hexes.view("S8").reshape(n, NUM_SPARSE).astype(str)
    hex_str[sparse_missing] = ""
    dense_str = dense.astype(str)
    dense_str[dense_missing] = ""
    cols = np.concatenate([labels.astype(str)[:, None], dense_str, hex_str], axis=1)
    return ("\n".join(sep.join(row) for row in cols.tolist()) + "\n").encode()


def write_text(path: Path, rows: int, seed: int = 0, chunk_rows: int = 100_000, sep: str = "\t") -> Path:
    """Stream `rows` generated rows to `path` (gzip when it ends with .gz)."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        for start in range(0, rows, chunk_rows):
            f.write(format_rows(*random_rows(rng, min(chunk_rows, rows - start)), sep=sep))
    return path


def generated_arrays(n: int, seed: int = 0, vocab: int = 1000):
    """(labels int32, raw dense int32 >= 0, contiguous ids int32 < vocab) for binary layouts."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.25).astype(np.int32)
    dense = np.floor(rng.exponential(50.0, size=(n, NUM_DENSE))).astype(np.int32)
    ids = rng.integers(0, vocab, size=(n, NUM_SPARSE)).astype(np.int32)
    return labels, dense, ids


def write_torchrec_npy(folder: Path, name: str, labels, dense, ids) -> None:
    """torchrec `BinaryCriteoUtils.tsv_to_npys` layout: dense already log-transformed (x + 3 shift)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / f"{name}_dense.npy", np.log(dense.astype(np.float32) + 3))
    np.save(folder / f"{name}_sparse.npy", ids.astype(np.int64))
    np.save(folder / f"{name}_labels.npy", labels.astype(np.int32).reshape(-1, 1))


def write_dlrm_bin(path: Path, labels, dense, ids) -> None:
    """facebookresearch/dlrm `numpy_to_binary`: int32 records [label, 13 raw ints, 26 ids]."""
    np.concatenate([labels.reshape(-1, 1), dense, ids], axis=1).astype(np.int32).tofile(path)


def write_dlrm_npz(path: Path, labels, dense, ids, compressed: bool = False) -> None:
    save = np.savez_compressed if compressed else np.savez
    save(path, X_int=dense.astype(np.int32), X_cat=ids.astype(np.int32), y=labels.astype(np.int32))


def write_mlperf_multihot(folder: Path, day: int, n: int, sizes: list[int], hot: list[int], seed: int = 0) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    np.save(folder / f"day_{day}_dense.npy", rng.random((n, NUM_DENSE)).astype(np.float32))
    np.save(folder / f"day_{day}_labels.npy", (rng.random((n, 1)) < 0.03).astype(np.int32))
    members = {str(j): rng.integers(0, sizes[j], size=(n, hot[j])).astype(np.int32) for j in range(NUM_SPARSE)}
    np.savez(folder / f"day_{day}_sparse_multi_hot.npz", **members)
