"""The report of an output folder: the per-scorer table, the lowest-scoring and failed rows.

It reads what a run wrote (`evalgpu.storage.read_folder`: the folder's configuration and the
aggregates of its records, or a `summary.json`); nothing that runs imports it. The static
page is `evalgpu.report_html`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalgpu.storage import read_folder

__all__ = [
    "failure_line",
    "fmt",
    "format_report",
    "where",
    "write_report",
]


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
    config, aggregates, bad = read_folder(out)
    summary = aggregates.summary()
    several = len(config["data"]) > 1
    from evalgpu.report_html import html_report

    page = out / "report.html"
    page.write_text(html_report(summary, config, several), encoding="utf-8")
    return format_report(summary, several), page, bad
