"""The report table and the static page, from the aggregates of a folder's records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgpu.aggregate import Aggregator
from evalgpu.report import format_report, html_report, write_report
from test_aggregate import S, rec


def test_format_report_table_and_rows() -> None:
    agg = Aggregator([S], ["d.jsonl"])
    agg.add(rec(1, 0.25, reason="Score 0.25, set by coverage.\nUnanswered: X"))
    agg.add(rec(2, None))
    text = format_report(agg.summary())
    lines = text.splitlines()
    assert lines[0].split() == [
        "scorer",
        "scored",
        "failed",
        "mean",
        "median",
        "p10",
        "p90",
        "align",
        "cover",
    ]
    assert lines[2].split()[:4] == [S, "1", "1", "0.250"]
    assert '  0.25  row 1 (id "r1"): Score 0.25, set by coverage. Unanswered: X' in text
    assert "  row 2: boom" in text


def test_html_is_static_with_histogram_and_scatter() -> None:
    agg = Aggregator([S], ["d.jsonl"])
    agg.add(rec(1, 0.5, axes={"alignment": 0.5, "coverage": 1.0}, reason="<script>x</script>"))
    config = {"model": None, "backend": "auto", "data": [{"path": "d.jsonl"}], "hash": "abc"}
    page = html_report(agg.summary(), config)
    assert page.count("<svg") == 2
    assert "alignment vs coverage" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "http" not in page and "src=" not in page  # nothing fetched from anywhere


def test_write_report(tmp_path: Path) -> None:
    config = {
        "scorer_ids": [S],
        "data": [{"path": "d.jsonl"}],
        "options": {"scale": 1.0},
        "model": None,
        "backend": "auto",
        "hash": "abc",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "results.jsonl").write_text(json.dumps(rec(1, 1.0)) + "\n")
    text, page, bad = write_report(tmp_path)
    assert S in text and bad == 0
    assert page == tmp_path / "report.html" and "<svg" in page.read_text()
    with pytest.raises(FileNotFoundError, match="is not an evalgpu output folder"):
        write_report(tmp_path / "nowhere")
