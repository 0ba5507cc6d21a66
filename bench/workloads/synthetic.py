"""`synthetic`: a Criteo-shaped click log with labels from a planted teacher.

Features
    13 dense features: counts drawn log-normally (as Criteo's I1..I13 are heavy-tailed counts),
    delivered as log(1 + count), the transform Criteo models use.
    26 sparse features with configurable cardinalities (or `table_rows` rows in every table); ids
    follow a Zipf law over a random permutation of each table (frequent ids are not the small ids),
    with the exponent `access` gives each feature (`bench.workloads.access_patterns`): `zipf_alpha` for all
    (zipf, the default), 0 (uniform), or one fitted per feature to real Criteo rows (criteo).
    A feature may be multi-hot: `pooling[f]` ids per sample.

Teacher (the generative model of the label)
    logit = b0
          + sum_f  w_f[id_f]                                  per-id effects (bag mean if multi-hot)
          + sum_(f,g) in P  s * <u_f[id_f], u_g[id_g]>        pairwise latent interactions, rank r
          + sum_j  a_j * z_j + c * relu(z_0) * z_1            dense terms on standardized log-counts
    P(click) is sigmoid(logit + e), e ~ N(0, noise_std^2): e stands for what the log does not
    record, so even the teacher is not a perfect ranker. The bias b0 is solved numerically so the
    positive rate is `positive_rate` (about 0.25, near Criteo Kaggle's 0.26).

Because rare ids are seen rarely in training, a trained DLRM cannot learn their effects fully:
it lands below the teacher, as real models land below what the data would allow. With the
defaults (seed 0) the teacher's (oracle) AUC is 0.827 and the trained `small` DLRM reaches 0.803,
inside the range real Criteo models reach (0.76 to 0.82).

Oracle AUC: the AUC of the teacher's noise-free logit on the eval split. E[sigmoid(logit + e)] is
increasing in the logit, so this ranks samples exactly as the true click probability does: it is
the best AUC any model of these features can reach.

Determinism and size: the teacher comes from `seed`; chunk `c` of split `s` comes from the seed
sequence (seed, s, c) alone, so any chunk is generated independently, the same every time, and a
split of any size streams chunk by chunk without being held in memory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator, Optional

import numpy as np
import torch
from omegaconf import OmegaConf
from sklearn.metrics import roc_auc_score
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch
from bench.config import WorkloadConfig
from bench.errors import UserError
from bench.registry import register
from bench.workloads.access_patterns import check_access, feature_alphas, zipf_cdf
from bench.workloads.workload import SPLITS, TableSpec, Workload

# Scaled-down Criteo Kaggle cardinalities (the real ones reach 10M rows per table).
DEFAULT_CARDINALITIES = [
    1460, 583, 20000, 12000, 305, 24, 12517, 633, 3, 15000, 5683, 20000, 3194,
    27, 14992, 20000, 10, 5652, 2173, 4, 20000, 18, 15, 14000, 105, 8000,
]
_SPLIT_STREAM = {"train": 1, "eval": 2}
KEPT_EVAL_SAMPLES = 262144  # the default timing pool (timing.pool_samples)


@dataclass
class SyntheticConfig(WorkloadConfig):
    name: str = "synthetic"
    train_samples: int = 1_000_000
    eval_samples: int = 200_000
    calibration_samples: int = 16384  # the first samples of the train split
    num_dense: int = 13
    cardinalities: list[int] = field(default_factory=lambda: list(DEFAULT_CARDINALITIES))
    pooling: Optional[list[int]] = None  # ids per sample per feature; None = one-hot everywhere
    table_rows: Optional[int] = None  # rows of every table (cardinalities then only give the table count)
    access: str = "zipf"  # zipf | uniform | criteo (bench.workloads.access_patterns)
    zipf_alpha: float = 1.1
    positive_rate: float = 0.25
    id_effect_std: float = 0.8  # per-id effect scale of the most frequent id
    tail_decay: float = 0.3  # effect scale of the id of rank r: (1 + r) ** -tail_decay
    interaction_rank: int = 4
    num_interactions: int = 24  # feature pairs with a latent interaction
    interaction_scale: float = 0.8
    dense_scale: float = 0.35
    noise_std: float = 1.2
    chunk_size: int = 65536


class Teacher:
    """The planted model: parameters drawn once from the seed."""

    def __init__(self, cfg: SyntheticConfig, seed: int) -> None:
        rng = np.random.default_rng([seed, 0])
        self.cfg = cfg
        n_sparse = len(cfg.cardinalities)
        # Some features matter a lot, some barely: scale each feature's effects differently.
        feature_scale = cfg.id_effect_std * rng.uniform(0.2, 1.2, size=n_sparse)
        # Zipf ranks over a random permutation of each table, one exponent per feature.
        self.alphas = feature_alphas(cfg.access, cfg.zipf_alpha, list(cfg.cardinalities))
        self.cdfs, self.perms = [], []
        for c, alpha in zip(cfg.cardinalities, self.alphas):
            self.cdfs.append(zipf_cdf(c, alpha))
            self.perms.append(rng.permutation(c))
        # Effects are drawn by frequency rank and shrink along the tail: rare ids behave more like
        # the average id, as they do in click logs (and as shrinkage estimators assume).
        decay = [(1.0 + np.arange(c)) ** -cfg.tail_decay for c in cfg.cardinalities]
        self.id_effects = [
            _by_id(rng.normal(0.0, s, size=c) * d, perm) for s, c, d, perm in zip(feature_scale, cfg.cardinalities, decay, self.perms)
        ]
        self.latent = [
            _by_id(rng.normal(0.0, 1.0 / np.sqrt(cfg.interaction_rank), size=(c, cfg.interaction_rank)) * d[:, None], perm)
            for c, d, perm in zip(cfg.cardinalities, decay, self.perms)
        ]
        pairs = [(f, g) for f in range(n_sparse) for g in range(f + 1, n_sparse)]
        chosen = rng.choice(len(pairs), size=min(cfg.num_interactions, len(pairs)), replace=False)
        self.pairs = [pairs[i] for i in sorted(chosen)]
        self.dense_weights = (cfg.dense_scale * rng.normal(size=cfg.num_dense)).astype(np.float32)
        self.dense_cross = np.float32(cfg.dense_scale)
        # Log-normal count parameters per dense feature, and the moments of log1p(count).
        self.count_mu = rng.uniform(0.0, 4.0, size=cfg.num_dense)
        self.count_sigma = rng.uniform(0.5, 1.5, size=cfg.num_dense)
        self.bias = 0.0
        self.bias = self._solve_bias(rng)

    def sample_features(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, list[np.ndarray]]:
        cfg = self.cfg
        counts = np.floor(np.exp(rng.normal(self.count_mu, self.count_sigma, size=(n, cfg.num_dense))))
        dense = np.log1p(counts).astype(np.float32)
        pooling = cfg.pooling or [1] * len(cfg.cardinalities)
        ids = []
        for cdf, perm, k in zip(self.cdfs, self.perms, pooling):
            ranks = np.searchsorted(cdf, rng.random((n, k)), side="right").clip(max=len(cdf) - 1)
            ids.append(perm[ranks])
        return dense, ids

    def logit(self, dense: np.ndarray, ids: list[np.ndarray]) -> np.ndarray:
        """Noise-free logit: the oracle score."""
        z = (dense - self._dense_mean) / self._dense_std
        out = np.full(len(dense), self.bias, dtype=np.float64)
        out += z @ self.dense_weights + self.dense_cross * np.maximum(z[:, 0], 0) * z[:, 1]
        for f, bag in enumerate(ids):
            out += self.id_effects[f][bag].mean(axis=1)
        scale = self.cfg.interaction_scale
        for f, g in self.pairs:
            uf = self.latent[f][ids[f]].mean(axis=1)
            ug = self.latent[g][ids[g]].mean(axis=1)
            out += scale * np.einsum("nr,nr->n", uf, ug)
        return out

    @cached_property
    def _dense_moments(self) -> tuple[np.ndarray, np.ndarray]:
        dense, _ = self.sample_features(np.random.default_rng([0, 7]), 100_000)
        return dense.mean(axis=0), dense.std(axis=0) + 1e-6

    @property
    def _dense_mean(self) -> np.ndarray:
        return self._dense_moments[0]

    @property
    def _dense_std(self) -> np.ndarray:
        return self._dense_moments[1]

    def _solve_bias(self, rng: np.random.Generator) -> float:
        """Bisect b0 so that E[sigmoid(logit + e)] equals the target positive rate."""
        dense, ids = self.sample_features(rng, 100_000)
        base = self.logit(dense, ids) + rng.normal(0.0, self.cfg.noise_std, size=len(dense))
        lo, hi = -20.0, 20.0
        for _ in range(60):
            mid = (lo + hi) / 2
            rate = np.mean(1.0 / (1.0 + np.exp(-(base + mid))))
            lo, hi = (mid, hi) if rate < self.cfg.positive_rate else (lo, mid)
        return (lo + hi) / 2


@dataclass
class Chunk:
    dense: np.ndarray  # [n, num_dense] float32
    ids: list[np.ndarray]  # per feature [n, pooling] int64
    labels: np.ndarray  # [n] float32
    oracle: np.ndarray  # [n] float64, the teacher's noise-free logit

    def __len__(self) -> int:
        return len(self.labels)

    def slice(self, start: int, stop: int) -> "Chunk":
        return Chunk(self.dense[start:stop], [i[start:stop] for i in self.ids], self.labels[start:stop], self.oracle[start:stop])


@register("workload", "synthetic", config=SyntheticConfig)
class SyntheticWorkload(Workload):
    def __init__(self, cfg, seed: int, cache_dir) -> None:
        super().__init__(cfg, seed, cache_dir)
        if isinstance(cfg, SyntheticConfig):
            self.cfg = cfg
        else:  # a DictConfig from Hydra: validate against the schema
            self.cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SyntheticConfig), cfg))
        c = self.cfg
        if c.pooling is not None and len(c.pooling) != len(c.cardinalities):
            raise UserError(
                f"workload.pooling has {len(c.pooling)} entries but there are {len(c.cardinalities)} sparse features: give one per feature"
            )
        if min(c.cardinalities) < 1 or (c.pooling and min(c.pooling) < 1) or (c.table_rows is not None and c.table_rows < 1):
            raise UserError("workload.cardinalities, workload.table_rows and workload.pooling must be positive integers")
        check_access(c.access)
        self._eval_chunks: dict[int, Chunk] = {}  # the first KEPT_EVAL_SAMPLES of the eval split, once made
        if c.table_rows is not None:
            self.cfg = dataclasses.replace(c, cardinalities=[c.table_rows] * len(c.cardinalities))

    @cached_property
    def teacher(self) -> Teacher:
        return Teacher(self.cfg, self.seed)

    @property
    def tables(self) -> list[TableSpec]:
        pooling = self.cfg.pooling or [1] * len(self.cfg.cardinalities)
        return [
            TableSpec(name=f"t_cat_{i}", feature=f"cat_{i}", num_embeddings=c, pooling=k)
            for i, (c, k) in enumerate(zip(self.cfg.cardinalities, pooling))
        ]

    @property
    def num_dense(self) -> int:  # type: ignore[override]
        return self.cfg.num_dense

    def num_samples(self, split: str) -> int:
        _check_split(split)
        return {
            "train": self.cfg.train_samples,
            "eval": self.cfg.eval_samples,
            "calibration": min(self.cfg.calibration_samples, self.cfg.train_samples),
        }[split]

    def chunk(self, split: str, index: int) -> Chunk:
        """Chunk `index` of a split, generated from (seed, split, index) alone. The eval split's first
        `KEPT_EVAL_SAMPLES` are kept once made: every job of a sweep cuts its timing batches from them
        again, at its own batch size (the default timing pool; about 70 MB)."""
        if split != "eval" or index * self.cfg.chunk_size >= KEPT_EVAL_SAMPLES:
            return self._generate(split, index)
        if index not in self._eval_chunks:
            self._eval_chunks[index] = self._generate(split, index)
        return self._eval_chunks[index]

    def _generate(self, split: str, index: int) -> Chunk:
        stream = _SPLIT_STREAM["train" if split == "calibration" else split]
        n = min(self.cfg.chunk_size, self.num_samples(split) - index * self.cfg.chunk_size)
        rng = np.random.default_rng([self.seed, stream, index])
        dense, ids = self.teacher.sample_features(rng, n)
        logit = self.teacher.logit(dense, ids)
        noisy = logit + rng.normal(0.0, self.cfg.noise_std, size=n)
        labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-noisy))).astype(np.float32)
        return Chunk(dense, ids, labels, logit)

    def chunks(self, split: str) -> Iterator[Chunk]:
        n = self.num_samples(split)
        for index in range((n + self.cfg.chunk_size - 1) // self.cfg.chunk_size):
            yield self.chunk(split, index)

    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        keys = [t.feature for t in self.tables]
        pending: list[Chunk] = []
        held = 0
        for chunk in self.chunks(split):
            pending.append(chunk)
            held += len(chunk)
            while held >= batch_size:
                merged = _concat(pending)
                yield _to_batch(merged.slice(0, batch_size), keys)
                rest = merged.slice(batch_size, len(merged))
                pending, held = ([rest] if len(rest) else []), len(rest)
        if held:
            yield _to_batch(_concat(pending), keys)

    def oracle_auc(self) -> float:
        return self._oracle_auc

    @cached_property
    def _oracle_auc(self) -> float:  # generates the eval split again: once per workload object
        labels, scores = [], []
        for chunk in self.chunks("eval"):
            labels.append(chunk.labels)
            scores.append(chunk.oracle)
        return float(roc_auc_score(np.concatenate(labels), np.concatenate(scores)))


def _by_id(values_by_rank: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """Values indexed by frequency rank -> values indexed by id (id perm[r] has rank r)."""
    out = np.empty_like(values_by_rank, dtype=np.float32)
    out[perm] = values_by_rank
    return out


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")


def _concat(chunks: list[Chunk]) -> Chunk:
    if len(chunks) == 1:
        return chunks[0]
    return Chunk(
        np.concatenate([c.dense for c in chunks]),
        [np.concatenate([c.ids[f] for c in chunks]) for f in range(len(chunks[0].ids))],
        np.concatenate([c.labels for c in chunks]),
        np.concatenate([c.oracle for c in chunks]),
    )


def _to_batch(chunk: Chunk, keys: list[str]) -> Batch:
    """KJT values are feature-major: all of feature 0's ids for the batch, then feature 1's..."""
    n = len(chunk)
    values = np.concatenate([ids.reshape(-1) for ids in chunk.ids])
    lengths = np.concatenate([np.full(n, ids.shape[1], dtype=np.int32) for ids in chunk.ids])
    sparse = KeyedJaggedTensor(
        keys=keys,
        values=torch.from_numpy(values.astype(np.int64)),
        lengths=torch.from_numpy(lengths),
    )
    return Batch(dense=torch.from_numpy(np.ascontiguousarray(chunk.dense)), sparse=sparse, labels=torch.from_numpy(chunk.labels))
