"""`evalgpu.rows`: a row's fields as a scorer reads them (through the column map), a bad
row as its own error record, repeated ids counted and named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgpu import create_context_recall_scorer, create_summarization_scorer, evaluate
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.rows import IDS_NAMED, Fields
from evalgpu.scorers.context_recall import row_context_scorer
from samples import (
    COMPANY,
    EINSTEIN,
    GOOD,
    PASSAGES,
    read_summary,
    records,
    successes,
    summary_rows,
    write_jsonl,
)


def test_a_field_is_read_from_its_mapped_column() -> None:
    row = Fields({"model_output": "a", "summary": "b"}, {"summary": "model_output"})
    assert row.get("summary") == "a" and row.column("summary") == "model_output"
    assert row.get("input") is None and row.column("input") == "input"


def test_alternatives_are_read_only_for_a_null_field_that_is_not_mapped() -> None:
    assert Fields({"output": "o"}).get("summary", "output") == "o"
    assert Fields({"summary": None, "output": "o"}).get("summary", "output") == "o"
    assert Fields({"summary": "s", "output": "o"}).get("summary", "output") == "s"
    mapped = Fields({"output": "o"}, {"summary": "model_output"})
    assert mapped.get("summary", "output") is None  # a mapped field reads its column alone


def test_a_missing_field_names_the_column_looked_for() -> None:
    assert str(Fields({}).missing("context")) == (
        "context: missing (no 'context' column or a null value)"
    )
    mapped = Fields({}, {"summary": "model_output"})
    assert str(mapped.missing("summary")) == (
        "summary: missing (no 'model_output' column or a null value)"
    )


def test_a_field_has_one_message_whichever_entry_point_reads_it() -> None:
    # Issue 20: rows.py and the scorers each checked these, with two wordings.
    engine = ScriptedEngine()
    recall = create_context_recall_scorer(engine, context=["Cats purr."])
    (bad,) = recall.run_batch([{"ground_truth": "Cats purr.", "context": 5}])
    assert bad.error == "row 1: context: must be a list of strings or a string, got a number"
    summarization = create_summarization_scorer(engine)
    (bad,) = summarization.run_batch([{"input": "Cats purr.", "source": ["x"], "output": "y"}])
    assert bad.error == "row 1: source: must be a string, got a list"


# Through a run: mapped columns, agent-shaped rows, bad rows as error records, repeated ids


def test_map_renames_columns(tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {
                "key": 7,
                "doc": COMPANY,
                "model_output": GOOD,
                "question": "Q?",
                "reference": EINSTEIN,
                "passages": PASSAGES,
            }
        ],
    )
    out = tmp_path / "out"
    engine = ScriptedEngine()
    mapping = {
        "id": "key",
        "source": "doc",
        "summary": "model_output",
        "ground_truth": "reference",
        "context": "passages",
    }
    scorers = [create_summarization_scorer(engine), row_context_scorer(engine)]
    evaluate(data, scorers, map=mapping, out=out).run()
    got = records(out)
    assert [(r["id"], r["scorer"], r["error"]) for r in got] == [
        ("7", "summarization-scorer", None),
        ("7", "context-recall-scorer", None),
    ]
    assert got[1]["score"] == pytest.approx(2 / 3)
    config = json.loads((out / "config.json").read_text())
    assert config["map"]["summary"] == "model_output"


def test_a_mapped_column_that_is_missing_is_named(engine: ScriptedEngine) -> None:
    run = evaluate(
        [{"source": COMPANY, "summary": GOOD}],
        [create_summarization_scorer(engine)],
        map={"summary": "model_output"},
    ).run()
    assert run.records[0]["error"] == (
        "row 1: summary: missing (no 'model_output' column or a null value)"
    )
    assert run.summary is not None
    assert run.summary["scorers"]["summarization-scorer"]["scored"] == 0


def test_agent_shaped_rows(engine: ScriptedEngine) -> None:
    agent = {
        "id": "agent",
        "input": {"inputMessages": [{"id": "1", "role": "user", "content": COMPANY}]},
        "output": [
            {"id": "2", "role": "assistant", "content": [{"type": "text", "text": GOOD}]},
            {"id": "3", "role": "assistant", "content": "  "},
        ],
    }
    tools = {
        "id": "tools",
        "input": {"inputMessages": [{"id": "1", "role": "user", "content": "Who was Einstein?"}]},
        "output": [
            {
                "id": "2",
                "role": "assistant",
                "content": {
                    "parts": [
                        {
                            "type": "tool-invocation",
                            "toolInvocation": {
                                "state": "result",
                                "toolCallId": "c1",
                                "toolName": "search",
                                "args": {},
                                "result": PASSAGES[0],
                            },
                        }
                    ]
                },
            },
            {"id": "3", "role": "assistant", "content": "He was born in 1879."},
        ],
        "ground_truth": "Einstein was born in 1879. He won the Nobel Prize.",
    }
    first = evaluate([agent, tools], [create_summarization_scorer(engine)]).run().records[0]
    assert first["error"] is None and first["axes"]["alignment"] == 1.0
    recall = evaluate([agent, tools], [row_context_scorer(engine)], limit=5).run()
    by_id = {r["id"]: r for r in recall.records}
    assert by_id["tools"]["score"] == pytest.approx(0.5)  # the tool result is the context
    assert by_id["agent"]["score"] == 0.0  # no ground truth: 0, normatively, without a call
    assert "No ground truth" in by_id["agent"]["reason"]


BAD_ROWS = [
    ("{not json", "row 1: line is not valid JSON: "),
    ({"id": "s1", "source": COMPANY}, 'row 2 (id "s1"): summary: missing'),
    ({"id": "s2", "source": COMPANY, "summary": 42.5}, 'row 3 (id "s2"): summary: must be'),
    (
        {"id": "s3", "source": COMPANY, "summary": 42},
        'row 4 (id "s3"): summary: must be a string or a list of messages, got a number',
    ),
    (
        {"id": "s4", "source": ["x"], "summary": GOOD},
        'row 5 (id "s4"): source: must be a string, got a list',
    ),
    ({"id": "s5", "summary": GOOD}, 'row 6 (id "s5"): source: missing'),
    ({"id": "s6", "source": "  ", "summary": GOOD}, 'row 7 (id "s6"): source: '),
    (
        {"id": {"x": 1}, "source": COMPANY, "summary": GOOD},
        "row 8: id: must be a string or an integer, got an object",
    ),
    ("[1, 2]", "row 9: a row must be a JSON object, got an array"),
]


def test_each_bad_row_becomes_an_error_record_and_the_run_goes_on(tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [r for r, _ in BAD_ROWS] + [{"id": "ok", "source": COMPANY, "summary": GOOD}],
    )
    out = tmp_path / "out"
    errors: list[str] = []
    scorers = [create_summarization_scorer(ScriptedEngine())]
    run = evaluate(data, scorers, out=out, on_error=errors.append).run()
    got = records(out)
    assert len(got) == len(BAD_ROWS) + 1
    for record, (_, message) in zip(got, BAD_ROWS, strict=False):
        assert record["score"] is None
        assert record["error"].startswith(message), record["error"]
    assert errors == [r["error"] for r in got[:-1]]  # each told as it happened
    assert got[-1]["error"] is None and got[-1]["id"] == "ok"
    assert run.progress is not None and (run.progress.scored, run.progress.failed) == (1, 9)


CONTEXT_ROWS = [
    ({"id": "c1", "ground_truth": EINSTEIN}, 'row 1 (id "c1"): context: missing'),
    (
        {"id": "c2", "ground_truth": EINSTEIN, "context": 5},
        'row 2 (id "c2"): context: must be a list of strings or a string, got a number',
    ),
    (
        {"id": "c3", "ground_truth": EINSTEIN, "context": ["a", 2]},
        'row 3 (id "c3"): context: must be a list of strings, got a list holding a number',
    ),
    ({"id": "c4", "ground_truth": EINSTEIN, "context": []}, 'row 4 (id "c4"): context: blank'),
    ({"id": "c5", "ground_truth": EINSTEIN, "context": " "}, 'row 5 (id "c5"): context: blank'),
    (
        {"id": "c6", "ground_truth": 7, "context": PASSAGES},
        'row 6 (id "c6"): ground_truth: must be a string, got int',
    ),
]


def test_context_recall_bad_rows(tmp_path: Path) -> None:
    rows = [r for r, _ in CONTEXT_ROWS] + [
        {"id": "blank-truth", "ground_truth": " ", "context": PASSAGES},
        {"id": "ok", "ground_truth": EINSTEIN, "context": PASSAGES},
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    got = evaluate(data, [row_context_scorer(ScriptedEngine())]).run().records
    for record, (_, message) in zip(got, CONTEXT_ROWS, strict=False):
        assert record["error"].startswith(message), record["error"]
    blank, ok = got[-2], got[-1]
    assert blank["error"] is None and blank["score"] == 0.0 and blank["usage"]["calls"] == 0
    assert ok["score"] == pytest.approx(2 / 3)


def test_repeated_ids_are_counted_named_once_and_still_scored(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [*summary_rows(3), summary_rows(1)[0]])  # r0 again
    b = write_jsonl(
        tmp_path / "b.jsonl",
        [summary_rows(1, start=1)[0], summary_rows(1)[0], {"source": COMPANY, "summary": GOOD}],
    )  # r1 and r0 again (r0 a third time), and a row without an id
    out = tmp_path / "out"
    notices: list[str] = []
    scorers = [create_summarization_scorer(ScriptedEngine())]
    evaluate([a, b], scorers, out=out, on_notice=notices.append).run()
    assert len(successes(out)) == 7  # every row is scored
    told = "\n".join(notices)
    assert told.count('id "r0" repeats') == 1 and told.count('id "r1" repeats') == 1
    assert f'{a} row 4: id "r0" repeats an earlier row\'s id' in told
    assert read_summary(out)["duplicate_ids"] == {
        "count": 3,
        "ids": 2,
        "examples": [
            {"id": "r0", "file": str(a), "row": 4},
            {"id": "r1", "file": str(b), "row": 1},
        ],
    }
    # A resumed run reads every row again: the same count, each id named again once.
    notices.clear()
    evaluate([a, b], scorers, out=out, on_notice=notices.append).run()
    assert "\n".join(notices).count('id "r0" repeats') == 1
    assert read_summary(out)["duplicate_ids"]["count"] == 3


def test_only_the_first_repeated_ids_are_named(tmp_path: Path) -> None:
    rows = summary_rows(IDS_NAMED + 5)
    data = write_jsonl(tmp_path / "d.jsonl", rows + rows)
    out = tmp_path / "out"
    notices: list[str] = []
    scorers = [create_summarization_scorer(ScriptedEngine())]
    evaluate(data, scorers, out=out, on_notice=notices.append).run()
    assert sum("repeats an earlier row's id" in n for n in notices) == IDS_NAMED
    assert "further repeated ids are only counted in summary.json" in notices
    repeated = read_summary(out)["duplicate_ids"]
    assert (repeated["count"], repeated["ids"], len(repeated["examples"])) == (
        IDS_NAMED + 5,
        IDS_NAMED + 5,
        10,
    )
