"""The machinery shared by the `criteo_*` workloads: config schema, opening data, splits, batches.

Subclasses say how to open `cfg.path` (`_open`) and which split convention applies (`_split`).
A raw text file is preprocessed once into `<cache_dir>/criteo/<workload>-<key>/`, where the key
hashes the file identity (path, size, mtime) and the preprocessing options; later runs, and
parallel runs (a file lock serialises them), reuse it.
"""

from __future__ import annotations

import fcntl
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from omegaconf import MISSING

from bench.batch import Batch
from bench.config import WorkloadConfig
from bench.errors import UserError
from bench.workloads.workload import SPLITS, TableSpec, Workload
from bench.workloads.criteo import layout
from bench.workloads.criteo.text import sniff_file
from bench.workloads.criteo.convert import (
    PreprocessOptions,
    cache_key,
    preprocess,
    source_identity,
)
from bench.workloads.criteo.source import (
    FEATURES,
    NUM_SPARSE,
    TABLES,
    Part,
    Split,
    iter_batches,
)

EVAL_SPLITS = ("test", "val")


@dataclass
class CriteoConfig(WorkloadConfig):
    # A raw text file / folder of day files, a `python -m bench.preprocess` folder, or a binary layout.
    path: str = MISSING
    train_samples: int = -1  # -1: every row of the split; otherwise its first N rows
    eval_samples: int = -1
    calibration_samples: int = 16384  # the first N rows of the train split
    eval_split: str = "test"  # test: first half of the held-out rows; val: the second half

    def validate(self) -> None:
        check_eval_split(self.eval_split)


@dataclass
class CriteoTextConfig(CriteoConfig):
    # How raw text is preprocessed (a folder that is already preprocessed keeps its own options).
    categorical: str = "hash"  # hash | frequency | first_seen (facebookresearch/dlrm's numbering)
    # hash: the modulus; frequency: a cap on ids; first_seen: dlrm's --max-ind-range (0: none)
    max_ind_range: int = 40_000_000
    frequency_threshold: int = 1

    def validate(self) -> None:
        super().validate()
        options = PreprocessOptions(categorical=self.categorical, max_ind_range=self.max_ind_range, frequency_threshold=self.frequency_threshold)
        try:
            options.validate()
        except UserError as exc:
            raise UserError(f"workload.{exc}") from None


def check_eval_split(eval_split: str) -> None:
    if eval_split not in EVAL_SPLITS:
        raise UserError(f"workload.eval_split={eval_split!r}: choose test or val")


class CriteoWorkload(Workload):
    def __init__(self, cfg, seed: int, cache_dir: Path) -> None:
        super().__init__(cfg, seed, cache_dir)
        check_eval_split(cfg.eval_split)
        self._state: dict | None = None

    # --- subclass hooks -------------------------------------------------------------------
    def _open(self, path: Path) -> tuple[list[Part], list[int], str]:
        """(parts, num_embeddings per table, layout name)."""
        raise NotImplementedError

    def _split(self, parts: list[Part]) -> tuple[Split, Split, Split, str]:
        """(train, eval, other held-out half, note)."""
        raise NotImplementedError

    def _text_sources(self, path: Path) -> list[Path]:
        """The raw text files `_open` would preprocess from `path` ([] when it reads no text)."""
        return []

    def check_data(self) -> None:
        """Before any work: the path exists, and each raw text source's first line is a Criteo line (its
        field count and format, `sniff_file`): a file of another kind is one line, with nothing cached."""
        path = Path(self.cfg.path).expanduser()
        if not path.exists():
            raise UserError(f"workload.path={self.cfg.path!r}: no such file or folder")
        for source in self._text_sources(path):
            sniff_file(source)

    # --- helpers for subclasses -----------------------------------------------------------
    def preprocess_options(self) -> PreprocessOptions:
        c = self.cfg
        return PreprocessOptions(categorical=c.categorical, max_ind_range=c.max_ind_range, frequency_threshold=c.frequency_threshold)

    def preprocessed(self, sources: list[Path]) -> Path:
        """The cache folder holding `sources` preprocessed with this config's options."""
        options = self.preprocess_options()
        options.validate()
        root = self.cache_dir / "criteo"
        root.mkdir(parents=True, exist_ok=True)
        out = root / f"{self.cfg.name}-{cache_key(sources, options)}"
        with open(root / f"{out.name}.lock", "w") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            if layout.read_meta(out) is None:
                # One process: forking workers from a process that already runs torch's thread
                # pools risks the deadlocks DataLoader warns about; the CLI parallelises instead.
                preprocess(sources, out, options, workers=1)
        return out

    # --- the Workload contract ------------------------------------------------------------
    def _load(self) -> dict:
        if self._state is None:
            path = Path(self.cfg.path).expanduser()
            if not path.exists():
                raise UserError(f"workload.path={self.cfg.path!r}: no such file or folder")
            parts, num_embeddings, layout_name = self._open(path)
            if not parts:
                raise UserError(f"workload.path={self.cfg.path!r}: no data found")
            pooling = parts[0].pooling
            if any(p.pooling != pooling for p in parts):
                raise UserError(f"workload.path={self.cfg.path!r}: parts disagree on ids per table")
            train, ev, other, note = self._split(parts)
            train = train.head(self.cfg.train_samples)
            if train.rows:
                calib = train.head(self.cfg.calibration_samples)
            else:
                calib = other.head(self.cfg.calibration_samples)
                note += "; no train rows: calibration comes from the other held-out half"
            self._state = {
                "tables": [
                    TableSpec(name=TABLES[j], feature=FEATURES[j], num_embeddings=int(num_embeddings[j]), pooling=pooling[j])
                    for j in range(NUM_SPARSE)
                ],
                "splits": {"train": train, "calibration": calib, "eval": ev.head(self.cfg.eval_samples)},
                "layout": layout_name,
                "note": note,
                "malformed": malformed_lines(parts),
            }
        return self._state

    @property
    def tables(self) -> list[TableSpec]:
        return self._load()["tables"]

    def split(self, split: str) -> Split:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        return self._load()["splits"][split]

    def num_samples(self, split: str) -> int:
        return self.split(split).rows

    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        s = self.split(split)
        if s.rows == 0:
            raise UserError(f"workload {self.cfg.name}: the {split} split of {self.cfg.path} is empty ({self._load()['note']})")
        return iter_batches(s, batch_size)

    def data_identity(self) -> dict:
        path = Path(self.cfg.path).expanduser()
        return source_identity(path) if path.exists() else {"path": str(path)}

    def describe(self) -> dict:
        """What was read and how it was split (for run records and logs)."""
        state = self._load()
        return {
            "layout": state["layout"],
            "split": state["note"],
            "rows": {k: v.rows for k, v in state["splits"].items()},
            **({"malformed": state["malformed"]} if state["malformed"] is not None else {}),
        }


def malformed_lines(parts: list[Part]) -> dict | None:
    """Malformed lines skipped in the raw text behind `parts`, counted by kind (None: not read from text)."""
    reports = [p.malformed for p in parts if p.malformed is not None]
    if not reports:
        return None
    by_reason: dict[str, int] = {}
    for r in reports:
        for reason, n in r["by_reason"].items():
            by_reason[reason] = by_reason.get(reason, 0) + n
    return {"count": sum(r["count"] for r in reports), "by_reason": by_reason}
