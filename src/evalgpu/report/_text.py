"""The report as text: the per-scorer table of a summary, its lowest-scoring and failed rows."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["failure_line", "fmt", "format_report", "table", "where"]


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


def table(summary: dict[str, Any]) -> str:
    """The per-scorer table: counts, mean, median, p10, p90 and mean axes of each scorer."""
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
    return "\n".join(lines)


def format_report(summary: dict[str, Any], several_files: bool = False) -> str:
    """The per-scorer table, then the lowest-scoring and the failed rows with their reasons."""
    lines = [table(summary)]
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
