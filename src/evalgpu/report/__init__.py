"""The report of an output folder: the per-scorer table as text, and a static page.

The report reads what a run wrote (`evalgpu.storage.read_folder`: the folder's configuration
and the aggregates of its records, or a `summary.json`) and writes nothing back but
`report.html`; nothing that runs imports it.

    text, page, bad = write_report(Path("runs/x"))   # what `python -m evalgpu report` does
"""

from __future__ import annotations

from pathlib import Path

from evalgpu.report._html import html_report
from evalgpu.report._text import format_report
from evalgpu.storage import read_folder

__all__ = ["format_report", "html_report", "write_report"]


def write_report(out: Path) -> tuple[str, Path, int]:
    """Aggregate `out/results.jsonl`, write `out/report.html`.

    Returns:
        The report text, the page's path, and the number of unreadable lines skipped.

    Raises:
        FileNotFoundError: `out` is not an output folder (it has no `config.json`).
    """
    config, aggregates, bad = read_folder(out)
    summary = aggregates.summary()
    several = len(config["data"]) > 1
    page = out / "report.html"
    page.write_text(html_report(summary, config, several), encoding="utf-8")
    return format_report(summary, several), page, bad
