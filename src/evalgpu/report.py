"""Results as they arrive: per-scorer aggregates, `summary.json`, the report table and page.

`Aggregator` takes `results.jsonl` records one at a time and keeps only bounded state, so a
1 M-row run aggregates in flat memory: a byte per (file, row, scorer) for what is done, a count
per distinct score (scores are ratios of small counts, so exact percentiles need no list of
scores), a binned alignment-vs-coverage grid, token sums, and the few lowest-scoring rows.

A (row, scorer) may have several records: failures retried by a resumed run, then a success.
The latest outcome wins: a success is counted once, and a failure only while no success
follows it.
"""

from __future__ import annotations

import heapq
import html
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu.results import ERROR_KINDS

__all__ = [
    "Aggregator",
    "format_report",
    "html_report",
    "load_results",
    "scan_results",
    "write_report",
]

LOWEST = 10
"""Lowest-scoring rows kept per scorer for the report."""
BINS = 10
"""Histogram bins over [0, scale]."""
GRID = 20
"""The alignment-vs-coverage scatter bins each axis into 1/GRID steps."""

# One byte per (file, row, scorer): nothing yet, scored, or failed with its error kind (a record
# written before kinds existed is failed with none).
_NONE, _FAILED, _SCORED = 0, 1, 2
_KIND_STATE: dict[str, int] = {kind: 3 + i for i, kind in enumerate(ERROR_KINDS)}
_FAILED_STATES = (_FAILED, *_KIND_STATE.values())


def scan_results(path: Path, on_record: Callable[[dict[str, Any]], None]) -> tuple[int, int]:
    """Feed every complete record of `results.jsonl` to `on_record`.

    A last line without its newline (torn by a crash) is ignored, and so is a complete line
    that does not parse.

    Returns:
        The byte offset just past the last complete line, and the number of lines skipped
        because they did not parse.
    """
    end = 0
    bad = 0
    if not path.exists():
        return 0, 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break  # torn: the crash came before its newline
            end += len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(record, dict):
                on_record(record)
            else:
                bad += 1
    return end, bad


@dataclass
class _Scorer:
    """Running aggregates of one scorer."""

    scores: Counter[float] = field(default_factory=Counter)
    total: float = 0.0
    axes_n: int = 0
    alignment: float = 0.0
    coverage: float = 0.0
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
        self.files = {name: i for i, name in enumerate(files)}
        self.scale = scale
        self._state: dict[tuple[int, str], bytearray] = {}
        self._by = {s: _Scorer() for s in self.scorers}
        self._seq = 0

    def state(self, file: int, row: int, scorer: str) -> int:
        states = self._state.get((file, scorer))
        return states[row] if states is not None and row < len(states) else _NONE

    def done(self, file: int, row: int, scorer: str) -> bool:
        """True when (file, row, scorer) already has a successful record."""
        return self.state(file, row, scorer) == _SCORED

    def add(self, record: dict[str, Any]) -> None:
        """Take one record; records of unknown scorers or files are ignored."""
        scorer = record.get("scorer")
        file = self.files.get(str(record.get("file")), -1) if len(self.files) > 1 else 0
        row = record.get("row")
        if scorer not in self._by or file < 0 or not isinstance(row, int) or row < 0:
            return
        agg = self._by[scorer]
        usage = record.get("usage") or {}
        for key in ("prompt_tokens", "output_tokens", "cached_tokens", "calls"):
            agg.tokens[key] += int(usage.get(key) or 0)
        states = self._state.setdefault((file, scorer), bytearray())
        if row >= len(states):
            states.extend(bytes(max(row + 1 - len(states), len(states) // 2)))
        score = record.get("score")
        if record.get("error") is not None or not isinstance(score, (int, float)):
            if states[row] != _SCORED:
                states[row] = _KIND_STATE.get(str(record.get("errorKind")), _FAILED)
                if len(agg.failures) < LOWEST:
                    agg.failures[(file, row)] = _brief(record)
            return
        if states[row] == _SCORED:
            agg.duplicates += 1  # never written by a run; counted, not scored twice
            return
        states[row] = _SCORED
        agg.failures.pop((file, row), None)
        agg.scores[round(float(score), 9)] += 1
        agg.total += score
        axes = record.get("axes")
        if isinstance(axes, dict) and {"alignment", "coverage"} <= axes.keys():
            a, c = float(axes["alignment"]), float(axes["coverage"])
            agg.axes_n += 1
            agg.alignment += a
            agg.coverage += c
            agg.grid[(round(a * GRID), round(c * GRID))] += 1
        self._seq += 1
        item = (-float(score), -self._seq, _brief(record))  # ties: the earliest rows stay
        if len(agg.lowest) < LOWEST:
            heapq.heappush(agg.lowest, item)
        elif item > agg.lowest[0]:
            heapq.heapreplace(agg.lowest, item)

    def counts(self, scorer: str) -> tuple[int, int]:
        """(scored, failed) for a scorer: rows whose latest outcome is a score / an error."""
        scored = failed = 0
        for (_, s), states in self._state.items():
            if s == scorer:
                scored += states.count(_SCORED)
                failed += sum(states.count(state) for state in _FAILED_STATES)
        return scored, failed

    def error_kinds(self, scorer: str) -> dict[str, int]:
        """Failed rows of a scorer by error kind (every kind, 0 included; "unknown" only for
        records that carry none)."""
        found: dict[str, int] = {kind: 0 for kind in ERROR_KINDS}
        unknown = 0
        for (_, s), states in self._state.items():
            if s == scorer:
                for kind, state in _KIND_STATE.items():
                    found[kind] += states.count(state)
                unknown += states.count(_FAILED)
        if unknown:
            found["unknown"] = unknown
        return found

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
            if agg.axes_n:
                entry["axes"] = {
                    "alignment": agg.alignment / agg.axes_n,
                    "coverage": agg.coverage / agg.axes_n,
                }
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
        config["scorer_ids"], [d["path"] for d in config["data"]], config["options"]["scale"]
    )
    _, bad = scan_results(out / "results.jsonl", aggregator.add)
    return config, aggregator, bad


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _where(item: dict[str, Any], several_files: bool) -> str:
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
            f"{scorer:<24} {s['scored']:>8,} {s['failed']:>7,} {_fmt(s['mean']):>6} "
            f"{_fmt(s['median']):>6} {_fmt(s['percentiles']['p10']):>6} "
            f"{_fmt(s['percentiles']['p90']):>6} {_fmt(axes.get('alignment')):>6} "
            f"{_fmt(axes.get('coverage')):>6}"
        )
    for scorer, s in summary["scorers"].items():
        if s["lowest"]:
            lines += ["", f"Lowest scores, {scorer}:"]
            for item in s["lowest"]:
                lines.append(
                    f"  {_fmt(item['score'], 2)}  {_where(item, several_files)}: "
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
                lines.append(f"  {_failure(item)}")
    return "\n".join(lines)


def _failure(item: dict[str, Any]) -> str:
    kind = f"[{item['errorKind']}] " if item.get("errorKind") else ""
    return kind + _first_line(item["error"] or "", 200)


def _svg_histogram(hist: dict[str, Any]) -> str:
    counts, edges = hist["counts"], hist["edges"]
    width, height, pad = 420, 200, 30
    top = max(counts) or 1
    bar = (width - 2 * pad) / len(counts)
    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="score histogram">']
    for i, n in enumerate(counts):
        h = (height - 2 * pad) * n / top
        x, y = pad + i * bar, height - pad - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" fill="#4a78c2">'
            f"<title>{edges[i]:g}–{edges[i + 1]:g}: {n:,}</title></rect>"
        )
        if n:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{y - 3:.1f}" font-size="10" '
                f'text-anchor="middle">{n:,}</text>'
            )
    for i in (0, len(counts) // 2, len(counts)):
        parts.append(
            f'<text x="{pad + i * bar:.1f}" y="{height - pad + 14}" font-size="10" '
            f'text-anchor="middle">{edges[i]:g}</text>'
        )
    parts.append(
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'stroke="#333"/>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _svg_scatter(scatter: dict[str, Any]) -> str:
    size, pad = 320, 36
    grid = scatter["grid"]
    cells = scatter["cells"]
    top = max((n for _, _, n in cells), default=1)
    span = size - 2 * pad
    parts = [f'<svg width="{size}" height="{size}" role="img" aria-label="alignment vs coverage">']
    parts.append(
        f'<rect x="{pad}" y="{pad}" width="{span}" height="{span}" fill="none" stroke="#999"/>'
    )
    for a, c, n in cells:
        x = pad + span * c / grid
        y = size - pad - span * a / grid
        r = 2 + 10 * math.sqrt(n / top)
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="#c2584a" fill-opacity="0.6">'
            f"<title>coverage {c / grid:.2f}, alignment {a / grid:.2f}: {n:,} rows</title></circle>"
        )
    parts.append(
        f'<text x="{size / 2}" y="{size - 6}" font-size="11" text-anchor="middle">coverage</text>'
        f'<text x="12" y="{size / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {size / 2})">alignment</text>'
        f'<text x="{pad}" y="{size - pad + 12}" font-size="10">0</text>'
        f'<text x="{size - pad}" y="{size - pad + 12}" font-size="10" text-anchor="end">1</text>'
        f'<text x="{pad - 4}" y="{pad + 4}" font-size="10" text-anchor="end">1</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def html_report(
    summary: dict[str, Any], config: dict[str, Any], several_files: bool = False
) -> str:
    """A static page (inline SVG, no script, no network): histograms, scatter, lowest rows."""
    e = html.escape
    body = [
        "<h1>evalgpu report</h1>",
        f"<p>Model {e(str(config.get('model') or 'default'))}, backend "
        f"{e(str(config.get('backend')))}; data {e(', '.join(d['path'] for d in config['data']))}; "
        f"config {e(config.get('hash', '')[:12])}.</p>",
        f"<pre>{e(format_report(summary, several_files).split(chr(10) + chr(10))[0])}</pre>",
    ]
    for scorer, s in summary["scorers"].items():
        body.append(f"<h2>{e(scorer)}</h2>")
        body.append(
            f"<p>{s['scored']:,} scored, {s['failed']:,} failed; mean {_fmt(s['mean'])}, "
            f"median {_fmt(s['median'])}.</p>"
        )
        body.append('<div class="charts">')
        body.append(
            f"<figure>{_svg_histogram(s['histogram'])}<figcaption>Scores</figcaption></figure>"
        )
        if "scatter" in s:
            body.append(
                f"<figure>{_svg_scatter(s['scatter'])}"
                "<figcaption>Alignment vs coverage (circle area: rows)</figcaption></figure>"
            )
        body.append("</div>")
        if s["lowest"]:
            body.append(
                "<h3>Lowest scores</h3><table><tr><th>score</th><th>row</th><th>reason</th></tr>"
            )
            for item in s["lowest"]:
                body.append(
                    f"<tr><td>{_fmt(item['score'], 2)}</td>"
                    f"<td>{e(_where(item, several_files))}</td>"
                    f"<td>{e(item['reason'] or '')}</td></tr>"
                )
            body.append("</table>")
        if s["failures"]:
            body.append("<h3>Failed rows</h3><ul>")
            body += [f"<li>{e(_failure(item))}</li>" for item in s["failures"]]
            body.append("</ul>")
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}"
        ".charts{display:flex;gap:2em;flex-wrap:wrap}table{border-collapse:collapse}"
        "td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top;"
        "white-space:pre-wrap}pre{background:#f6f6f6;padding:1em;overflow-x:auto}"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>evalgpu report</title>'
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )


def write_report(out: Path) -> tuple[str, Path, int]:
    """Aggregate `out/results.jsonl`, write `out/report.html`.

    Returns:
        The report text, the page's path, and the number of unreadable lines skipped.
    """
    config, aggregator, bad = load_results(out)
    summary = aggregator.summary()
    several = len(config["data"]) > 1
    page = out / "report.html"
    page.write_text(html_report(summary, config, several), encoding="utf-8")
    return format_report(summary, several), page, bad
