"""Fit the `criteo` access pattern to real Criteo rows, and show how well the fit holds.

Reads the first 10,000 rows of Kaggle train.txt (chronological) from ../shared/data/criteo and
writes, per categorical feature C1..C26, what the synthetic workload's `criteo` pattern is fitted
to: the mean number of unique values in consecutive batches of 256, 1024 and 4096 rows. It also
stores the reuse distance (rows since the same value was last seen) as fractions of accesses that
are reuses within 256 / 1024 / 4096 rows, and the distinct values in the 10,000 rows. Only these
aggregates go into `bench/workloads/criteo_access.json`; no row is copied.

Then, for a table size (`--rows`), it prints per feature the fitted Zipf exponent and, side by
side, the real and the fitted unique ids per batch and reuse fractions (the fitted ones from
10,000 independent draws), so the fit's quality is visible.

    python benchmarks/scripts/fit_criteo_access.py [--data ../shared/data/criteo] [--rows 300000] [--check-only]
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

from bench.io import write_json_atomic
from bench.workloads.access_patterns import (
    CRITEO_PROFILE,
    FIT_BATCHES,
    criteo_profile,
    expected_unique,
    fit_alpha,
    zipf_probabilities,
)

HEAD = "criteo_kaggle_train_head10k.tsv"
REUSE_WITHIN = (256, 1024, 4096)


def read_categoricals(path: Path) -> np.ndarray:
    """[rows, 26] array of the raw categorical strings (empty = missing, kept as its own value)."""
    rows = []
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        rows.append(fields[14:40] + [""] * (40 - len(fields)))
    return np.array(rows, dtype=object)


def unique_per_batch(column: np.ndarray, batch: int) -> float:
    windows = [column[i:i + batch] for i in range(0, len(column) - batch + 1, batch)]
    return float(np.mean([len(set(w)) for w in windows]))


def reuse_fractions(column) -> dict[str, float]:
    """Fraction of all accesses that re-read a value last seen at most d rows earlier."""
    last: dict = {}
    distances = []
    for i, value in enumerate(column):
        distances.append(i - last[value] if value in last else np.inf)
        last[value] = i
    d = np.asarray(distances)
    return {str(w): float(np.mean(d <= w)) for w in REUSE_WITHIN}


def profile(columns: np.ndarray) -> list[dict]:
    return [
        {
            "feature": f"C{j + 1}",
            "unique_per_batch": {str(b): unique_per_batch(columns[:, j], b) for b in FIT_BATCHES},
            "reuse_within": reuse_fractions(columns[:, j]),
            "distinct": int(len(set(columns[:, j]))),
        }
        for j in range(columns.shape[1])
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "data" / "criteo")
    parser.add_argument("--rows", type=int, default=300_000, help="table size to fit and check at")
    parser.add_argument("--check-only", action="store_true", help="do not rewrite the profile, only compare")
    args = parser.parse_args()

    if not args.check_only:
        path = args.data / HEAD
        columns = read_categoricals(path)
        write_json_atomic(CRITEO_PROFILE, {
            "source": f"{HEAD} ({len(columns)} rows, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:16]})",
            "batches": list(FIT_BATCHES),
            "features": profile(columns),
        })
        criteo_profile.cache_clear()
        print(f"wrote {CRITEO_PROFILE}")

    rng = np.random.default_rng(0)
    rows = args.rows
    print(f"fit at {rows:,} rows per table; unique ids per batch of 256 / 1024 / 4096 and reuse within 256 / 4096 rows, real vs fitted")
    errors = []
    for f in criteo_profile()["features"]:
        alpha = fit_alpha(f["unique_per_batch"], rows)
        fitted = [expected_unique(alpha, rows, b) for b in FIT_BATCHES]
        real = [f["unique_per_batch"][str(b)] for b in FIT_BATCHES]
        errors += [abs(np.log(x / y)) for x, y in zip(fitted, real)]
        p = zipf_probabilities(rows, alpha)
        draws = rng.choice(rows, size=10_000, p=p)
        sim = reuse_fractions(draws)
        print(
            f"{f['feature']:>4s} alpha {alpha:5.2f}  unique {' / '.join(f'{x:6.0f}' for x in real)}  fitted {' / '.join(f'{x:6.0f}' for x in fitted)}"
            f"  reuse {f['reuse_within']['256']:.2f} / {f['reuse_within']['4096']:.2f}  fitted {sim['256']:.2f} / {sim['4096']:.2f}"
        )
    print(f"median |log(fitted / real)| of unique ids per batch: {np.median(errors):.3f} (max {np.max(errors):.3f})")


if __name__ == "__main__":
    main()
