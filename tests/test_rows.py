"""`evalgpu.rows.Fields`: a row's fields as a scorer reads them, through the column map."""

from __future__ import annotations

from evalgpu import create_context_recall_scorer, create_summarization_scorer
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.rows import Fields


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
