"""`movielens`: MovieLens-100K, real ratings with timestamps, as a sequential workload.

The files are read from the installed `recbole` package's data (`recbole/dataset_example/ml-100k/`), located
with `importlib.util.find_spec` and never imported: `pip install --no-deps recbole==1.2.1` (`make
setup-movielens`) brings them without recbole's own requirements. The project ships none of the data.

Rows: every rating of every user, in time order per user (ties by item id). A row's history is the user's
earlier rated items (the last `history_length`, oldest first, each with its age in seconds at the rating);
its candidate is the rated item; its label is 1 where the rating is at least `positive_rating` (4: about
55% of the ratings). Split: chronological leave-last-out per user: each user's last rating is eval, the
others train, shuffled by `seed` (the calibration split is the first train rows). Each row is its own
request. Pooled features: user_id, age, gender, occupation. Dense: log(1 + history length) and log(1 +
hours since the user's previous rating).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from bench.batch import Batch
from bench.config import WorkloadConfig
from bench.errors import UserError
from bench.registry import register
from bench.workloads.sequence_batch import CANDIDATE, HISTORY, SEQUENCES, SequenceRows, batches_of, popularity_auc, segments
from bench.workloads.workload import SPLITS, Sequences, TableSpec, Workload

PACKAGE, VERSION = "recbole", "1.2.1"
INSTALL = f"pip install --no-deps {PACKAGE}=={VERSION}"
FOLDER = ("dataset_example", "ml-100k")
HOUR = 3600.0


@dataclass
class MovieLensConfig(WorkloadConfig):
    name: str = "movielens"
    train_samples: int = -1  # -1: every train row (99,057); otherwise the first N of the shuffled train rows
    eval_samples: int = -1  # -1: every user's last rating (943)
    calibration_samples: int = 4096
    history_length: int = 50
    positive_rating: float = 4.0


def data_folder() -> Path:
    """ml-100k's folder inside the installed recbole package (not imported), or a one-line UserError."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        folder = Path(location).joinpath(*FOLDER)
        if (folder / "ml-100k.inter").is_file():
            return folder
    raise UserError(f"workload=movielens reads MovieLens-100K from the recbole package's data, which is not installed here: "
                    f"{INSTALL} (or make setup-movielens)")


def read_ratings(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    inter = pd.read_csv(folder / "ml-100k.inter", sep="\t")
    inter.columns = [c.split(":")[0] for c in inter.columns]
    users = pd.read_csv(folder / "ml-100k.user", sep="\t", dtype=str)
    users.columns = [c.split(":")[0] for c in users.columns]
    return inter, users


@register("workload", "movielens", config=MovieLensConfig)
class MovieLensWorkload(Workload):
    num_dense = 2

    @cached_property
    def _splits(self) -> dict[str, SequenceRows]:
        inter, users = read_ratings(data_folder())
        return build_rows(inter, users, self.cfg.history_length, self.cfg.positive_rating, self.seed)

    @cached_property
    def _sizes(self) -> dict[str, int]:
        rows = [self._splits["train"], self._splits["eval"]]
        return {"users": max(int(r.pooled["user_id"].max()) for r in rows) + 1, "items": max(int(r.candidate.max()) for r in rows) + 1,
                "occupations": max(int(r.pooled["occupation"].max()) for r in rows) + 1}

    def check_data(self) -> None:
        data_folder()

    @property
    def tables(self) -> list[TableSpec]:
        s = self._sizes
        return [
            TableSpec("t_user_id", "user_id", s["users"]),
            TableSpec("t_age", "age", 100),
            TableSpec("t_gender", "gender", 2),
            TableSpec("t_occupation", "occupation", s["occupations"]),
            TableSpec("t_item", HISTORY, s["items"], pooling=self.cfg.history_length, sequence=True),
            TableSpec("t_item", CANDIDATE, s["items"], sequence=True),
        ]

    @property
    def sequences(self) -> Sequences:
        return SEQUENCES

    def _rows(self, split: str) -> SequenceRows:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        rows = self._splits["eval" if split == "eval" else "train"]
        cap = {"train": self.cfg.train_samples, "eval": self.cfg.eval_samples, "calibration": self.cfg.calibration_samples}[split]
        return rows if cap < 0 or cap >= len(rows) else rows.slice(0, cap)

    def num_samples(self, split: str) -> int:
        return len(self._rows(split))

    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        return batches_of([self._rows(split)], batch_size)

    def popularity_auc(self) -> float:
        return popularity_auc([self._rows("train")], [self._rows("eval")])

    def data_identity(self) -> dict:
        folder = data_folder()
        return {"source": f"{PACKAGE} {FOLDER[-1]}", **{p.name: p.stat().st_size for p in sorted(folder.glob("ml-100k.*"))}}

    def describe(self) -> dict:
        return {"source": str(data_folder()), "split": "chronological leave-last-out per user",
                "positive": f"rating >= {self.cfg.positive_rating}", "rows": {s: self.num_samples(s) for s in ("train", "eval")}}


def build_rows(inter: pd.DataFrame, users: pd.DataFrame, history_length: int, positive_rating: float, seed: int) -> dict[str, SequenceRows]:
    """Every rating as a row with its user's earlier ratings as history; each user's last is eval."""
    inter = inter.sort_values(["user_id", "timestamp", "item_id"], kind="stable").reset_index(drop=True)
    user = inter["user_id"].to_numpy(np.int64)
    item = inter["item_id"].to_numpy(np.int64)
    time = inter["timestamp"].to_numpy(np.int64)
    n = len(inter)
    first_of_user = np.r_[True, user[1:] != user[:-1]]
    start = np.maximum.accumulate(np.where(first_of_user, np.arange(n), 0))  # each row's user's first row
    place = np.arange(n) - start  # ratings before this one
    lengths = np.minimum(place, history_length)
    owner = np.repeat(np.arange(n), lengths)
    step = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    source = owner - lengths[owner] + step  # the last `lengths` rows before each row, oldest first
    since_last = np.where(place > 0, time - np.r_[time[0], time[:-1]], 0) / HOUR
    ids = users["user_id"].astype(np.int64).to_numpy()
    occupation = {name: i for i, name in enumerate(sorted(users["occupation"].unique()))}
    profile = np.zeros((int(max(ids.max(), user.max())) + 1, 3), dtype=np.int64)  # age, gender, occupation by user id
    profile[ids] = np.stack([users["age"].astype(np.int64).clip(0, 99), (users["gender"] == "F").astype(np.int64),
                             users["occupation"].map(occupation).astype(np.int64)], axis=1)
    pooled = {"user_id": user, "age": profile[user, 0], "gender": profile[user, 1], "occupation": profile[user, 2]}
    rows = SequenceRows(
        dense=np.stack([np.log1p(lengths), np.log1p(np.maximum(since_last, 0))], axis=1).astype(np.float32), pooled=pooled,
        history=item[source], ages=time[owner] - time[source], lengths=lengths, candidate=item, request=np.arange(n),
        labels=(inter["rating"].to_numpy() >= positive_rating).astype(np.float32),
    )
    last = np.r_[user[1:] != user[:-1], True]
    train = np.random.default_rng([seed, 5]).permutation(np.flatnonzero(~last))
    return {"train": _take(rows, train), "eval": _take(rows, np.flatnonzero(last))}


def _take(rows: SequenceRows, index: np.ndarray) -> SequenceRows:
    """The rows `index`, in that order (their requests numbered anew, one each)."""
    spans = segments((np.cumsum(rows.lengths) - rows.lengths)[index], rows.lengths[index])
    return SequenceRows(rows.dense[index], {k: v[index] for k, v in rows.pooled.items()}, rows.history[spans], rows.ages[spans],
                        rows.lengths[index], rows.candidate[index], np.arange(len(index)), rows.labels[index])
