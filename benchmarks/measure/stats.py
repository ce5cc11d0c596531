"""Agreement statistics and their bootstrap intervals (scipy for the rank statistics).

Every statistic returns nan where it is undefined (a constant column, one class only), never
a warning: bootstrap resamples of few rows often are constant, and their nan is left out.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "balanced_accuracy",
    "bootstrap",
    "interval",
    "kendall_tau_b",
    "pair_win",
    "paired_difference",
    "roc_auc",
    "spearman",
]

DRAWS = 1000
SEED = 1234
"""The bootstrap of every recorded interval: 1,000 draws of rows with `random.Random(1234)`."""


def _constant(*columns: Sequence[float]) -> bool:
    """Whether any column holds a single value (scipy warns there; the statistic is nan)."""
    return any(np.ptp(np.asarray(c, dtype=float)) == 0 for c in columns)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the average ranks (ties share their mean rank)."""
    if _constant(x, y):
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (ties in either column corrected for)."""
    if _constant(x, y):
        return float("nan")
    return float(stats.kendalltau(x, y, variant="b").statistic)


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """P(score of a positive > score of a negative), ties counted half: the Mann-Whitney U of
    the positives over all pairs, from the average ranks."""
    s, y = np.asarray(scores, float), np.asarray(labels, int)
    positives, negatives = int((y == 1).sum()), int((y == 0).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    u = stats.rankdata(s)[y == 1].sum() - positives * (positives + 1) / 2
    return float(u / (positives * negatives))


def balanced_accuracy(predicted: Sequence[int], labels: Sequence[int]) -> float:
    """The mean of the recalls of the classes present in `labels`."""
    p, y = np.asarray(predicted, int), np.asarray(labels, int)
    recalls = [float((p[y == c] == c).mean()) for c in (0, 1) if (y == c).any()]
    return float(np.mean(recalls)) if recalls else float("nan")


def pair_win(faithful: Sequence[float], unfaithful: Sequence[float]) -> float:
    """Share of pairs whose faithful score is higher (a tie counts 0.5)."""
    f, u = np.asarray(faithful, float), np.asarray(unfaithful, float)
    if len(f) == 0:
        return float("nan")
    return float(((f > u) + 0.5 * (f == u)).mean())


def bootstrap(
    metric: Callable[..., float],
    columns: Sequence[Sequence[float]],
    draws: int = DRAWS,
    seed: int = SEED,
) -> tuple[float, float, float]:
    """The metric and its 95 % percentile interval over rows resampled with replacement.

    The same rows (indices) are drawn for every column. The draws are `random.Random(seed)`'s,
    as every recorded interval's were, so that an old run's rows give its interval again
    (`--merge`); resamples whose metric is nan are left out.
    """
    cols = [np.asarray(c) for c in columns]
    value = metric(*cols)
    rng = random.Random(seed)
    n = len(cols[0])
    samples = []
    for _ in range(draws):
        idx = np.array([rng.randrange(n) for _ in range(n)])
        v = metric(*[c[idx] for c in cols])
        if not np.isnan(v):
            samples.append(v)
    if not samples:
        return value, float("nan"), float("nan")
    lo, hi = np.percentile(samples, [2.5, 97.5])
    return value, float(lo), float(hi)


def interval(metric: Callable[..., float], *columns: Sequence[float]) -> dict[str, Any]:
    """`{"value": v, "ci95": [lo, hi]}`: a metric as agreement.py's JSON records it."""
    point, lo, hi = bootstrap(metric, columns)
    return {"value": point, "ci95": [lo, hi]}


def paired_difference(
    metric: Callable[..., float], a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]
) -> dict[str, Any]:
    """Run a's metric minus run b's on the same rows, with an interval over the rows resampled
    for both (what the rows share cancels out): `{"a", "b", "difference", "ci95"}`."""
    k = len(a)

    def difference(*cols: Any) -> float:
        return metric(*cols[:k]) - metric(*cols[k:])

    value, lo, hi = bootstrap(difference, [*a, *b])
    return {"a": metric(*a), "b": metric(*b), "difference": value, "ci95": [lo, hi]}
