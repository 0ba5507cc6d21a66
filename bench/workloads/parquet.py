"""`parquet`: your own features from Parquet files (`workload=parquet workload.path=...`).

`workload.path` is a file, a folder (every `*.parquet` below it) or a glob; files are read in sorted
order with pyarrow, in streamed record batches of `read_rows` rows, so no split is held in memory.
The schema mapping (`bench.workloads.parquet_columns`): `label`, `dense` float columns and `sparse` id
columns (scalar ids one-hot, lists of ids multi-hot, integer or string ids); left out (null), `dense`
is every floating-point column but the label and `sparse` every integer, string or list column left;
an inferred column whose name suggests the label (`parquet_columns.LEAK_WORDS`) is refused.

Splits, as declared:
    row_hash  a row is in eval when a seeded hash of its position (file order, then row) falls below
              `eval_fraction`, else in train; the same rows every run for the same files and `split_seed`.
    files     files whose names match `eval_files` (fnmatch patterns) are eval, those matching
              `calibration_files` the calibration split, the rest train.
Calibration is otherwise the first `calibration_samples` train rows, as in the other workloads.

A first pass over the files counts the rows of each split, the bad rows by kind (dropped), and, for
tables whose size the config does not give, the ids: an integer column reduced by `modulo` gets
max id + 1 rows (every id its own row), a hashed one twice its distinct ids (a load of 0.5). It is cached
under `<cache_dir>/parquet/`, keyed by the files' identity (path, size, mtime) and the mapping. Every
batch then streams the same rows again: eval yields each eval row exactly once, in order, and the
count checks of scoring hold it to the first pass's count.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from omegaconf import MISSING, OmegaConf
from sklearn.metrics import roc_auc_score
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch
from bench.config import WorkloadConfig
from bench.errors import UserError
from bench.hashing import config_hash, plain
from bench.io import write_json_atomic
from bench.registry import register
from bench.workloads.workload import SPLITS, TableSpec, Workload
from bench.workloads.parquet_columns import (
    BAD_KINDS,
    HASH,
    ID_REDUCTIONS,
    Columns,
    Decoded,
    decode,
    problems,
    reduce_ids,
    resolve_columns,
)

log = logging.getLogger(__name__)

ROW_HASH, FILES = "row_hash", "files"
TRAIN, EVAL, CALIBRATION = 0, 1, 2  # where a row goes
MAX_COUNTED_ROWS = 100_000_000  # a counted modulo table larger than this needs table_rows or ids=hash
MAX_EXAMPLES = 10  # bad rows named in the report
_SEED_MIX = 0x9E3779B97F4A7C15


@dataclass
class ParquetConfig(WorkloadConfig):
    name: str = "parquet"
    path: str = MISSING  # a file, a folder of *.parquet files, or a glob
    train_samples: int = -1  # -1: every row of the split; otherwise its first N rows
    eval_samples: int = -1
    calibration_samples: int = 16384
    label: str = "label"
    dense: Optional[list[str]] = None  # null: every floating-point column but the label (and oracle)
    sparse: Optional[list[str]] = None  # null: every integer, string or list column left
    # Rows of each sparse column's table; a column not named here is counted in the first pass.
    table_rows: dict[str, int] = field(default_factory=dict)
    ids: str = "modulo"  # modulo | hash: how an integer id becomes a row (string ids are always hashed)
    ids_per_column: dict[str, str] = field(default_factory=dict)  # column -> modulo | hash, over `ids`
    split: str = ROW_HASH  # row_hash | files
    eval_fraction: float = 0.2  # row_hash: the share of rows in eval
    split_seed: int = 0  # row_hash: another seed, other rows in eval
    eval_files: list[str] = field(default_factory=list)  # files: name patterns of the eval files
    calibration_files: list[str] = field(default_factory=list)  # files: of the calibration split (else first train rows)
    oracle: Optional[str] = None  # a column holding the true score of generated data: the oracle AUC
    # List columns that are sequences (ordered, oldest first): looked up unpooled through an EmbeddingCollection
    # (the factory's embedding_collection=), not pooled into a bag (docs/sequential.md).
    sequence_features: list[str] = field(default_factory=list)
    read_rows: int = 65536  # rows per streamed read

    def validate(self) -> None:
        if self.split not in (ROW_HASH, FILES):
            raise UserError(f"workload.split={self.split!r}: choose row_hash (a seeded hash of each row's position) or files (eval_files)")
        if self.split == ROW_HASH and not 0 < self.eval_fraction < 1:
            raise UserError(f"workload.eval_fraction={self.eval_fraction}: give a share of the rows between 0 and 1")
        if self.split == FILES and not self.eval_files:
            raise UserError("workload.split=files needs workload.eval_files=[PATTERN,...]: the names of the eval files")
        if self.ids not in ID_REDUCTIONS:
            raise UserError(f"workload.ids={self.ids!r}: choose modulo or hash")
        bad = {k: v for k, v in self.table_rows.items() if int(v) < 1}
        if bad:
            raise UserError(f"workload.table_rows {bad}: give each table at least one row")
        if self.read_rows < 1:
            raise UserError(f"workload.read_rows={self.read_rows}: give a positive number of rows")


def data_files(path: str) -> list[Path]:
    """The Parquet files `path` names: the file, every *.parquet below a folder, or a glob's matches."""
    p = Path(path).expanduser()
    if p.is_file():
        return [p]
    if p.is_dir():
        found = sorted(f for f in p.rglob("*.parquet") if f.is_file())
    else:
        found = sorted(Path(f) for f in glob.glob(str(p), recursive=True) if Path(f).is_file())
    if not found:
        raise UserError(f"workload.path={path}: no Parquet files there (a file, a folder of *.parquet files, or a glob)")
    return found


def file_identity(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _open(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"workload.path: {path} is not a readable Parquet file ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None


@register("workload", "parquet", config=ParquetConfig)
class ParquetWorkload(Workload):
    def __init__(self, cfg, seed: int, cache_dir) -> None:
        super().__init__(cfg, seed, cache_dir)
        if not isinstance(cfg, ParquetConfig):  # a DictConfig: validate against the schema
            self.cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ParquetConfig), cfg))
        self.cfg.validate()
        self.files = data_files(self.cfg.path)
        self.columns = self._columns()
        self.assignment = [self._file_split(f) for f in self.files]
        self._told = False  # the bad rows were logged

    def _columns(self) -> Columns:
        """The mapping, resolved against every file's schema: they must agree."""
        resolved = None
        for path in self.files:
            columns = resolve_columns(self.cfg, _open(path).schema_arrow, str(path))
            if resolved is not None and columns != resolved:
                raise UserError(f"{path} maps to other columns or types than {self.files[0]}: {columns.describe()} vs {resolved.describe()}")
            resolved = columns
        return resolved

    def _file_split(self, path: Path) -> int | None:
        """The split of every row of a file (files mode), or None (row_hash: decided row by row)."""
        if self.cfg.split == ROW_HASH:
            return None
        if any(fnmatch.fnmatch(path.name, p) for p in self.cfg.eval_files):
            return EVAL
        if any(fnmatch.fnmatch(path.name, p) for p in self.cfg.calibration_files):
            return CALIBRATION
        return TRAIN

    # ------------------------------------------------------------------------------ reading

    def _rows(self) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, pa.RecordBatch]]:
        """(file index, first row in file, split of each row, problem of each row, batch), streamed."""
        names = self.columns.names()
        offset = 0
        for index, path in enumerate(self.files):
            reader = _open(path)
            start = 0
            try:
                for batch in reader.iter_batches(batch_size=self.cfg.read_rows, columns=names):
                    n = batch.num_rows
                    yield index, start, self._splits(index, offset + start, n), problems(batch, self.columns), batch
                    start += n
            except pa.ArrowException as exc:
                raise UserError(f"workload.path: {path} could not be read past row {start} ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
            offset += reader.metadata.num_rows

    def _splits(self, file_index: int, first_row: int, n: int) -> np.ndarray:
        fixed = self.assignment[file_index]
        if fixed is not None:
            return np.full(n, fixed, dtype=np.int8)
        position = np.arange(first_row, first_row + n, dtype=np.uint64)
        mix = np.uint64((self.cfg.split_seed * _SEED_MIX + 1) & 0xFFFFFFFFFFFFFFFF)
        u = (pd.util.hash_array(position ^ mix) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        return np.where(u < self.cfg.eval_fraction, EVAL, TRAIN).astype(np.int8)

    def _whole(self, split: int) -> Iterator[Decoded]:
        """The whole rows of one split, decoded, in file order."""
        for _, _, where, bad, batch in self._rows():
            keep = (where == split) & (bad == 0)
            if keep.any():
                yield decode(batch.filter(pa.array(keep)), self.columns)

    # ---------------------------------------------------------------------------- first pass

    @cached_property
    def stats(self) -> dict:
        """The first pass: rows per split, bad rows by kind, id counts per column; cached on disk."""
        key = config_hash({"files": self.data_identity(), "cfg": self._mapping_config()})
        path = self.cache_dir / "parquet" / f"{key}.json"
        if path.exists():
            try:
                return json.loads(path.read_text())
            except (OSError, ValueError):
                log.warning("parquet stats cache %s is unreadable: counting again", path)
        stats = self._count()
        write_json_atomic(path, stats)
        return stats

    def _mapping_config(self) -> dict:
        """The config parts the first pass depends on (not the sample caps)."""
        c = plain(self.cfg)
        for k in ("train_samples", "eval_samples", "calibration_samples", "tag", "read_rows"):
            c.pop(k, None)
        return c

    def _count(self) -> dict:
        rows = np.zeros(3, dtype=np.int64)
        by_kind = np.zeros(len(BAD_KINDS) + 1, dtype=np.int64)
        examples: list[dict] = []
        sparse = self.columns.sparse
        max_id = [-1] * len(sparse)
        ids_seen = [0] * len(sparse)
        distinct = [_Distinct() for _ in sparse]
        counted = [s.name not in self.cfg.table_rows for s in sparse]
        for index, start, where, bad, batch in self._rows():
            by_kind += np.bincount(bad, minlength=len(BAD_KINDS) + 1)
            for row in np.flatnonzero(bad)[: MAX_EXAMPLES - len(examples)]:
                examples.append({"file": self.files[index].name, "row": int(start + row), "kind": BAD_KINDS[bad[row] - 1]})
            keep = bad == 0
            rows += np.bincount(where[keep], minlength=3)
            if not keep.any():
                continue
            decoded = decode(batch.filter(pa.array(keep)), self.columns)
            for j, column in enumerate(sparse):
                ids = decoded.ids[j]
                ids_seen[j] += len(ids)
                if not counted[j] or not len(ids):
                    continue
                if column.reduction == HASH:
                    distinct[j].add(ids)
                else:
                    max_id[j] = max(max_id[j], int(ids.max()))
        total = int(rows.sum())
        return {
            "rows": {"train": int(rows[TRAIN]), "eval": int(rows[EVAL]), "calibration": int(rows[CALIBRATION])},
            "whole_rows": total,
            "bad": {"count": int(by_kind[1:].sum()), "by_kind": {k: int(n) for k, n in zip(BAD_KINDS, by_kind[1:]) if n},
                    "examples": examples},
            "columns": {s.name: {"ids": ids_seen[j], "max_id": max_id[j] if counted[j] and s.reduction != HASH else None,
                                 "distinct": len(distinct[j]) if counted[j] and s.reduction == HASH else None}
                        for j, s in enumerate(sparse)},
        }

    def check_data(self) -> None:
        self._check_sequences()
        stats = self.stats
        if stats["whole_rows"] == 0:
            raise UserError(f"workload.path={self.cfg.path}: no whole rows to read ({bad_summary(stats['bad'])})")
        if stats["rows"]["eval"] == 0:
            raise UserError(f"workload.path={self.cfg.path}: the eval split is empty ({self._split_note()}); {bad_summary(stats['bad'])}")

    # ------------------------------------------------------------------------ the contract

    def _check_sequences(self) -> None:
        lists = {s.name for s in self.columns.sparse if s.multi_hot}
        wrong = [c for c in self.cfg.sequence_features if c not in lists]
        if wrong:
            raise UserError(f"workload.sequence_features names {wrong}, which are not list columns among the sparse features "
                            f"(those are {sorted(lists)}): a sequence is a list of ids per row")

    @cached_property
    def tables(self) -> list[TableSpec]:  # type: ignore[override]
        self._check_sequences()
        stats = self.stats
        whole = max(1, stats["whole_rows"])
        out = []
        for column in self.columns.sparse:
            info = stats["columns"][column.name]
            rows = self.cfg.table_rows.get(column.name)
            if rows is None:
                rows = 2 * max(1, info["distinct"]) if column.reduction == HASH else info["max_id"] + 1
                if rows > MAX_COUNTED_ROWS:
                    raise UserError(
                        f"column {column.name!r}: ids reach {rows - 1}, too large a table to count; give workload.table_rows.{column.name}=ROWS "
                        f"or workload.ids_per_column.{column.name}=hash"
                    )
            out.append(TableSpec(name=f"t_{column.name}", feature=column.name, num_embeddings=max(1, int(rows)),
                                 pooling=max(1, round(info["ids"] / whole)), sequence=column.name in self.cfg.sequence_features))
        return out

    @property
    def num_dense(self) -> int:  # type: ignore[override]
        return len(self.columns.dense)

    def _source(self, split: str) -> int:
        if split == "calibration" and not (self.cfg.split == FILES and self.cfg.calibration_files):
            return TRAIN
        return {"train": TRAIN, "eval": EVAL, "calibration": CALIBRATION}[split]

    def num_samples(self, split: str) -> int:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        rows = self.stats["rows"]
        if split == "calibration":
            available = rows["calibration"] if self._source(split) == CALIBRATION else self.num_samples("train")
            return min(available, self.cfg.calibration_samples)
        cap = self.cfg.train_samples if split == "train" else self.cfg.eval_samples
        return rows[split] if cap < 0 else min(rows[split], cap)

    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        n = self.num_samples(split)
        if n == 0:
            raise UserError(f"workload parquet: the {split} split of {self.cfg.path} has no whole rows ({self._split_note()}; {bad_summary(self.stats['bad'])})")
        rows = [t.num_embeddings for t in self.tables]
        keys = [t.feature for t in self.tables]
        pending: list[Decoded] = []
        left, held = n, 0
        for part in self._whole(self._source(split)):
            part = _slice(part, 0, min(len(part), left))
            left -= len(part)
            pending.append(part)
            held += len(part)
            while held >= batch_size:
                merged = _concat(pending)
                yield _to_batch(_slice(merged, 0, batch_size), keys, rows)
                rest = _slice(merged, batch_size, len(merged))
                pending, held = ([rest] if len(rest) else []), len(rest)
            if left == 0:
                break
        if held:
            yield _to_batch(_concat(pending), keys, rows)

    def data_identity(self) -> dict:
        return {"files": [file_identity(f) for f in self.files]}

    def _split_note(self) -> str:
        if self.cfg.split == FILES:
            return f"split by file: eval files {list(self.cfg.eval_files)}"
        return f"split by a hash of each row's position (seed {self.cfg.split_seed}): {self.cfg.eval_fraction:.0%} eval"

    def mapping(self) -> str:
        inferred = tuple(part for part in ("dense", "sparse") if getattr(self.cfg, part) is None)
        return f"workload parquet columns: {self.columns.line(inferred)}"

    def describe(self) -> dict:
        stats = self.stats
        if stats["bad"]["count"] and not self._told:  # once per run, in the job's log (the record keeps the counts)
            log.warning("%s: %s", self.cfg.path, bad_summary(stats["bad"]))
            self._told = True
        return {
            "layout": "parquet",
            "files": len(self.files),
            "split": self._split_note(),
            "rows": {s: self.num_samples(s) for s in SPLITS},
            "bad_rows": stats["bad"],
            "columns": self.columns.describe(),
            "table_rows": {t.feature: t.num_embeddings for t in self.tables},
        }

    def oracle_auc(self) -> float | None:
        return self._oracle_auc

    @cached_property
    def _oracle_auc(self) -> float | None:
        if not self.columns.oracle:
            return None
        labels, scores, left = [], [], self.num_samples("eval")
        for part in self._whole(EVAL):
            part = _slice(part, 0, min(len(part), left))
            left -= len(part)
            labels.append(part.labels)
            scores.append(part.oracle)
            if left == 0:
                break
        y = np.concatenate(labels)
        return float(roc_auc_score(y, np.concatenate(scores))) if 0 < y.mean() < 1 else None


class _Distinct:
    """Distinct values of a stream of arrays: each batch's uniques are kept, and all of them are merged
    once they hold twice what the last merge left (so each value is sorted a bounded number of times)."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.held = self.merged = 0

    def add(self, values: np.ndarray) -> None:
        part = np.unique(values)
        self.parts.append(part)
        self.held += len(part)
        if self.held > 2 * self.merged + (1 << 20):
            self._merge()

    def _merge(self) -> None:
        self.parts = [np.unique(np.concatenate(self.parts))] if self.parts else []
        self.held = self.merged = len(self.parts[0]) if self.parts else 0

    def __len__(self) -> int:
        self._merge()
        return self.merged


def bad_summary(bad: dict) -> str:
    if not bad["count"]:
        return "no bad rows"
    kinds = ", ".join(f"{k}: {n}" for k, n in bad["by_kind"].items())
    first = "; ".join(f"{e['file']} row {e['row']}: {e['kind']}" for e in bad["examples"][:3])
    return f"{bad['count']} bad rows skipped ({kinds}); first: {first}"


def _slice(d: Decoded, start: int, stop: int) -> Decoded:
    ids = []
    for lengths, values in zip(d.lengths, d.ids):
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        ids.append(values[offsets[start]:offsets[stop]])
    return Decoded(d.labels[start:stop], d.dense[start:stop], [x[start:stop] for x in d.lengths], ids,
                   None if d.oracle is None else d.oracle[start:stop])


def _concat(parts: list[Decoded]) -> Decoded:
    if len(parts) == 1:
        return parts[0]
    return Decoded(
        np.concatenate([p.labels for p in parts]),
        np.concatenate([p.dense for p in parts]),
        [np.concatenate([p.lengths[j] for p in parts]) for j in range(len(parts[0].lengths))],
        [np.concatenate([p.ids[j] for p in parts]) for j in range(len(parts[0].ids))],
        None if parts[0].oracle is None else np.concatenate([p.oracle for p in parts]),
    )


def _to_batch(d: Decoded, keys: list[str], rows: list[int]) -> Batch:
    """KJT values are feature-major: all of feature 0's ids for the batch, then feature 1's..."""
    values = np.concatenate([reduce_ids(ids, r) for ids, r in zip(d.ids, rows)])
    lengths = np.concatenate(d.lengths)
    sparse = KeyedJaggedTensor(keys=keys, values=torch.from_numpy(values), lengths=torch.from_numpy(lengths))
    return Batch(dense=torch.from_numpy(np.ascontiguousarray(d.dense)), sparse=sparse, labels=torch.from_numpy(d.labels))
