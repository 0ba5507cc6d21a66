"""Streaming preprocessing of Criteo text files into the memory-mapped layout of `layout.py`.

Memory stays bounded by the chunk size (4 MB of text per parsing worker, at most 8 workers),
whatever the input size (`benchmarks/scripts/preprocess_bench.py` measures its peak RSS). The
exception is the vocabulary of `frequency` and `first_seen`, which grows with the number of distinct
ids (12 bytes each while counting): the 1TB logs have too many for it and need `hash`.

Transforms (documented choices, as in facebookresearch/dlrm):

- dense: `log(max(x, 0) + 1)`, missing -> 0. Negative values (I2 holds -1, -2, -3) are clamped
  to 0 first, as DLRM does (`X_int[X_int < 0] = 0`), so every value is finite and the transform
  does not depend on the minimum of the data. torchrec's `tsv_to_npys` instead shifts by the
  minimum of the whole file (`log(x - min + 2)`, i.e. `log(x + 3)` on Criteo): that keeps the
  sign information of I2 but makes the transform depend on the file it was fitted on.
- categorical, `hash`: `id = int(hex, 16) % max_ind_range`, every table `max_ind_range` rows (the
  MLPerf / torchrec `hashes` convention). Missing ids are 0 before hashing, as in torchrec.
- categorical, `first_seen`: facebookresearch/dlrm's numbering (`data_utils.getCriteoAdData`).
  Each value is first reduced modulo `max_ind_range` when that is > 0 (dlrm's `--max-ind-range`;
  0 keeps the raw value, as dlrm's default -1 does), then numbered 0, 1, 2, ... per column in
  the order the values first appear, reading ALL sources in the order given (train, test and
  val rows alike, as dlrm does). Missing ids are the value 0, as in dlrm. Table j has K_j rows
  (the distinct values of column j), no rare row; a checkpoint trained by dlrm on the same rows
  and options indexes the same rows.
- categorical, `frequency`: per column, the raw ids seen at least `frequency_threshold` times
  across ALL sources (sorted by value) get ids 1..K; rarer ids map to 0, the shared
  "rare" row (torchrec's `sparse_to_contiguous` uses 1 for that and starts at 2). With
  `max_ind_range > 0` the contiguous ids are then taken modulo it. Table j has
  `min(K_j + 1, max_ind_range)` rows. This is not dlrm's numbering (`first_seen` is).

Resuming: after every chunk the three arrays are fsynced and their headers rewritten, then
`progress.json` records the input offset, the line number and the malformed-line report. A rerun
with the same sources and options truncates the arrays to the committed rows and goes on from
there (`.gz` inputs are decompressed again up to the offset). `meta.json` is written last.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bench.errors import UserError
from bench.hashing import config_hash
from bench.io import write_json_atomic
from bench.workloads.criteo import layout
from bench.workloads.criteo.text import (
    NUM_DENSE,
    NUM_SPARSE,
    Malformed,
    default_workers,
    read_chunks,
    sniff_file,
)

CATEGORICAL_MODES = ("hash", "frequency", "first_seen")
VOCAB_MODES = ("frequency", "first_seen")  # the modes that number ids through a vocabulary
CHECKPOINT_BYTES = 64 << 20  # text parsed between two durable checkpoints
REMAP_ROWS = 1 << 19


@dataclass(frozen=True)
class PreprocessOptions:
    categorical: str = "hash"  # hash | frequency | first_seen
    # hash: the modulus; frequency: optional cap on contiguous ids; first_seen: modulus applied
    # before numbering, dlrm's --max-ind-range (0 = none)
    max_ind_range: int = 40_000_000
    frequency_threshold: int = 1  # frequency: ids seen fewer times share id 0
    max_examples: int = 10  # malformed-line examples kept per source

    def validate(self) -> None:
        if self.categorical not in CATEGORICAL_MODES:
            raise UserError(f"categorical={self.categorical!r}: choose one of {', '.join(CATEGORICAL_MODES)}")
        if self.categorical == "hash" and not 0 < self.max_ind_range < 2**31:
            raise UserError(f"max_ind_range={self.max_ind_range}: hashing needs 0 < max_ind_range < 2**31")
        if self.categorical in VOCAB_MODES and not 0 <= self.max_ind_range < 2**31:
            raise UserError(f"max_ind_range={self.max_ind_range}: give 0 (none) or a value below 2**31")
        if self.frequency_threshold < 1:
            raise UserError(f"frequency_threshold={self.frequency_threshold}: give 1 (keep every id) or more")
        if self.categorical == "first_seen" and self.frequency_threshold != 1:
            raise UserError(f"frequency_threshold={self.frequency_threshold} applies to categorical=frequency only: dlrm's first_seen numbering keeps every id")

    def key(self) -> dict:
        """What changes the output (max_examples only changes the report)."""
        data = asdict(self)
        data.pop("max_examples")
        if self.categorical != "frequency":
            data.pop("frequency_threshold")
        return data


def source_identity(path: Path) -> dict:
    st = Path(path).stat()
    return {"path": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def identity(sources: Sequence[Path], options: PreprocessOptions) -> dict:
    """The sources' identity (path, size, mtime) and the output-changing options: what a finished
    or unfinished output folder must match to be reused."""
    return {"options": options.key(), "sources": [source_identity(s) for s in sources]}


def cache_key(sources: Sequence[Path], options: PreprocessOptions) -> str:
    """Hash of `identity(sources, options)`."""
    return config_hash(identity(sources, options))


def part_names(sources: Sequence[Path]) -> list[str]:
    names: list[str] = []
    for src in sources:
        name = Path(src).name
        name = re.sub(r"\.gz$", "", name)
        name = re.sub(r"\.(txt|tsv|csv)$", "", name)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "part"
        base, k = name, 1
        while name in names:
            k += 1
            name = f"{base}_{k}"
        names.append(name)
    return names


def day_of(name: str) -> int | None:
    m = re.fullmatch(r"day_(\d+)", name)
    return int(m.group(1)) if m else None


def preprocess(
    sources: Sequence[Path | str],
    out: Path | str,
    options: PreprocessOptions = PreprocessOptions(),
    chunk_bytes: int = 4 << 20,
    force: bool = False,
    checkpoint_bytes: int = CHECKPOINT_BYTES,
    log: Callable[[str], None] = lambda msg: None,
    on_chunk: Callable[[str, int], None] | None = None,
    workers: int | None = None,
) -> dict:
    """Preprocess `sources` into `out`; resume an interrupted run; return the folder's meta.

    A durable checkpoint is taken every `checkpoint_bytes` of text (and `on_chunk(part, rows)` is
    called after each one); an interrupted run redoes at most that much. `workers` (default: one
    per CPU, at most 8) parse chunks of `chunk_bytes` of text in parallel: forked processes for
    plain files, threads for `.gz`; 1 parses in this process. The output does not depend on it."""
    options.validate()
    workers = default_workers() if workers is None else max(1, int(workers))
    sources = [Path(s) for s in sources]
    for s in sources:
        if not s.is_file():
            raise UserError(f"{s}: no such file")
    out = Path(out)
    ident = identity(sources, options)
    if force and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = layout.read_meta(out)
    if meta is not None:
        if meta["identity"] == ident:
            return meta
        raise UserError(f"{out} holds data preprocessed from other sources or options: choose another --out or pass --force")
    progress_path = out / "progress.json"
    state = json.loads(progress_path.read_text()) if progress_path.exists() else None
    if state is not None and state["identity"] != ident:
        raise UserError(f"{out} holds an unfinished run with other sources or options: choose another --out or pass --force")
    if state is None:
        state = {"identity": ident, "parts": {}, "vocab_done": False}
    names = part_names(sources)

    for src, name in zip(sources, names):
        _parse_source(src, name, out, options, chunk_bytes, checkpoint_bytes, state, progress_path, log, on_chunk, workers)
    if options.categorical in VOCAB_MODES:
        vocab = _build_vocab(out, names, options, state, progress_path, log)
        for name in names:
            _remap_part(out, name, vocab, options, state, progress_path, on_chunk)
        if options.categorical == "frequency":
            num_embeddings = [layout.capped(len(v) + 1, options.max_ind_range) for v in vocab]
        else:
            num_embeddings = [len(v) for v in vocab]
    else:
        num_embeddings = [options.max_ind_range] * NUM_SPARSE

    kept = ("source", "rows", "lines", "labeled", "malformed")
    parts = [{"name": name, "day": day_of(name), **{k: state["parts"][name][k] for k in kept}} for name in names]
    meta = {
        "format": layout.LAYOUT_FORMAT,
        "version": layout.LAYOUT_VERSION,
        "identity": ident,
        "options": asdict(options),
        "dense_transform": "log(max(x,0)+1)",
        "num_embeddings": num_embeddings,
        "parts": parts,
    }
    write_json_atomic(out / "meta.json", meta)
    progress_path.unlink(missing_ok=True)
    return meta


def transform(dense: np.ndarray, sparse: np.ndarray, labels: np.ndarray, modulus: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw parsed values -> stored arrays: dense through `layout.log_dense`, sparse `% modulus` as
    int32 (hash mode, in place on the parser's array) or raw uint32 ids (modulus None).
    Runs where the chunk is parsed (a worker process or thread)."""
    out = layout.log_dense(dense)
    if modulus is not None:
        np.remainder(sparse, np.uint32(modulus), out=sparse)
        sparse = sparse.view(np.int32)  # values < modulus < 2**31
    return out, sparse, labels


def _parse_source(src, name, out, options, chunk_bytes, checkpoint_bytes, state, progress_path, log, on_chunk, workers) -> None:
    p = state["parts"].get(name)
    if p is not None and p["parsed"]:
        return
    fmt = sniff_file(src)
    if p is None:
        p = {"source": str(src), "rows": 0, "lines": 0, "offset": 0, "parsed": False, "remapped_rows": 0}
        p["labeled"] = fmt.has_label
        p["malformed"] = Malformed(options.max_examples).to_dict()
        state["parts"][name] = p
    malformed = Malformed.from_dict(p["malformed"], options.max_examples)
    paths = layout.part_paths(out, name)
    sparse_path = paths["sparse"] if options.categorical == "hash" else out / f"{name}.sparse_raw.npy"  # raw ids until numbered
    sparse_dtype = np.int32 if options.categorical == "hash" else np.uint32
    rows = p["rows"]
    writers = [
        layout.GrowingNpy(paths["dense"], np.float32, (NUM_DENSE,), rows),
        layout.GrowingNpy(sparse_path, sparse_dtype, (NUM_SPARSE,), rows),
        layout.GrowingNpy(paths["labels"], np.int8, (), rows),
    ]
    if rows or p["offset"]:
        log(f"{src}: resuming at line {p['lines'] + 1} ({rows} rows already written)")
    modulus = options.max_ind_range if options.categorical == "hash" else None
    chunks = read_chunks(
        src, malformed, chunk_bytes, start_offset=p["offset"], start_line=p["lines"], fmt=fmt, workers=workers, transform=partial(transform, modulus=modulus)
    )
    committed = p["offset"]
    chunk = None
    for chunk in chunks:
        for w, a in zip(writers, (chunk.dense, chunk.sparse, chunk.labels)):
            w.append(a)
        if chunk.end_offset - committed < checkpoint_bytes:
            continue
        committed = chunk.end_offset
        for w in writers:
            w.commit()
        p.update(rows=writers[0].rows, lines=chunk.lines, offset=chunk.end_offset, malformed=malformed.to_dict())
        write_json_atomic(progress_path, state)
        if on_chunk is not None:
            on_chunk(name, p["rows"])
    for w in writers:
        w.close()
    p.update(rows=writers[0].rows, lines=(p["lines"] if chunk is None else chunk.lines), malformed=malformed.to_dict(), parsed=True)
    write_json_atomic(progress_path, state)
    log(malformed.summary(str(src)))
    log(f"{src}: {p['rows']} rows from {p['lines']} lines")


def _merge(pieces: list[tuple[np.ndarray, np.ndarray]], reduce: np.ufunc) -> tuple[np.ndarray, np.ndarray]:
    """(values, numbers) pieces -> sorted distinct values, their numbers combined by `reduce`
    (np.add: counts; np.minimum: first positions)."""
    ids = np.concatenate([u for u, _ in pieces])
    numbers = np.concatenate([c for _, c in pieces])
    order = np.argsort(ids, kind="stable")
    ids, numbers = ids[order], numbers[order]
    if ids.size == 0:
        return ids, numbers
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    return ids[starts], reduce.reduceat(numbers, starts)


def first_seen_keys(col: np.ndarray, modulus: int) -> np.ndarray:
    """What dlrm numbers: the raw value, reduced modulo --max-ind-range when that is > 0."""
    return col % np.uint32(modulus) if modulus > 0 else col


def _build_vocab(out, names, options, state, progress_path, log) -> list[np.ndarray]:
    """Per column, the ids that get a row: `frequency`: the kept raw ids, sorted (row = position + 1);
    `first_seen`: every key in order of first appearance (row = position)."""
    vocab_dir = out / "vocab"
    files = [vocab_dir / f"c{j + 1}.npy" for j in range(NUM_SPARSE)]
    if state["vocab_done"]:
        return [np.load(f) for f in files]
    first_seen = options.categorical == "first_seen"
    reduce = np.minimum if first_seen else np.add
    acc: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.uint32), np.zeros(0, np.int64))] * NUM_SPARSE
    pending: list[list] = [[] for _ in range(NUM_SPARSE)]
    pending_size = [0] * NUM_SPARSE
    row0 = 0  # global row of the block: sources in the order given, rows in file order
    for name in names:
        raw = np.load(out / f"{name}.sparse_raw.npy", mmap_mode="r")
        for start in range(0, raw.shape[0], REMAP_ROWS):
            block = np.asarray(raw[start : start + REMAP_ROWS])
            for j in range(NUM_SPARSE):
                if first_seen:
                    u, first = np.unique(first_seen_keys(block[:, j], options.max_ind_range), return_index=True)
                    pending[j].append((u, first.astype(np.int64) + row0 + start))
                else:
                    u, c = np.unique(block[:, j], return_counts=True)
                    pending[j].append((u, c.astype(np.int64)))
                pending_size[j] += u.size
                if pending_size[j] > max(1 << 22, acc[j][0].size):
                    acc[j] = _merge([acc[j], *pending[j]], reduce)
                    pending[j], pending_size[j] = [], 0
        row0 += raw.shape[0]
    vocab_dir.mkdir(exist_ok=True)
    vocab = []
    for j in range(NUM_SPARSE):
        ids, numbers = _merge([acc[j], *pending[j]], reduce)
        kept = ids[np.argsort(numbers, kind="stable")] if first_seen else ids[numbers >= options.frequency_threshold]
        np.save(files[j], kept)
        vocab.append(kept)
    state["vocab_done"] = True
    write_json_atomic(progress_path, state)
    log("vocabulary sizes (ids kept per table): " + ",".join(str(v.size) for v in vocab))
    return vocab


def remap_ids(raw: np.ndarray, vocab: list[np.ndarray], cap: int) -> np.ndarray:
    """`frequency`: raw hex ids (n, 26) -> position in the sorted vocabulary + 1, 0 if rare, mod `cap` (0: none)."""
    out = np.empty(raw.shape, dtype=np.int32)
    for j in range(raw.shape[1]):
        v = vocab[j]
        col = raw[:, j]
        if v.size == 0:
            out[:, j] = 0
            continue
        idx = np.searchsorted(v, col)
        found = v[np.minimum(idx, v.size - 1)] == col
        ids = np.where(found, idx + 1, 0)
        if cap > 0:
            ids %= cap
        out[:, j] = ids
    return out


def first_seen_lookups(vocab: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per column (sorted keys, their rows) from keys listed in order of first appearance."""
    lookups = []
    for v in vocab:
        order = np.argsort(v, kind="stable")
        lookups.append((v[order], order.astype(np.int32)))
    return lookups


def remap_first_seen(raw: np.ndarray, lookups: list[tuple[np.ndarray, np.ndarray]], modulus: int) -> np.ndarray:
    """`first_seen`: raw hex ids (n, 26) -> the row dlrm gives them (every key is in the vocabulary)."""
    out = np.empty(raw.shape, dtype=np.int32)
    for j, (keys, rows) in enumerate(lookups):
        out[:, j] = rows[np.searchsorted(keys, first_seen_keys(raw[:, j], modulus))]
    return out


def _remap_part(out, name, vocab, options, state, progress_path, on_chunk) -> None:
    p = state["parts"][name]
    raw_path = out / f"{name}.sparse_raw.npy"
    if p.get("remapped", False):
        return
    raw = np.load(raw_path, mmap_mode="r")
    if options.categorical == "first_seen":
        remap = partial(remap_first_seen, lookups=first_seen_lookups(vocab), modulus=options.max_ind_range)
    else:
        remap = partial(remap_ids, vocab=vocab, cap=options.max_ind_range)
    writer = layout.GrowingNpy(layout.part_paths(out, name)["sparse"], np.int32, (NUM_SPARSE,), p["remapped_rows"])
    for start in range(writer.rows, raw.shape[0], REMAP_ROWS):
        writer.append(remap(np.asarray(raw[start : start + REMAP_ROWS])))
        writer.commit()
        p["remapped_rows"] = writer.rows
        write_json_atomic(progress_path, state)
        if on_chunk is not None:
            on_chunk(name, writer.rows)
    writer.close()
    del raw
    p["remapped"] = True
    write_json_atomic(progress_path, state)
    os.unlink(raw_path)
