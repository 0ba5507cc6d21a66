"""The limits the tracking runs point to: a logistic function of load fitted to both sides' verdicts at once.

A staircase's levels average to its limit once the walk has settled, and the levels estimate of
bench.serve.paired averages them from both sides' first reversals. A search that ended in a slow phase of the
host starts its staircase far below the limit, and an early reversal (one transient INVALID) lets the climb back
into that average: in a serve sweep of the DLRMv3 preset, uint4's staircase started at 331 QPS, reversed at 358
and climbed to 403-419 over the next eight rounds, and the levels gave 3.49x fp32, where three other sweeps gave
3.82-3.91x (docs/serving.md). A run far below the limit is VALID whatever the limit is within a few steps, so it
says little about where the limit is; the verdicts near the limit say most. A fit of the verdicts weighs them so;
the levels' mean does not.

The model: side s's run in round r at load q is VALID with probability 1 / (1 + exp(-(ln L_s + h_r - ln q) / w)).
L_s is the side's limit, the load judged VALID half the time (the point a 1-up-1-down staircase tracks); w is how
sharply a verdict turns with load; h_r is the host's state in round r, shared by both sides' runs in it (a slow
phase fails both), drawn from N(0, tau^2) and integrated out (Gauss-Hermite quadrature, `NODES` points). So two
verdicts of one round that fail together are read as the host's doing, as the levels' per-round ratio reads them,
and one side failing alone as that side's limit. The estimate is the maximum a posteriori of (ln L_c, ln L_r,
ln w, ln tau): flat in the limits, ln w ~ N(ln WIDTH, 1) and ln tau ~ N(ln HOST_SD, 1). The priors keep w and tau
finite where the verdicts separate (every run up to some load VALID, every run past it INVALID), as a
staircase's few runs often do; a limit then lands in the gap. WIDTH = HOST_SD = 0.05: the widths fitted to this
harness's serving records lie mostly between 1% and 6% of the load. The ratio is L_c / L_r
(`serve.ratio_fit=logistic`); its interval comes from a jackknife over ABBA blocks of rounds (`jackknife`). A
round state drawn afresh each round does not follow a host that drifts through a whole job; the jackknife then
gives a wide interval (docs/serving.md, "Reading the ratio").

Hand-written: the likelihood, the priors and the jackknife. The quadrature nodes are numpy's, the optimiser scipy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Hashable, Optional, Sequence

import numpy as np
from scipy import optimize, stats

WIDTH = 0.05  # the prior's centre for w, in ln(load): a verdict turns over about +-5% of the limit
HOST_SD = 0.05  # the prior's centre for tau, the round-to-round spread of the host's state, in ln(load)
NODES = 21  # Gauss-Hermite points over the host's state
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(NODES)  # probabilists': the integral of f(h) against N(0, 1)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


@dataclass(frozen=True)
class Run:
    """One tracking run: its round, side (0: the candidate, 1: fp32), load and verdict."""

    round: int
    side: int
    load: float
    valid: bool


@dataclass(frozen=True)
class Fit:
    """Both sides' fitted limits, how sharply a verdict turns, the host's round-to-round spread, from how many runs."""

    limits: tuple[float, float]  # QPS: the candidate's, fp32's
    width: float  # w, in ln(load)
    host_sd: float  # tau, in ln(load)
    runs: int

    @property
    def ratio(self) -> float:
        return self.limits[0] / self.limits[1]


def fit_limits(runs: Sequence[Run], width: float = WIDTH, host_sd: float = HOST_SD) -> Optional[Fit]:
    """The MAP limits of both sides' `runs`; None unless each side has a VALID and an INVALID run (no limit lies
    between them otherwise)."""
    for side in (0, 1):
        verdicts = {r.valid for r in runs if r.side == side}
        if verdicts != {True, False}:
            return None
    rounds = sorted({r.round for r in runs})
    at = {n: i for i, n in enumerate(rounds)}
    row_round = np.array([at[r.round] for r in runs])
    side = np.array([r.side for r in runs])
    x = np.log([r.load for r in runs])
    y = np.array([r.valid for r in runs], float)
    priors = np.log([width, host_sd])

    def cost(p: np.ndarray) -> float:
        w, tau = math.exp(p[2]), math.exp(p[3])
        z = (p[side][None, :] + tau * _NODES[:, None] - x[None, :]) / w  # [node, run]: ln(limit x host / load) / w
        log_p = -(y * np.logaddexp(0.0, -z) + (1 - y) * np.logaddexp(0.0, z))  # ln P(the verdict), without overflow
        per_round = np.zeros((len(_NODES), len(rounds)))
        np.add.at(per_round.T, row_round, log_p.T)
        top = per_round.max(axis=0)
        log_lik = top + np.log((_WEIGHTS[:, None] * np.exp(per_round - top)).sum(axis=0))
        return float(-log_lik.sum() + ((p[2:] - priors) ** 2).sum() / 2)

    start = [(x[(side == s) & (y == 1)].max() + x[(side == s) & (y == 0)].min()) / 2 for s in (0, 1)]
    best = optimize.minimize(cost, np.array([*start, *priors]), method="Nelder-Mead",
                             options={"xatol": 1e-7, "fatol": 1e-9, "maxiter": 8000})
    mu_c, mu_r, ln_w, ln_tau = best.x
    return Fit((math.exp(mu_c), math.exp(mu_r)), math.exp(ln_w), math.exp(ln_tau), len(runs))


def jackknife(blocks: Sequence[Hashable], estimate: Callable[[Optional[Hashable]], Optional[float]]) -> tuple[float, int]:
    """The delete-one-block jackknife variance of `estimate` (called with the block to leave out, None for none)
    and the number of blocks it came from; (inf, n) with fewer than two blocks whose estimate exists."""
    values = [v for v in (estimate(b) for b in blocks) if v is not None]
    g = len(values)
    if g < 2:
        return math.inf, g
    mean = sum(values) / g
    return (g - 1) / g * sum((v - mean) ** 2 for v in values), g


def prediction_half_width(variance: float, blocks: int, rerun_spread: float, step: float, confidence: float) -> float:
    """Half the width (in log ratio) of where a re-run's estimate should fall: Student's t on `blocks` - 1 degrees
    of freedom over both estimates' error (2 x `variance`), plus the run-to-run spread the rounds cannot see for
    both runs; at least one staircase step."""
    if not math.isfinite(variance):
        return math.inf
    t = float(stats.t.ppf((1 + confidence) / 2, blocks - 1))
    z = float(stats.norm.ppf((1 + confidence) / 2))
    return max(math.sqrt(t ** 2 * 2 * variance + z ** 2 * 2 * rerun_spread ** 2), math.log(1 + step))
