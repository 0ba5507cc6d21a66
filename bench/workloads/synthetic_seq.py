"""`synthetic_seq`: users with timestamped histories and drifting interests, K candidates per request.

Teacher (drawn once from `seed`)
    Items fall in `num_categories` categories of equal size; item i has a latent vector
    v_i = c_cat(i) + item_spread * noise (rank `rank`), a bias b_i ~ N(0, item_bias_std^2), and a
    popularity inside its category that falls off as a Zipf law (`zipf_alpha`). Each user has a taste
    t_u ~ N(0, I).
A request
    A user u; a history of L events (L uniform in [min_history, history_length]) whose gaps are
    exponential (mean `mean_gap_hours`). The user's interest starts at t_u and drifts at every event:
    z_j = rho_j z_(j-1) + sqrt(1 - rho_j^2) e_j, rho_j = exp(-gap_j / drift_hours). At event j the user
    picks a category with probability softmax(choice_sharpness * <z_j, c_k>) and an item of it by
    popularity. The request comes one more gap later, at interest z_T; its K = `candidates` candidates are
    drawn half from the user's interest that way and half by popularity alone.
Label of a candidate c
    P(click) = sigmoid(b0 + affinity_scale * <z_T, v_c> + b_c). b0 is solved so the positive rate is about
    `positive_rate`. The oracle score is that logit: the best AUC any model can reach. A model that reads the
    history (recent events weigh more: timestamps matter) can estimate z_T; a popularity-only ranker sees only
    b_c and the average affinity, and lands well below.
Rows and features
    One row per (request, candidate), the request's K rows consecutive. Pooled feature `user_id`; the
    sequence `history` (item ids, oldest first) with the ages of its events (seconds before the request,
    side key `history_age`); the candidate `item_id` in the history's table; side key `request`. Dense:
    log(1 + L) and log(1 + hours since the last event). Deterministic from `seed`; chunk c of a split comes
    from (seed, split, c) alone.
A larger item table (`table_rows`, for the scale sweep: docs/sequential.md)
    The item table holds `table_rows` rows: A = table_rows // num_items copies of the catalogue, and each
    event and candidate is looked up at a copy drawn uniformly (id = item + num_items * a). Labels still
    follow the catalogue item, and the lookups spread over the whole table as a catalogue of that many
    items' would, without a per-item array (a 1e8-row table needs no teacher state beyond the catalogue's).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import numpy as np
from omegaconf import OmegaConf
from sklearn.metrics import roc_auc_score

from bench.batch import Batch
from bench.config import WorkloadConfig
from bench.errors import UserError
from bench.registry import register
from bench.workloads.sequence_batch import CANDIDATE, HISTORY, SEQUENCES, SequenceRows, batches_of, popularity_auc, segments
from bench.workloads.workload import SPLITS, Sequences, TableSpec, Workload

_SPLIT_STREAM = {"train": 1, "calibration": 1, "eval": 2}
HOUR = 3600.0


@dataclass
class SyntheticSeqConfig(WorkloadConfig):
    name: str = "synthetic_seq"
    train_samples: int = 131072  # rows: requests x candidates
    eval_samples: int = 32768
    calibration_samples: int = 4096
    history_length: int = 32  # the most events of a history
    min_history: int = 4
    candidates: int = 8  # K: candidates per request
    num_items: int = 500
    num_categories: int = 10
    num_users: int = 2000
    rank: int = 8
    item_spread: float = 0.3
    item_bias_std: float = 0.5
    zipf_alpha: float = 1.0
    choice_sharpness: float = 4.0
    affinity_scale: float = 1.5
    mean_gap_hours: float = 24.0
    drift_hours: float = 240.0
    positive_rate: float = 0.3
    chunk_requests: int = 4096
    # the item table's rows: 0 (or num_items) for the catalogue itself; more spreads the lookups over that
    # many rows, copies of the catalogue (the scale sweep: +sweep=scale model=hstu +preset=dlrmv3)
    table_rows: int = 0

    def validate(self) -> None:
        if self.candidates < 1 or self.history_length < 1 or not 0 <= self.min_history <= self.history_length:
            raise UserError("workload.candidates and workload.history_length must be positive, and 0 <= workload.min_history <= history_length")
        if self.num_items < self.num_categories or self.num_items % self.num_categories:
            raise UserError(f"workload.num_items ({self.num_items}) must be a multiple of workload.num_categories ({self.num_categories})")
        if self.table_rows and self.table_rows < self.num_items:
            raise UserError(f"workload.table_rows ({self.table_rows}) must be 0 (the catalogue's own rows) or at least "
                            f"workload.num_items ({self.num_items})")

    @property
    def item_rows(self) -> int:
        """Rows of the item table."""
        return max(self.table_rows, self.num_items)


class SeqTeacher:
    def __init__(self, cfg: SyntheticSeqConfig, seed: int) -> None:
        rng = np.random.default_rng([seed, 0])
        self.cfg = cfg
        c, r = cfg.num_categories, cfg.rank
        self.centers = rng.normal(0, 1, (c, r)) / np.sqrt(r) * 2.0
        per = cfg.num_items // c
        self.items_by_category = rng.permutation(cfg.num_items).reshape(c, per)  # popularity rank order inside each
        self.category = np.empty(cfg.num_items, dtype=np.int64)
        self.category[self.items_by_category] = np.arange(c)[:, None]
        self.vectors = self.centers[self.category] + cfg.item_spread * rng.normal(0, 1, (cfg.num_items, r)) / np.sqrt(r)
        self.item_bias = rng.normal(0, cfg.item_bias_std, cfg.num_items)
        weights = (1.0 + np.arange(per)) ** -cfg.zipf_alpha
        self.rank_cdf = np.cumsum(weights) / weights.sum()
        self.taste = rng.normal(0, 1, (cfg.num_users, r))
        self.bias = 0.0
        # the oracle logits alone: the rows (each history repeated per candidate) would hold 0.2 GB at
        # history_length 128 and K 32, and the heap keeps what it freed
        logits = self._events(np.random.default_rng([seed, 9]), 4096)[-1].reshape(-1)
        lo, hi = -20.0, 20.0
        for _ in range(50):  # the bias that gives the target positive rate
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if np.mean(1 / (1 + np.exp(-(logits + mid)))) < cfg.positive_rate else (lo, mid)
        self.bias = (lo + hi) / 2

    def _pick(self, rng: np.random.Generator, interest: np.ndarray | None, n: int) -> np.ndarray:
        """Items: a category by the interest (uniform with none), an item of it by popularity."""
        if interest is None:
            category = rng.integers(0, self.cfg.num_categories, n)
        else:
            logits = self.cfg.choice_sharpness * interest @ self.centers.T
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
            category = (rng.random((n, 1)) > cdf).sum(axis=1).clip(max=self.cfg.num_categories - 1)
        rank = np.searchsorted(self.rank_cdf, rng.random(n), side="right").clip(max=len(self.rank_cdf) - 1)
        return self.items_by_category[category, rank]

    def _drift(self, rng: np.random.Generator, z: np.ndarray, gaps: np.ndarray) -> np.ndarray:
        rho = np.exp(-gaps / (self.cfg.drift_hours * HOUR))[:, None]
        return rho * z + np.sqrt(1 - rho**2) * rng.normal(0, 1, z.shape)

    def _events(self, rng: np.random.Generator, n: int) -> tuple:
        """n requests' users, history lengths, gaps, events, ages, candidates and their oracle logits."""
        cfg = self.cfg
        k, longest = cfg.candidates, cfg.history_length
        users = rng.integers(0, cfg.num_users, n)
        lengths = rng.integers(cfg.min_history, longest + 1, n)
        z = self.taste[users]
        gaps = rng.exponential(cfg.mean_gap_hours * HOUR, (n, longest + 1))
        items = np.zeros((n, longest), dtype=np.int64)
        for j in range(longest):  # every request runs `longest` steps; the last L of them are its history
            z = self._drift(rng, z, gaps[:, j])
            items[:, j] = self._pick(rng, z, n)
        z = self._drift(rng, z, gaps[:, longest])
        # event j's age at the request: the gaps after it (the last event's, gaps[:, longest], included)
        ages = np.cumsum(gaps[:, ::-1], axis=1)[:, ::-1][:, 1:]
        cand = np.where(rng.random((n, k)) < 0.5, self._pick(rng, np.repeat(z, k, axis=0), n * k).reshape(n, k),
                        self._pick(rng, None, n * k).reshape(n, k))
        logit = self.bias + cfg.affinity_scale * np.einsum("nr,nkr->nk", z, self.vectors[cand]) + self.item_bias[cand]
        return users, lengths, gaps, items, ages, cand, logit

    def requests(self, rng: np.random.Generator, n: int, first_request: int = 0) -> SequenceRows:
        cfg = self.cfg
        k, longest = cfg.candidates, cfg.history_length
        users, lengths, gaps, items, ages, cand, logit = self._events(rng, n)
        labels = (rng.random((n, k)) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        keep = np.arange(longest)[None, :] >= (longest - lengths)[:, None]  # the last L events
        hist = items[keep]
        hist_ages = ages[keep].astype(np.int64)
        copies = cfg.item_rows // cfg.num_items
        if copies > 1:  # drawn last, so the catalogue's draws (and labels) are the same at every table size
            hist = hist + cfg.num_items * rng.integers(0, copies, hist.shape)
            cand = cand + cfg.num_items * rng.integers(0, copies, cand.shape)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        # each of a request's K rows carries its history: repeat every request's slice K times
        take = segments(np.repeat(offsets[:-1], k), np.repeat(lengths, k))
        dense = np.stack([np.log1p(lengths), np.log1p(gaps[:, longest] / HOUR)], axis=1).astype(np.float32)
        return SequenceRows(
            dense=np.repeat(dense, k, axis=0), pooled={"user_id": np.repeat(users, k)}, history=hist[take], ages=hist_ages[take],
            lengths=np.repeat(lengths, k), candidate=cand.reshape(-1), request=np.repeat(first_request + np.arange(n), k),
            labels=labels.reshape(-1), oracle=logit.reshape(-1),
        )


@register("workload", "synthetic_seq", config=SyntheticSeqConfig)
class SyntheticSeqWorkload(Workload):
    def __init__(self, cfg, seed: int, cache_dir) -> None:
        super().__init__(cfg, seed, cache_dir)
        if not isinstance(cfg, SyntheticSeqConfig):
            self.cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SyntheticSeqConfig), cfg))
        self.cfg.validate()

    @cached_property
    def teacher(self) -> SeqTeacher:
        return SeqTeacher(self.cfg, self.seed)

    @property
    def tables(self) -> list[TableSpec]:
        c = self.cfg
        return [
            TableSpec("t_user_id", "user_id", c.num_users),
            TableSpec("t_item", HISTORY, c.item_rows, pooling=c.history_length, sequence=True),
            TableSpec("t_item", CANDIDATE, c.item_rows, sequence=True),
        ]

    @property
    def sequences(self) -> Sequences:
        return SEQUENCES

    @property
    def num_dense(self) -> int:  # type: ignore[override]
        return 2

    def num_samples(self, split: str) -> int:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        c = self.cfg
        n = {"train": c.train_samples, "eval": c.eval_samples, "calibration": min(c.calibration_samples, c.train_samples)}[split]
        return n - n % c.candidates  # whole requests

    def chunks(self, split: str) -> Iterator[SequenceRows]:
        per = self.cfg.chunk_requests
        requests = self.num_samples(split) // self.cfg.candidates
        for index in range((requests + per - 1) // per):
            n = min(per, requests - index * per)
            rng = np.random.default_rng([self.seed, _SPLIT_STREAM[split], index])
            yield self.teacher.requests(rng, n, first_request=index * per)

    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        return batches_of(self.chunks(split), batch_size)

    @cached_property
    def _eval(self) -> list[SequenceRows]:
        return list(self.chunks("eval"))

    def oracle_auc(self) -> float:
        return float(roc_auc_score(np.concatenate([r.labels for r in self._eval]), np.concatenate([r.oracle for r in self._eval])))

    def popularity_auc(self) -> float:
        return self._popularity_auc

    @cached_property
    def _popularity_auc(self) -> float:  # generates the train split again: once per workload object
        return popularity_auc(list(self.chunks("train")), self._eval)

    def describe(self) -> dict:
        c = self.cfg
        return {"rows": "one (request, candidate) pair each", "candidates": c.candidates, "history_length": c.history_length,
                "items": c.num_items, "sequence_features": [HISTORY, CANDIDATE],
                **({"item_table_rows": c.item_rows} if c.item_rows > c.num_items else {})}
