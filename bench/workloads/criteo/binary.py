"""Readers for the binary Criteo layouts found in the wild, each to a list of `Part`s (mmap).

- ours (`python -m bench.preprocess`): `meta.json` + `<part>.{dense,sparse,labels}.npy`.
- torchrec `BinaryCriteoUtils`: `day_N_dense.npy` float32 (n, 13) already log-transformed,
  `day_N_sparse.npy` (n, 26) int32/int64 (raw hex values, or contiguous ids in the
  `day_N_sparse_contig_freq.npy` files of `sparse_to_contiguous`), `day_N_labels.npy` (n, 1).
- facebookresearch/dlrm `.bin`: flat int32 records of 40 fields `[label, 13 raw ints, 26 ids]`
  (`terabyte_processed_{train,test,val}.bin` or any `*.bin`); dense is log-transformed on read.
- facebookresearch/dlrm `day_N_reordered.npz` (or any npz) with `X_int`, `X_cat`, `y`.
- MLPerf `Criteo1TBMultiHotPreprocessed`: `day_N_dense.npy`, `day_N_labels.npy`,
  `day_N_sparse_multi_hot.npz` with members `0.npy`..`25.npy`, int32 (n, k_j).

Members of an `.npz` stored without compression (what `np.savez` writes) are memory-mapped at
their offset in the zip; compressed members (`np.savez_compressed`) are loaded into memory.
"""

from __future__ import annotations

import re
import struct
import zipfile
from pathlib import Path

import numpy as np

from bench.errors import UserError
from bench.workloads.criteo import layout
from bench.workloads.criteo.source import NUM_SPARSE, Part

DLRM_BIN_FIELDS = 40


def npz_member(path: Path, member: str) -> np.ndarray:
    """One array of an `.npz`, memory-mapped when stored uncompressed."""
    name = member if member.endswith(".npy") else member + ".npy"
    with zipfile.ZipFile(path) as z:
        try:
            info = z.getinfo(name)
        except KeyError:
            raise UserError(f"{path}: no member {name!r} (has {', '.join(z.namelist()[:30])})") from None
        if info.compress_type != zipfile.ZIP_STORED:
            with z.open(info) as f:
                return np.lib.format.read_array(f)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if local[:4] != b"PK\x03\x04":
            raise UserError(f"{path}: corrupt zip entry {name!r}")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        f.seek(info.header_offset + 30 + name_len + extra_len)
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(f)
        offset = f.tell()
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def _day(name: str) -> int | None:
    m = re.search(r"day_(\d+)", name)
    return int(m.group(1)) if m else None


def read_preprocessed(folder: Path) -> tuple[list[Part], dict]:
    meta = layout.read_meta(folder)
    if meta is None:
        raise UserError(f"{folder}: no meta.json; preprocess it with `python -m bench.preprocess SRC --out {folder}`")
    parts = []
    for p in meta["parts"]:
        paths = layout.part_paths(folder, p["name"])
        arrays = {k: np.load(v, mmap_mode="r") for k, v in paths.items()}
        parts.append(Part(name=p["name"], day=p["day"], dense=arrays["dense"], sparse=arrays["sparse"], labels=arrays["labels"],
                          malformed=p.get("malformed")))
    return parts, meta


def read_torchrec_npy(folder: Path) -> list[Part]:
    folder = Path(folder)
    parts = []
    for dense_path in sorted(folder.glob("*_dense.npy"), key=lambda p: (_day(p.name) or 0, p.name)):
        stem = dense_path.name[: -len("_dense.npy")]
        sparse_path = folder / f"{stem}_sparse_contig_freq.npy"
        if not sparse_path.exists():
            sparse_path = folder / f"{stem}_sparse.npy"
        labels_path = folder / f"{stem}_labels.npy"
        for p in (sparse_path, labels_path):
            if not p.exists():
                raise UserError(f"{folder}: {dense_path.name} has no matching {p.name}")
        parts.append(
            Part(
                name=stem,
                day=_day(stem),
                dense=np.load(dense_path, mmap_mode="r"),
                sparse=np.load(sparse_path, mmap_mode="r"),
                labels=np.load(labels_path, mmap_mode="r"),
                note=f"torchrec npy ({sparse_path.name})",
            )
        )
    return parts


def read_dlrm_bin(path: Path) -> Part:
    path = Path(path)
    size = path.stat().st_size
    record = DLRM_BIN_FIELDS * 4
    if size % record:
        raise UserError(f"{path}: {size} bytes is not a whole number of {DLRM_BIN_FIELDS}-field int32 records")
    data = np.memmap(path, dtype=np.int32, mode="r", shape=(size // record, DLRM_BIN_FIELDS)) if size else np.zeros((0, DLRM_BIN_FIELDS), np.int32)
    return Part(
        name=path.stem,
        day=_day(path.stem),
        labels=data[:, 0],
        dense=data[:, 1:14],
        sparse=data[:, 14:],
        dense_is_raw=True,
        note="facebookresearch/dlrm .bin",
    )


def read_dlrm_npz(path: Path) -> Part:
    path = Path(path)
    return Part(
        name=path.stem,
        day=_day(path.stem),
        dense=npz_member(path, "X_int"),
        sparse=npz_member(path, "X_cat"),
        labels=npz_member(path, "y"),
        dense_is_raw=True,
        note="facebookresearch/dlrm npz",
    )


def read_mlperf_multihot(folder: Path) -> list[Part]:
    folder = Path(folder)
    parts = []
    for npz in sorted(folder.glob("day_*_sparse_multi_hot.npz"), key=lambda p: _day(p.name)):
        day = _day(npz.name)
        members = [npz_member(npz, f"{j}") for j in range(NUM_SPARSE)]
        members = [m.reshape(-1, 1) if m.ndim == 1 else m for m in members]
        parts.append(
            Part(
                name=f"day_{day}",
                day=day,
                dense=np.load(folder / f"day_{day}_dense.npy", mmap_mode="r"),
                labels=np.load(folder / f"day_{day}_labels.npy", mmap_mode="r"),
                multi_hot=members,
                note="MLPerf Criteo1TBMultiHotPreprocessed",
            )
        )
    return parts


def detect_binary(path: Path) -> tuple[str, list[Part]]:
    """Layout name and parts of a binary file or folder (not ours, not text)."""
    path = Path(path)
    if path.is_file():
        if path.suffix == ".bin":
            return "dlrm_bin", [read_dlrm_bin(path)]
        if path.suffix == ".npz":
            return "dlrm_npz", [read_dlrm_npz(path)]
        raise UserError(f"{path}: not a binary Criteo file (.bin or .npz)")
    if not path.is_dir():
        raise UserError(f"{path}: no such file or folder")
    if any(path.glob("day_*_sparse_multi_hot.npz")):
        return "mlperf_multihot", read_mlperf_multihot(path)
    if any(path.glob("*_dense.npy")):
        return "torchrec_npy", read_torchrec_npy(path)
    bins = sorted(path.glob("*.bin"))
    if bins:
        return "dlrm_bin", [read_dlrm_bin(b) for b in bins]
    npzs = sorted(path.glob("*.npz"), key=lambda p: (_day(p.name) or 0, p.name))
    if npzs:
        return "dlrm_npz", [read_dlrm_npz(n) for n in npzs]
    raise UserError(
        f"{path}: no Criteo binary layout found (torchrec *_dense.npy, dlrm *.bin / *.npz, MLPerf day_N_sparse_multi_hot.npz)"
    )


def column_max(parts: list[Part], rows_per_read: int = 1 << 20) -> list[int]:
    """Largest id per table over all parts (streaming)."""
    best = np.full(NUM_SPARSE, -1, dtype=np.int64)
    for p in parts:
        for a in range(0, p.rows, rows_per_read):
            b = min(a + rows_per_read, p.rows)
            if p.multi_hot is not None:
                cols = [np.asarray(m[a:b]).max(initial=-1) for m in p.multi_hot]
            else:
                cols = np.asarray(p.sparse[a:b]).max(axis=0, initial=-1)
            best = np.maximum(best, np.asarray(cols, dtype=np.int64))
    return [int(x) for x in best]
