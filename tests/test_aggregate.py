"""Aggregates as records arrive: a fold over records, kept in bounded memory."""

from __future__ import annotations

from typing import Any

import pytest

from evalgpu.aggregate import Aggregator
from evalgpu.report import format_report

S = "summarization-scorer"
C = "context-recall-scorer"


def rec(row: int, score: float | None, scorer: str = S, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "row": row,
        "id": f"r{row}",
        "file": "d.jsonl",
        "scorer": scorer,
        "score": score,
        "reason": f"reason {row}",
        "usage": {"prompt_tokens": 100, "output_tokens": 10, "cached_tokens": 40, "calls": 3},
        "error": None if score is not None else f"row {row}: boom",
    }
    return {**record, **extra}


def test_counts_mean_median_percentiles_histogram() -> None:
    agg = Aggregator([S], ["d.jsonl"])
    for row, score in enumerate([0.0, 0.5, 0.5, 1.0, 0.25], 1):
        agg.add(rec(row, score))
    s = agg.summary()["scorers"][S]
    assert (s["scored"], s["failed"]) == (5, 0)
    assert s["mean"] == pytest.approx(0.45)
    assert s["median"] == 0.5
    assert s["percentiles"]["p0"] == 0.0 and s["percentiles"]["p100"] == 1.0
    assert s["percentiles"]["p25"] == 0.25 and s["percentiles"]["p75"] == 0.5
    assert s["percentiles"]["p10"] == pytest.approx(0.1)  # linear between ranks, as numpy
    assert s["histogram"]["counts"] == [1, 0, 1, 0, 0, 2, 0, 0, 0, 1]
    assert s["histogram"]["edges"][0] == 0 and s["histogram"]["edges"][-1] == 1
    assert s["tokens"] == {
        "cached_tokens": 200,
        "calls": 15,
        "output_tokens": 50,
        "prompt_tokens": 500,
    }
    assert s["cached_share"] == pytest.approx(0.4)


def test_the_latest_outcome_wins_and_a_success_counts_once() -> None:
    agg = Aggregator([S, C], ["d.jsonl"])
    agg.add(rec(1, None))
    agg.add(rec(2, None))
    agg.add(rec(1, 0.5))  # retried: now scored
    agg.add(rec(1, 0.9))  # a duplicate success is not counted again
    agg.add(rec(1, None))  # and a later failure does not undo it
    agg.add(rec(1, 1.0, scorer=C))
    assert agg.counts(C) == (1, 0)
    s = agg.summary()["scorers"][S]
    assert (s["scored"], s["failed"]) == (1, 1)
    assert s["mean"] == 0.5
    assert s["duplicate_records"] == 1
    assert [f["row"] for f in s["failures"]] == [2]
    assert agg.scored_total() == 2


def test_failures_are_counted_by_their_latest_kind() -> None:
    agg = Aggregator([S], ["d.jsonl"])
    agg.add(rec(1, None, errorKind="engine"))
    agg.add(rec(2, None, errorKind="too_long"))
    agg.add(rec(3, None, errorKind="engine"))
    agg.add(rec(1, None, errorKind="invalid_reply"))  # retried, failed another way
    agg.add(rec(3, 0.5))  # retried: scored
    agg.add(rec(4, None))  # written before kinds existed
    s = agg.summary()["scorers"][S]
    assert (s["scored"], s["failed"]) == (1, 3)
    assert s["errors"] == {
        "input": 0,
        "too_long": 1,
        "invalid_reply": 1,
        "engine": 0,
        "unknown": 1,
    }
    assert [f["errorKind"] for f in s["failures"]] == ["invalid_reply", "too_long", None]
    text = format_report(agg.summary())
    assert "Failed rows, summarization-scorer (1 too_long, 1 invalid_reply, 1 unknown):" in text
    assert "  [too_long] row 2: boom" in text


def test_several_files_are_kept_apart() -> None:
    agg = Aggregator([S], ["a.jsonl", "b.jsonl"])
    agg.add(rec(1, 0.5, file="a.jsonl"))
    agg.add(rec(1, 0.5, file="b.jsonl"))
    agg.add(rec(1, 0.5, file="unknown.jsonl"))  # not this run's: ignored
    assert agg.counts(S) == (2, 0)  # row 1 of each file, neither a duplicate of the other
    assert "duplicate_records" not in agg.summary()["scorers"][S]


def test_lowest_rows_and_axes() -> None:
    agg = Aggregator([S], ["d.jsonl"])
    for row in range(1, 31):
        a, c = (row % 5) / 4, 1.0
        agg.add(rec(row, min(a, c), axes={"alignment": a, "coverage": c}))
    s = agg.summary()["scorers"][S]
    assert [x["row"] for x in s["lowest"]][:6] == [5, 10, 15, 20, 25, 30]  # 0.0, earliest first
    assert len(s["lowest"]) == 10
    assert s["axes"]["coverage"] == 1.0
    assert s["axes"]["alignment"] == pytest.approx(sum((r % 5) / 4 for r in range(1, 31)) / 30)
    cells = {(a, c): n for a, c, n in s["scatter"]["cells"]}
    assert cells[(0, 20)] == 6 and sum(cells.values()) == 30


def test_soft_axes_and_recall_are_averaged_and_shown_under_their_row() -> None:
    agg = Aggregator([S, C], ["d.jsonl"])
    soft = {"alignment_soft": 0.9, "coverage_soft": 0.2}
    agg.add(rec(1, 0.5, axes={"alignment": 1.0, "coverage": 0.5, **soft}))
    agg.add(rec(2, 1.0, axes={"alignment": 1.0, "coverage": 1.0, "alignment_soft": 0.7}))
    agg.add(rec(1, 0.5, scorer=C, axes={"recall": 0.5, "recall_soft": 0.25}))
    summary = agg.summary()["scorers"]
    # Each axis over the rows that have it (row 2's engine gave no p for its coverage).
    assert summary[S]["axes"] == pytest.approx(
        {"alignment": 1.0, "coverage": 0.75, "alignment_soft": 0.8, "coverage_soft": 0.2}
    )
    assert summary[C]["axes"] == {"recall": 0.5, "recall_soft": 0.25}
    assert "scatter" in summary[S] and "scatter" not in summary[C]
    lines = format_report(agg.summary()).splitlines()
    assert lines[2].split()[-2:] == ["1.000", "0.750"]
    assert lines[3].split() == [
        "axes,",
        "mean:",
        "alignment_soft",
        "0.800,",
        "coverage_soft",
        "0.200",
    ]
    assert lines[4].split()[0] == C and lines[4].split()[-2:] == ["-", "-"]
    assert lines[5].split() == ["axes,", "mean:", "recall", "0.500,", "recall_soft", "0.250"]


def test_memory_is_bounded_by_rows_not_by_text() -> None:
    agg = Aggregator([S], ["d.jsonl"])
    for row in range(1, 20_001):
        agg.add(rec(row, (row % 4) / 4, reason="x" * 5000))
    summary = agg.summary()["scorers"][S]
    assert summary["scored"] == 20_000
    assert len(agg._by[S].scores) == 4  # one count per distinct score, not one per row
    assert all(len(x["reason"]) <= 601 for x in summary["lowest"])
