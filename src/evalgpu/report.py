"""Results as they arrive: per-scorer aggregates, `summary.json` figures, the report table.

`Aggregator` takes `results.jsonl` records one at a time and keeps only bounded state, so a
1 M-row run aggregates in flat memory: a byte per (file, row, scorer) for what is done (its
`Ledger`), a count per distinct score (scores are ratios of small counts, so exact percentiles
need no list of scores), the sum of each axis (hard and soft), a binned alignment-vs-coverage
grid, token sums, and the few lowest-scoring rows. The latest outcome of a (row, scorer) wins:
a success is counted once, and a failure only while no success follows it. The static page is
`evalgpu.report_html`.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu.ledger import SCORED, Ledger, failure_state
from evalgpu.storage import config_scale, scan_results

__all__ = [
    "Aggregator",
    "failure_line",
    "fmt",
    "format_report",
    "load_results",
    "where",
    "write_report",
]

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
    """Aggregates records of one output folder (see the module docstring).

    Args:
        scorers: the scorer ids of the run, in order.
        files: the data file names that records carry in `file`, in order.
        scale: the scorers' scale (histogram range).
    """

    def __init__(self, scorers: list[str], files: list[str], scale: float = 1.0) -> None:
        self.scorers = list(scorers)
        self.ledger = Ledger(files)
        self.scale = scale
        self._by = {s: _Scorer() for s in self.scorers}
        self._seq = 0

    def done(self, file: int, row: int, scorer: str) -> bool:
        """True when (file, row, scorer) already has a successful record."""
        return self.ledger.done(file, row, scorer)

    def add(self, record: dict[str, Any]) -> None:
        """Take one record; records of unknown scorers or files are ignored."""
        scorer = record.get("scorer")
        file = self.ledger.file_index(record)
        row = record.get("row")
        if scorer not in self._by or file < 0 or not isinstance(row, int) or row < 0:
            return
        agg = self._by[scorer]
        usage = record.get("usage") or {}
        for key in ("prompt_tokens", "output_tokens", "cached_tokens", "calls"):
            agg.tokens[key] += int(usage.get(key) or 0)
        score = record.get("score")
        if record.get("error") is not None or not isinstance(score, (int, float)):
            if (
                self.ledger.mark(file, row, scorer, failure_state(record.get("errorKind")))
                != SCORED
            ):
                if len(agg.failures) < LOWEST:
                    agg.failures[(file, row)] = _brief(record)
            return
        if self.ledger.mark(file, row, scorer, SCORED) == SCORED:
            agg.duplicates += 1  # never written by a run; counted, not scored twice
            return
        agg.failures.pop((file, row), None)
        agg.scores[round(float(score), 9)] += 1
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
        item = (-float(score), -self._seq, _brief(record))  # ties: the earliest rows stay
        if len(agg.lowest) < LOWEST:
            heapq.heappush(agg.lowest, item)
        elif item > agg.lowest[0]:
            heapq.heapreplace(agg.lowest, item)

    def counts(self, scorer: str) -> tuple[int, int]:
        """(scored, failed) for a scorer: rows whose latest outcome is a score / an error."""
        return self.ledger.counts(scorer)

    def error_kinds(self, scorer: str) -> dict[str, int]:
        """Failed rows of a scorer by error kind (see `Ledger.error_kinds`)."""
        return self.ledger.error_kinds(scorer)

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


def _brief(record: dict[str, Any]) -> dict[str, Any]:
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


def load_results(out: Path) -> tuple[dict[str, Any], Aggregator, int]:
    """Read an output folder: its config, an Aggregator over `results.jsonl`, and bad lines.

    Raises:
        FileNotFoundError: the folder has no `config.json` (it is not an output folder).
    """
    config_path = out / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{out} is not an evalgpu output folder (no config.json)")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    aggregator = Aggregator(
        config["scorer_ids"], [d["path"] for d in config["data"]], config_scale(config)
    )
    _, bad = scan_results(out / "results.jsonl", aggregator.add)
    return config, aggregator, bad


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for the table, "-" for None."""
    return "-" if value is None else f"{value:.{digits}f}"


def where(item: dict[str, Any], several_files: bool) -> str:
    """Where a summary entry comes from: `[file] row N (id "x")`."""
    text = f"row {item['row']}"
    if several_files and item.get("file"):
        text = f"{item['file']} {text}"
    if item.get("id") is not None:
        text += f" (id {json.dumps(item['id'], ensure_ascii=False)})"
    return text


def _first_line(text: str, width: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def format_report(summary: dict[str, Any], several_files: bool = False) -> str:
    """The per-scorer table, then the lowest-scoring and the failed rows with their reasons."""
    header = (
        f"{'scorer':<24} {'scored':>8} {'failed':>7} {'mean':>6} {'median':>6} "
        f"{'p10':>6} {'p90':>6} {'align':>6} {'cover':>6}"
    )
    lines = [header, "-" * len(header)]
    for scorer, s in summary["scorers"].items():
        axes = s.get("axes", {})
        lines.append(
            f"{scorer:<24} {s['scored']:>8,} {s['failed']:>7,} {fmt(s['mean']):>6} "
            f"{fmt(s['median']):>6} {fmt(s['percentiles']['p10']):>6} "
            f"{fmt(s['percentiles']['p90']):>6} {fmt(axes.get('alignment')):>6} "
            f"{fmt(axes.get('coverage')):>6}"
        )
        # Under its row, the axes the columns do not show: soft (mean p of true), recall.
        others = {k: v for k, v in axes.items() if k not in ("alignment", "coverage")}
        if others:
            listed = ", ".join(f"{k} {fmt(v)}" for k, v in others.items())
            lines.append(f"{'':<24} axes, mean: {listed}")
    for scorer, s in summary["scorers"].items():
        if s["lowest"]:
            lines += ["", f"Lowest scores, {scorer}:"]
            for item in s["lowest"]:
                lines.append(
                    f"  {fmt(item['score'], 2)}  {where(item, several_files)}: "
                    f"{_first_line(item['reason'] or '')}"
                )
        if s["failures"]:
            more = s["failed"] - len(s["failures"])
            kinds = ", ".join(f"{n:,} {k}" for k, n in s.get("errors", {}).items() if n)
            lines += [
                "",
                f"Failed rows, {scorer}"
                + (f" ({kinds})" if kinds else "")
                + (f", first {len(s['failures'])}:" if more > 0 else ":"),
            ]
            for item in s["failures"]:
                lines.append(f"  {failure_line(item)}")
    return "\n".join(lines)


def failure_line(item: dict[str, Any]) -> str:
    """A failed row of a summary's `failures`: its error kind, then its error's first line."""
    kind = f"[{item['errorKind']}] " if item.get("errorKind") else ""
    return kind + _first_line(item["error"] or "", 200)


def write_report(out: Path) -> tuple[str, Path, int]:
    """Aggregate `out/results.jsonl`, write `out/report.html`.

    Returns:
        The report text, the page's path, and the number of unreadable lines skipped.
    """
    config, aggregator, bad = load_results(out)
    summary = aggregator.summary()
    several = len(config["data"]) > 1
    from evalgpu.report_html import html_report

    page = out / "report.html"
    page.write_text(html_report(summary, config, several), encoding="utf-8")
    return format_report(summary, several), page, bad
