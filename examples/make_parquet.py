"""Write a small click log as Parquet for the two-tower example, with a planted signal so AUC means something.

    python -m examples.make_parquet examples/data/clicks.parquet [--rows 60000] [--seed 0] [--oracle]

Columns: `label` (0/1), `dense_0..dense_3` (float), `user_id` and `item_id` (integer ids, one-hot),
`item_category` (string ids), `history` (a list of item ids the user saw before: multi-hot, 0 to 5 ids).
The label is drawn from a planted teacher: per-id biases, a rank-4 user x item affinity, the history's
affinity to the item, and dense terms. With `--oracle`, the teacher's logit is written as `oracle_logit`;
declare it (`workload.oracle=oracle_logit`) so it becomes the oracle AUC. Left undeclared, the harness
refuses it (exit 2): its name says it is derived from the label, and as an inferred feature it would be
the answer.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

USERS, ITEMS, CATEGORIES, RANK = 2000, 1000, 40, 4


def _popular(rng: np.random.Generator, n: int, size, alpha: float = 1.05) -> np.ndarray:
    """Ids whose frequency falls off as a power of their rank (over a random order of the ids)."""
    p = (1.0 + np.arange(n)) ** -alpha
    return rng.permutation(n)[rng.choice(n, size=size, p=p / p.sum())]


def clicks(rows: int, seed: int = 0) -> pa.Table:
    """The click log as an Arrow table, teacher's logit included as `oracle_logit`."""
    rng = np.random.default_rng(seed)
    user_vec = rng.normal(0, 0.7, (USERS, RANK))
    item_vec = rng.normal(0, 0.7, (ITEMS, RANK))
    user_bias, item_bias = rng.normal(0, 0.5, USERS), rng.normal(0, 0.5, ITEMS)
    category = rng.integers(0, CATEGORIES, ITEMS)
    category_bias = rng.normal(0, 0.6, CATEGORIES)

    user, item = _popular(rng, USERS, rows), _popular(rng, ITEMS, rows)
    lengths = rng.integers(0, 6, rows)
    history = _popular(rng, ITEMS, int(lengths.sum()))
    owner = np.repeat(np.arange(rows), lengths)
    taste = np.zeros((rows, RANK))
    np.add.at(taste, owner, item_vec[history])
    taste /= np.maximum(lengths, 1)[:, None]
    dense = np.stack([rng.normal(size=rows), rng.normal(size=rows), np.log1p(rng.exponential(2.0, rows)), rng.uniform(size=rows)], axis=1)

    logit = (user_bias[user] + item_bias[item] + category_bias[category[item]]
             + np.einsum("nr,nr->n", user_vec[user], item_vec[item])
             + 0.8 * np.einsum("nr,nr->n", taste, item_vec[item])
             + 0.5 * dense[:, 0] - 0.4 * dense[:, 1] + 0.3 * dense[:, 0] * dense[:, 2])
    logit += np.log(0.25 / 0.75) - np.median(logit)  # about a quarter positives
    label = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int8)

    columns = {"label": label, **{f"dense_{j}": dense[:, j].astype(np.float32) for j in range(dense.shape[1])},
               "user_id": user.astype(np.int64), "item_id": item.astype(np.int64),
               "item_category": np.array([f"cat_{c:02d}" for c in category[item]], dtype=object),
               "history": pa.ListArray.from_arrays(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32), history.astype(np.int64)),
               "oracle_logit": logit}
    return pa.table(columns)


def write_clicks(path: str | Path, rows: int = 60000, seed: int = 0, oracle: bool = False) -> Path:
    table = clicks(rows, seed)
    if not oracle:
        table = table.drop_columns(["oracle_logit"])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=16384)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the Parquet file to write")
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--oracle", action="store_true", help="also write the teacher's logit as oracle_logit")
    args = parser.parse_args()
    path = write_clicks(args.out, args.rows, args.seed, args.oracle)
    print(f"{path}: {args.rows} rows")
    if args.oracle:
        print("it holds the teacher's logit as oracle_logit: run with workload.oracle=oracle_logit (the oracle AUC, not a feature)")


if __name__ == "__main__":
    main()
