"""`evaluate`: the streaming driver from Python, with the command line's rows and folders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgpu import (
    cli,
    create_context_recall_scorer,
    create_summarization_scorer,
    evaluate,
)
from evalgpu.engines.scripted import ScriptedEngine

COMPANY = "The company was founded in 1995 by John Smith. The company is based in Seattle."
GOOD = "John Smith founded the company in 1995. The company is based in Seattle."
PASSAGES = ["Einstein was born in 1879.", "Einstein developed relativity."]


def rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"r{i}",
            "source": f"Shop {i} opened in 1990. It sells tea.",
            "summary": f"Shop {i} opened in 1990.",
        }
        for i in range(n)
    ]


def test_records_stream_in_row_order_as_chunks_finish(engine: ScriptedEngine) -> None:
    read: list[int] = []

    def source() -> Iterator[dict[str, Any]]:
        for i, row in enumerate(rows(7)):
            read.append(i)
            yield row

    run = evaluate(source(), [create_summarization_scorer(engine)], chunk_size=3)
    assert read == []  # nothing happens before iterating
    first = next(iter(run))
    assert first["row"] == 1 and first["id"] == "r0" and first["error"] is None
    assert len(read) == 3  # only the first chunk was read to give its first record
    rest = list(run)
    assert [r["row"] for r in [first, *rest]] == list(range(1, 8))
    assert (
        len(engine.calls) == 3 * 2
    )  # each chunk: one wave for (alignment, questions), one for coverage
    assert run.finished and run.summary is not None
    assert run.summary["scorers"]["summarization-scorer"]["scored"] == 7


def test_per_row_source_and_context_and_a_column_map(engine: ScriptedEngine) -> None:
    summarization = create_summarization_scorer(engine, source="Unrelated text about boats.")
    recall = create_context_recall_scorer(engine, context=["Nothing relevant here."])
    data = [
        {
            "doc": COMPANY,
            "model_output": GOOD,
            "reference": "Einstein was born in 1879.",
            "passages": PASSAGES,
        },
        {"model_output": "Boats float.", "reference": "Einstein was born in 1879."},
    ]
    got = (
        evaluate(
            data,
            [summarization, recall],
            map={
                "source": "doc",
                "summary": "model_output",
                "ground_truth": "reference",
                "context": "passages",
            },
        )
        .run()
        .records
    )
    by = {(r["row"], r["scorer"]): r for r in got}
    assert by[(1, "summarization-scorer")]["score"] == 1.0  # the row's own source
    assert by[(1, "context-recall-scorer")]["score"] == 1.0  # the row's own context
    assert by[(2, "summarization-scorer")]["axes"]["alignment"] == 0.0  # the scorer's source
    assert by[(2, "context-recall-scorer")]["score"] == 0.0  # the scorer's context


def test_a_bad_row_is_its_own_error_record(engine: ScriptedEngine) -> None:
    got = (
        evaluate(
            [{"id": "x", "source": COMPANY}, "not a dict", *rows(1)],
            [create_summarization_scorer(engine)],
        )
        .run()
        .records
    )
    assert (
        got[0]["error"]
        == "row 1 (id \"x\"): summary: missing (no 'summary' column or a null value)"
    )
    assert got[1]["error"] == "row 2: a row must be a dict, got a string"
    assert got[2]["error"] is None
    assert [r["errorKind"] for r in got] == ["input", "input", None]


def test_target_makes_outputs_once_per_row(engine: ScriptedEngine) -> None:
    asked: list[str] = []

    def agent(question: str) -> str:
        asked.append(question)
        return GOOD

    got = (
        evaluate([{"input": COMPANY}], [create_summarization_scorer(engine)], target=agent)
        .run()
        .records
    )
    assert asked == [COMPANY] and got[0]["score"] == 1.0


def test_resume_from_python_then_the_command_line_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows(6)))
    out = tmp_path / "out"
    scorer = create_summarization_scorer(ScriptedEngine())
    with evaluate(data, [scorer], out=out, chunk_size=2) as run:
        for i, _ in enumerate(run):
            if i == 2:
                break  # stopped mid-run: two chunks are on disk
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["row"] for x in lines] == [1, 2, 3, 4]
    # Python again: only what is missing is scored, and yielded.
    again = list(evaluate(data, [scorer], out=out, chunk_size=10))
    assert [r["row"] for r in again] == [5, 6]
    # The command line takes the same folder as its own: nothing left to score.
    code = cli.main(
        ["run", str(data), "--scorer", "summarization", "--out", str(out), "--backend", "scripted"]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "0 rows in" in err and "(6 already done)" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scorers"]["summarization-scorer"]["scored"] == 6


def test_an_out_folder_of_another_configuration_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows(1)))
    evaluate(data, [create_summarization_scorer(ScriptedEngine())], out=tmp_path / "o").run()
    other = create_summarization_scorer(ScriptedEngine(), max_questions=3)
    with pytest.raises(
        ValueError, match=r"out .* holds results of another configuration \(options: "
    ):
        evaluate(data, [other], out=tmp_path / "o").run()


def test_to_pandas(tmp_path: Path, engine: ScriptedEngine) -> None:
    pytest.importorskip("pandas")
    scorer = create_summarization_scorer(engine)
    frame = evaluate(rows(3), [scorer]).to_pandas()
    assert list(frame["row"]) == [1, 2, 3]
    assert {"score", "reason", "error", "preprocessStepResult"} <= set(frame.columns)
    out = tmp_path / "out"
    evaluate(rows(2), [scorer], out=out).run()
    whole = evaluate(rows(3), [scorer], out=out).to_pandas()  # the folder's records, all runs
    assert sorted(whole["row"]) == [1, 2, 3]


def test_bad_arguments_fail_before_scoring(engine: ScriptedEngine, tmp_path: Path) -> None:
    scorer = create_summarization_scorer(engine)
    with pytest.raises(ValueError, match="map: unknown field 'answer'"):
        evaluate([], [scorer], map={"answer": "x"})
    with pytest.raises(ValueError, match="chunk_size must be >= 1, got 0"):
        evaluate([], [scorer], chunk_size=0)
    with pytest.raises(ValueError, match="data file not found"):
        evaluate(tmp_path / "missing.jsonl", [scorer])
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        evaluate([], [scorer], out=tmp_path / "taken")
    assert engine.calls == []


@pytest.mark.slow
def test_a_folder_from_python_on_the_default_model_has_the_command_lines_configuration(
    tmp_path: Path,
) -> None:
    from evalgpu import load_engine
    from evalgpu.data import inspect_file
    from evalgpu.models import DEFAULT_MODEL
    from evalgpu.settings import RunSettings

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "no-summary", "source": COMPANY}) + "\n")  # no judge call
    engine = load_engine(DEFAULT_MODEL, backend="transformers")
    evaluate(data, [create_summarization_scorer(engine)], out=tmp_path / "out").run()
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    settings = RunSettings(
        data=(data,),
        scorers=("summarization",),
        out=tmp_path / "out",
        model=DEFAULT_MODEL,
        backend="transformers",
    )
    assert written["hash"] == settings.config([inspect_file(data)])["hash"]
