"""Aggregates of records: a fold that takes `results.jsonl` records one at a time.

`Aggregator.add` keeps only bounded state, so a 1 M-row run aggregates in flat memory: a byte
per (file, row, scorer) for its latest outcome (its own `Ledger`, so that it folds any stream
of records: an output folder's, or `evaluate`'s in memory), a count per distinct score (scores
are ratios of small counts, so exact percentiles need no list of scores), the sum of each axis
(hard and soft), a binned alignment-vs-coverage grid, token sums, and the few lowest-scoring
rows. The latest outcome of a (row, scorer) wins: a success is counted once, and a failure
only while no success follows it. `summary()` is the `scorers` and `tokens` part of
`summary.json`, which the report (`evalgpu.report`) formats.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from evalgpu._options import SCALE
from evalgpu.ledger import SCORED, Ledger, outcome
from evalgpu.results import Record

__all__ = ["Aggregator"]

LOWEST = 10
"""Lowest-scoring rows kept per scorer for the report."""
BINS = 10
"""Histogram bins over [0, scale]."""
GRID = 20
"""The alignment-vs-coverage scatter bins each axis into 1/GRID steps."""


@dataclass
class _Scorer:
    """Running aggregates of one scorer."""

    scores: Counter[float] = field(default_factory=Counter)
    total: float = 0.0
    axis_sum: dict[str, float] = field(default_factory=dict)
    axis_n: Counter[str] = field(default_factory=Counter)
    grid: Counter[tuple[int, int]] = field(default_factory=Counter)
    tokens: Counter[str] = field(default_factory=Counter)
    lowest: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    failures: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    duplicates: int = 0


class Aggregator:
    """Aggregates of the records given to `add`, in order (see the module docstring).

    Args:
        scorers: the scorer ids of the run, in order.
        files: the data file names that records carry in `file`, in order.
        scale: the scorers' scale (histogram range).
    """

    def __init__(self, scorers: list[str], files: list[str], scale: float = SCALE) -> None:
        self.scorers = list(scorers)
        self.scale = scale
        self._outcomes = Ledger(files)
        self._by = {s: _Scorer() for s in self.scorers}
        self._seq = 0

    def add(self, record: Record) -> None:
        """Take one record; records of unknown scorers or files are ignored."""
        scorer = record.get("scorer")
        if scorer not in self._by:
            return
        before = self._outcomes.add(record)
        if before is None:
            return
        agg = self._by[scorer]
        usage = record.get("usage") or {}
        for key in ("prompt_tokens", "output_tokens", "cached_tokens", "calls"):
            agg.tokens[key] += int(usage.get(key) or 0)
        where = (self._outcomes.file_index(record), record["row"])
        if outcome(record) != SCORED:
            if before != SCORED and len(agg.failures) < LOWEST:
                agg.failures[where] = _brief(record)
            return
        if before == SCORED:
            agg.duplicates += 1  # never written by a run; counted, not scored twice
            return
        agg.failures.pop(where, None)
        score = float(record["score"])
        agg.scores[round(score, 9)] += 1
        agg.total += score
        axes = record.get("axes")
        if isinstance(axes, dict):
            for name, value in axes.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    agg.axis_sum[name] = agg.axis_sum.get(name, 0.0) + float(value)
                    agg.axis_n[name] += 1
            if {"alignment", "coverage"} <= axes.keys():
                a, c = float(axes["alignment"]), float(axes["coverage"])
                agg.grid[(round(a * GRID), round(c * GRID))] += 1
        self._seq += 1
        item = (-score, -self._seq, _brief(record))  # ties: the earliest rows stay
        if len(agg.lowest) < LOWEST:
            heapq.heappush(agg.lowest, item)
        elif item > agg.lowest[0]:
            heapq.heapreplace(agg.lowest, item)

    def counts(self, scorer: str) -> tuple[int, int]:
        """(scored, failed) for a scorer: rows whose latest outcome is a score / an error."""
        return self._outcomes.counts(scorer)

    def error_kinds(self, scorer: str) -> dict[str, int]:
        """Failed rows of a scorer by error kind (see `Ledger.error_kinds`)."""
        return self._outcomes.error_kinds(scorer)

    def scored_total(self) -> int:
        return sum(self.counts(s)[0] for s in self.scorers)

    def summary(self) -> dict[str, Any]:
        """Per-scorer aggregates (the `scorers` and `tokens` parts of `summary.json`)."""
        per: dict[str, Any] = {}
        totals: Counter[str] = Counter()
        for scorer in self.scorers:
            agg = self._by[scorer]
            scored, failed = self.counts(scorer)
            totals.update(agg.tokens)
            entry: dict[str, Any] = {
                "scored": scored,
                "failed": failed,
                "errors": self.error_kinds(scorer),
                "mean": agg.total / scored if scored else None,
                "median": _quantile(agg.scores, 0.5),
                "percentiles": {
                    f"p{q}": _quantile(agg.scores, q / 100) for q in (0, 10, 25, 50, 75, 90, 100)
                },
                "histogram": _histogram(agg.scores, self.scale),
                "tokens": dict(sorted(agg.tokens.items())),
                "cached_share": _share(agg.tokens),
                "lowest": [b for _, _, b in sorted(agg.lowest, reverse=True)],
                "failures": list(agg.failures.values()),
            }
            if agg.axis_n:  # each axis's mean over the rows that have it
                entry["axes"] = {name: agg.axis_sum[name] / n for name, n in agg.axis_n.items()}
            if agg.grid:
                entry["scatter"] = {
                    "grid": GRID,
                    "cells": [[a, c, n] for (a, c), n in sorted(agg.grid.items())],
                }
            if agg.duplicates:
                entry["duplicate_records"] = agg.duplicates
            per[scorer] = entry
        return {
            "scorers": per,
            "tokens": dict(sorted(totals.items())),
            "cached_share": _share(totals),
        }


def _brief(record: Record) -> dict[str, Any]:
    reason = record.get("reason") or ""
    return {
        "file": record.get("file"),
        "row": record.get("row"),
        "id": record.get("id"),
        "score": record.get("score"),
        "reason": reason if len(reason) <= 600 else reason[:600] + "…",
        "error": record.get("error"),
        "errorKind": record.get("errorKind"),
    }


def _share(tokens: Counter[str]) -> float | None:
    prompt = tokens.get("prompt_tokens", 0)
    return tokens.get("cached_tokens", 0) / prompt if prompt else None


def _quantile(scores: Counter[float], q: float) -> float | None:
    """The q-quantile with linear interpolation between ranks (numpy's default)."""
    n = sum(scores.values())
    if n == 0:
        return None
    pos = q * (n - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    low_value = high_value = None
    seen = 0
    for value in sorted(scores):
        seen += scores[value]
        if low_value is None and seen > lo:
            low_value = value
        if seen > hi:
            high_value = value
            break
    assert low_value is not None and high_value is not None
    return low_value + (high_value - low_value) * (pos - lo)


def _histogram(scores: Counter[float], scale: float) -> dict[str, Any]:
    counts = [0] * BINS
    for value, n in scores.items():
        counts[min(BINS - 1, max(0, int(value / scale * BINS)))] += n
    return {"edges": [round(scale * i / BINS, 9) for i in range(BINS + 1)], "counts": counts}
