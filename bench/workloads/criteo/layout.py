"""The preprocessed layout: plain `.npy` files that grow in place, plus `meta.json`.

A folder written by `python -m bench.preprocess` holds, per source file (a "part"):

    <part>.dense.npy   float32 (n, 13)  log(max(x, 0) + 1) of the raw integers, missing -> 0
    <part>.sparse.npy  int32   (n, 26)  categorical ids in [0, num_embeddings[j])
    <part>.labels.npy  int8    (n,)     0 / 1, or -1 where the source had no label column

and `meta.json` (written last: its presence means the folder is complete) with the options, the
per-part row counts and malformed-line reports, and `num_embeddings` per table. Every `.npy` opens
with `np.load(path, mmap_mode="r")`.

The `.npy` header is written with room to spare (128 bytes) so that the shape can be rewritten
after every committed chunk: a file cut short by a kill is still a valid array of the committed
rows, and a resumed run truncates it to that size and appends.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from bench.errors import UserError

HEADER_BYTES = 128
LAYOUT_FORMAT = "bench-criteo-preprocessed"
LAYOUT_VERSION = 1
ARRAYS = {"dense": (np.float32, (13,)), "sparse": (np.int32, (26,)), "labels": (np.int8, ())}


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    text = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (descr, tuple(shape))
    body_len = HEADER_BYTES - 10
    if len(text) + 1 > body_len:
        raise ValueError(f"npy header too long: {text}")
    body = text.ljust(body_len - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", body_len) + body.encode("latin1")


class GrowingNpy:
    """Append rows to an `.npy` whose header states the committed row count."""

    def __init__(self, path: Path, dtype, row_shape: tuple[int, ...], rows: int = 0) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
        self.rows = rows
        mode = "r+b" if rows and self.path.exists() else "w+b"
        self.f = open(self.path, mode)
        if mode == "w+b":
            self.rows = 0
        self.f.truncate(HEADER_BYTES + self.rows * self.row_bytes)
        self._write_header()
        self.f.seek(0, os.SEEK_END)

    def _write_header(self) -> None:
        self.f.seek(0)
        self.f.write(npy_header(self.dtype, (self.rows, *self.row_shape)))

    def append(self, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array, dtype=self.dtype)
        assert array.shape[1:] == self.row_shape, (array.shape, self.row_shape)
        self.f.write(memoryview(array.reshape(-1)).cast("B"))  # no copy
        self.rows += array.shape[0]

    def commit(self) -> None:
        """Make the appended rows durable and visible in the header (one fsync).

        The header may reach the disk before the data; a resumed run trusts `progress.json`
        (written after this returns), truncates to its row count and rewrites the header."""
        self.f.flush()
        self._write_header()
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.seek(0, os.SEEK_END)

    def close(self) -> None:
        self.commit()
        self.f.close()


def log_dense(raw: np.ndarray) -> np.ndarray:
    """Raw dense integers -> the stored features: log(max(x, 0) + 1), computed in float64 and
    rounded to float32 (the one definition: preprocessing and raw binary layouts read at run time)."""
    return np.log1p(np.maximum(raw, 0), dtype=np.float64).astype(np.float32)


def capped(n: int, cap: int) -> int:
    """A table size `n` capped by `max_ind_range` (0: no cap)."""
    return min(n, cap) if cap > 0 else n


def part_paths(folder: Path, part: str) -> dict[str, Path]:
    return {kind: Path(folder) / f"{part}.{kind}.npy" for kind in ARRAYS}


def read_meta(folder: Path) -> dict | None:
    path = Path(folder) / "meta.json"
    if not path.exists():
        return None
    meta = json.loads(path.read_text())
    if meta.get("format") != LAYOUT_FORMAT:
        raise UserError(f"{path}: not a bench preprocessed Criteo folder (format {meta.get('format')!r})")
    if meta.get("version", 0) > LAYOUT_VERSION:
        raise UserError(f"{path}: layout version {meta['version']} is newer than this harness reads ({LAYOUT_VERSION})")
    return meta


