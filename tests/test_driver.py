"""The driver's seams: a row read once; a chunk scored into records without writing, each row
by the scorers its `todo` names; a row that cannot be prepared fails alone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from evalgpu import create_context_recall_scorer, create_summarization_scorer, evaluate
from evalgpu.data import RowError
from evalgpu.driver import CHUNK_ROWS, ChunkSizer, Driver
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.rows import Fields, Row, RowReader
from samples import SOURCE, summary_rows


def test_score_chunk_returns_records_in_row_then_scorer_order(engine: ScriptedEngine) -> None:
    driver = Driver(
        [
            create_summarization_scorer(engine),
            create_context_recall_scorer(engine, context=[SOURCE]),
        ],
        files=["a.jsonl", "b.jsonl"],
    )
    chunk = [
        Row(0, 1, {"id": 7, "source": SOURCE, "summary": SOURCE, "ground_truth": SOURCE}),
        Row(1, 3, RowError("line is not valid JSON")),
    ]
    records = driver.score_chunk(list(driver.read(chunk)))
    assert [(r["file"], r["row"], r["id"], r["scorer"]) for r in records] == [
        ("a.jsonl", 1, "7", "summarization-scorer"),
        ("a.jsonl", 1, "7", "context-recall-scorer"),
        ("b.jsonl", 3, None, "summarization-scorer"),
        ("b.jsonl", 3, None, "context-recall-scorer"),
    ]
    assert records[0]["score"] == 1.0 and records[1]["score"] == 1.0
    assert records[2]["error"] == "b.jsonl row 3: line is not valid JSON"
    # One engine: both scorers' calls of the chunk share its waves: (claims, questions, claims),
    # then (alignment, question checks, attribution), then (coverage).
    assert len(engine.calls) == 3
    assert [sorted({r.tag.split(".")[0] for r in call}) for call in engine.calls] == [
        ["context_recall", "summarization"],
        ["context_recall", "summarization"],
        ["summarization"],
    ]


def test_a_row_is_scored_by_the_scorers_its_todo_names(engine: ScriptedEngine) -> None:
    summarization = create_summarization_scorer(engine)
    recall = create_context_recall_scorer(engine, context=[SOURCE])
    driver = Driver([summarization, recall])
    fields = {"source": SOURCE, "summary": SOURCE, "ground_truth": SOURCE}
    rows = list(driver.read([Row(0, 1, fields), Row(0, 2, fields)]))
    rows = [replace(rows[0], todo=(recall.id,)), rows[1]]  # row 2: every scorer (None)
    records = driver.score_chunk(rows)
    assert [(r["row"], r["scorer"]) for r in records] == [
        (1, recall.id),
        (2, summarization.id),
        (2, recall.id),
    ]


def test_a_row_is_read_once_its_id_problem_and_source_taken_through_the_map() -> None:
    reader = RowReader({"id": "key", "source": "article"})
    read = list(
        reader.read(
            [
                Row(0, 1, {"key": 7, "article": "A.", "id": "not this one"}),
                Row(0, 2, {"key": [1], "input": {"b": 1, "a": 2}}),
                Row(0, 3, RowError("line is not valid JSON")),
            ]
        )
    )
    assert [(r.id, r.problem, r.group) for r in read] == [
        ("7", None, "A."),
        (None, "id: must be a string or an integer, got a list", '{"a": 2, "b": 1}'),
        (None, "line is not valid JSON", None),
    ]


def test_an_exception_while_preparing_a_row_fails_that_row_only(
    engine: ScriptedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    get = Fields.get

    def fragile(self: Fields, name: str, *alternatives: str) -> Any:
        if self.record.get("id") == "r1":  # a hostile value, as a scorer reads it
            raise RecursionError("maximum recursion depth exceeded")
        return get(self, name, *alternatives)

    monkeypatch.setattr(Fields, "get", fragile)
    got = evaluate(summary_rows(3), [create_summarization_scorer(engine)]).run().records
    assert got[1]["error"] == 'row 2 (id "r1"): RecursionError: maximum recursion depth exceeded'
    assert got[1]["errorKind"] == "input"
    assert got[0]["error"] is None and got[2]["error"] is None


def test_chunks_close_where_the_source_changes(engine: ScriptedEngine) -> None:
    scorer = create_summarization_scorer(engine)
    driver = Driver([scorer])
    # Sources a, a, a, b, b, c, c, c, c, c, then an unreadable row and d.
    sources = "aaabbcccccXd"
    rows = [
        Row(0, n, RowError("line is not valid JSON") if s == "X" else {"source": s, "summary": "x"})
        for n, s in enumerate(sources, 1)
    ]
    chunks = driver.chunks(driver.read(rows[1:]), size=2)  # row 1 scored by a previous run
    numbers = [[row.number for row in chunk] for chunk in chunks]
    # "a" is kept whole past 2 rows; "c" is cut at twice the size; the unreadable row 11 makes
    # no calls and cuts nothing: it joins the chunk before it.
    assert numbers == [[2, 3], [4, 5], [6, 7, 8, 9], [10, 11], [12]]


def test_a_time_sized_chunk_starts_at_one_row_and_grows_to_the_rate() -> None:
    sizer = ChunkSizer(seconds=60)
    assert sizer.rows == CHUNK_ROWS[0] == 1  # the first records come after one row's work
    sizer.observe(1, 20.0)  # 0.05 rows/s: 3 rows take a minute
    assert sizer.rows == 3
    sizer.observe(3, 30.0)  # 4 rows in 50 s over the run: 4.8 rows a minute
    assert sizer.rows == 4
    fast = ChunkSizer(seconds=60)
    fast.observe(1, 0.01)  # a GPU: 100 rows/s, but at most four times the last chunk
    assert fast.rows == 4
    for _ in range(10):
        fast.observe(fast.rows, fast.rows / 100)
    assert fast.rows == CHUNK_ROWS[1]  # the ceiling, not 6,000 rows
    slow = ChunkSizer(seconds=60)
    slow.observe(1, 600.0)  # slower than a row a minute: still one row
    assert slow.rows == 1


def test_a_fixed_chunk_size_stays_and_bad_sizes_are_refused() -> None:
    fixed = ChunkSizer(fixed=7)
    fixed.observe(7, 0.001)
    assert fixed.rows == 7
    with pytest.raises(ValueError, match="chunk_size must be >= 1, got 0"):
        ChunkSizer(fixed=0)
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="chunk_seconds must be > 0"):
            ChunkSizer(seconds=bad)


def test_each_chunk_takes_the_size_the_sizer_has_when_it_starts(engine: ScriptedEngine) -> None:
    driver = Driver([create_summarization_scorer(engine)])
    rows = [Row(0, n, {"source": f"s{n}", "summary": "x"}) for n in range(1, 12)]
    sizer = ChunkSizer(seconds=60)
    sizes = []
    for chunk in driver.chunks(driver.read(rows), size=sizer):
        sizes.append(len(chunk))
        sizer.observe(len(chunk), 60.0 * len(chunk) / 3)  # 3 rows a minute
    assert sizes == [1, 3, 3, 3, 1]
