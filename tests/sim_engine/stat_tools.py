"""Goodness-of-fit tools for the sampler tests: chi-square with pooled rare cells, and randomized PIT.

Every test here compares observed samples with probabilities computed exactly from the target
model, so a single decisive threshold (0.1%) replaces the two-sample tests' looser approximations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

Z_999 = 3.090  # one-sided 0.1% normal quantile
KS_999 = 1.949  # Kolmogorov 0.1% critical value times sqrt(n)
Cell = TypeVar("Cell", bound=Hashable)


def chi2_critical(df: int, z: float = Z_999) -> float:
    """Wilson-Hilferty approximation of the chi-square upper quantile."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def pooled_chi_square(counts: Mapping[Cell, int], prob: Callable[[Cell], float],
                      min_expected: float = 5.0) -> tuple[float, float, int]:
    """(statistic, 0.1% critical value, df) of observed counts against exact cell probabilities.

    Cells expected fewer than ``min_expected`` times, and every unobserved cell, are pooled into one
    "rest" cell whose expected mass is one minus the listed cells' mass.
    """
    n = sum(counts.values())
    cells = [(c, k, prob(c) * n) for c, k in counts.items()]
    big = [(k, e) for _, k, e in cells if e >= min_expected]
    stat = sum((k - e) ** 2 / e for k, e in big)
    df = len(big) - 1
    rest_obs = n - sum(k for k, _ in big)
    rest_exp = n - sum(e for _, e in big)
    if rest_exp >= min_expected:
        stat += (rest_obs - rest_exp) ** 2 / rest_exp
        df += 1
    assert df >= 1, "too few cells to test"
    return stat, chi2_critical(df), df


def randomized_pit(dist: np.ndarray, token: int, rng: np.random.Generator) -> float:
    """F(y−) + V·p(y) with tokens ordered by falling probability: exactly U(0,1) when y ~ dist."""
    order = np.argsort(-dist, kind="stable")
    rank = int(np.flatnonzero(order == token)[0])
    below = float(dist[order[:rank]].sum())
    return below + float(rng.random()) * float(dist[token])


def ks_uniform(values: Sequence[float]) -> tuple[float, float]:
    """(Kolmogorov-Smirnov distance to U(0,1), its 0.1% critical value)."""
    u = np.sort(np.asarray(values))
    n = len(u)
    grid = np.arange(1, n + 1) / n
    d = float(max((grid - u).max(), (u - (grid - 1 / n)).max()))
    return d, KS_999 / math.sqrt(n)


def loglik_z(logps: Sequence[float], means: Sequence[float], variances: Sequence[float]) -> float:
    """z-score of Σ log p(y) against its exact mean and variance under the model."""
    return (float(np.sum(logps)) - float(np.sum(means))) / math.sqrt(float(np.sum(variances)))


def entropy_moments(dist: np.ndarray) -> tuple[float, float]:
    """Mean and variance of log p(Y) for Y ~ dist."""
    nz = dist[dist > 0]
    logs = np.log(nz)
    mean = float((nz * logs).sum())
    return mean, float((nz * (logs - mean) ** 2).sum())
