"""The static report page of an output folder: inline SVG, no script, no network."""

from __future__ import annotations

import html
import math
from typing import Any

from evalgpu.report._text import failure_line, fmt, table, where

__all__ = ["html_report"]


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
    data = ", ".join(d["path"] or "(rows from Python)" for d in config["data"])
    body = [
        "<h1>evalgpu report</h1>",
        f"<p>Model {e(str(config.get('model') or 'default'))}, backend "
        f"{e(str(config.get('backend')))}; data {e(data)}; "
        f"config {e(config.get('hash', '')[:12])}.</p>",
        f"<pre>{e(table(summary))}</pre>",
    ]
    for scorer, s in summary["scorers"].items():
        body.append(f"<h2>{e(scorer)}</h2>")
        body.append(
            f"<p>{s['scored']:,} scored, {s['failed']:,} failed; mean {fmt(s['mean'])}, "
            f"median {fmt(s['median'])}.</p>"
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
                    f"<tr><td>{fmt(item['score'], 2)}</td>"
                    f"<td>{e(where(item, several_files))}</td>"
                    f"<td>{e(item['reason'] or '')}</td></tr>"
                )
            body.append("</table>")
        if s["failures"]:
            body.append("<h3>Failed rows</h3><ul>")
            body += [f"<li>{e(failure_line(item))}</li>" for item in s["failures"]]
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
