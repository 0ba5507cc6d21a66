"""The eval split cut by sample index: the search half (a plan quarter and a check quarter) and the held-out half.

Odd sample indices are held out; the even ones are the search's, and the search cuts them again:
indices 0 mod 4 plan (the sensitivities the knapsack reads), indices 2 mod 4 check (the combined
candidates the search measures). The check must not reuse the plan's samples: the knapsack prefers the
options whose sensitivity noise happened to flatter them, and a candidate measured on those same
samples inherits that noise, so its figure would be too good by the sum of it (the winner's curse of
the plan; with the default workload, a map measured −0.00044 on the samples it was planned on and
−0.00082 on fresh ones). Measured on fresh samples, a candidate's figure is an honest draw, which is
what the search's guard (`Budget.guard`) assumes.

Interleaving (rather than consecutive blocks) gives every part the same distribution even where the
eval split is ordered in time, as Criteo's is, so each part is a fresh draw of the same data.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from bench.batch import Batch, take_rows

SEARCH, HOLDOUT = "search", "holdout"  # the two halves (tune.csv's split column)
PLAN, CHECK = "plan", "check"  # the search half's two quarters
# part -> (modulus, residue) of the sample indices it takes
PARTS = {PLAN: (4, 0), CHECK: (4, 2), HOLDOUT: (2, 1)}


def split_by_index(batches: Sequence[Batch], parts: Mapping[str, tuple[int, int]] = PARTS) -> dict[str, list[Batch]]:
    """{part: the samples whose index i has i % modulus == residue}, batch by batch, in order."""
    out: dict[str, list[Batch]] = {name: [] for name in parts}
    start = 0
    for batch in batches:
        index = torch.arange(start, start + len(batch))
        for name, (modulus, residue) in parts.items():
            rows = torch.nonzero(index % modulus == residue).reshape(-1)
            if rows.numel():
                out[name].append(take_rows(batch, rows))
        start += len(batch)
    return out


def num_samples(batches: Sequence[Batch]) -> int:
    return sum(len(b) for b in batches)

