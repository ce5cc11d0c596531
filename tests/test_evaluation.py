"""`evaluate`: the streaming driver from Python, with the command line's rows and folders."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgpu import (
    cli,
    create_context_recall_scorer,
    create_summarization_scorer,
    evaluate,
    run_evals,
)
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.report import format_report
from samples import (
    COMPANY,
    GOOD,
    PASSAGES,
    SOURCE,
    distinct_rows,
    read_summary,
    records,
    write_jsonl,
)

from cli_engines import LimitedEngine, TroubledEngine


def test_a_run_kept_in_memory_does_not_hash_its_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Hashes are for resuming a folder; in memory there is none, so a file is read once."""
    import evalgpu.evaluation

    def refuse(path: Any) -> Any:
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr(evalgpu.evaluation, "inspect_file", refuse)
    data = write_jsonl(tmp_path / "d.jsonl", distinct_rows(2))
    run = evaluate(data, [create_summarization_scorer(ScriptedEngine())]).run()
    assert [r["file"] for r in run.records] == [str(data), str(data)]
    assert run.progress.rows_run == 2 and run.progress.rows_total is None


def test_records_stream_in_row_order_as_chunks_finish(engine: ScriptedEngine) -> None:
    read: list[int] = []

    def source() -> Iterator[dict[str, Any]]:
        for i, row in enumerate(distinct_rows(7)):
            read.append(i)
            yield row

    run = evaluate(source(), [create_summarization_scorer(engine)], chunk_size=3)
    assert read == []  # nothing happens before iterating
    first = next(iter(run))
    assert first["row"] == 1 and first["id"] == "r0" and first["error"] is None
    # Only the first chunk was read to give its first record, and the row after it, which
    # says whether the source changes there (a chunk is cut only where it does).
    assert len(read) == 4
    rest = list(run)
    assert [r["row"] for r in [first, *rest]] == list(range(1, 8))
    # each chunk: one wave for (claims, questions), one for (alignment, question checks), one
    # for coverage
    assert len(engine.calls) == 3 * 3
    assert run.finished and run.summary is not None
    assert run.summary["scorers"]["summarization-scorer"]["scored"] == 7


def test_per_row_source_and_context_and_a_column_map(engine: ScriptedEngine) -> None:
    summarization = create_summarization_scorer(engine, source="Unrelated text about boats.")
    recall = create_context_recall_scorer(engine, context=["Nothing relevant here."])
    data = [
        {
            "doc": SOURCE,
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
            [{"id": "x", "source": SOURCE}, "not a dict", *distinct_rows(1)],
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


def test_a_file_that_cannot_be_read_is_named_and_counted(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(distinct_rows(1)[0]) + "\n")
    broken = tmp_path / "broken.json"
    broken.write_text('{"not": "an array"}')
    scorer = create_summarization_scorer(ScriptedEngine())
    run = evaluate([broken, good], [scorer], out=tmp_path / "out").run()
    assert len(run.file_errors) == 1 and str(broken) in run.file_errors[0]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["file_errors"]["count"] == 1
    assert summary["scorers"]["summarization-scorer"]["scored"] == 1


def test_target_makes_outputs_once_per_row(engine: ScriptedEngine) -> None:
    asked: list[str] = []

    def agent(question: str) -> str:
        asked.append(question)
        return GOOD

    got = (
        evaluate([{"input": SOURCE}], [create_summarization_scorer(engine)], target=agent)
        .run()
        .records
    )
    assert asked == [SOURCE] and got[0]["score"] == 1.0


def cli_run(data: Path, out: Path, *flags: str) -> tuple[int, str]:
    """`python -m evalgpu run DATA --scorer summarization --out OUT FLAGS`: (status, stderr)."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["run", str(data), "--scorer", "summarization", "--out", str(out), *flags])
    return code, err.getvalue()


def successes(out: Path) -> list[int]:
    """The rows of the folder's successful records, each (row, scorer) at most once."""
    lines = (out / "results.jsonl").read_text().splitlines()
    done = [(r["row"], r["scorer"]) for r in map(json.loads, lines) if r["error"] is None]
    assert len(done) == len(set(done)), "a row was scored twice"
    return sorted(row for row, _ in done)


@pytest.mark.parametrize("verdicts", ["hard", "soft"])
def test_a_folder_python_started_is_continued_by_the_command_line(
    tmp_path: Path, verdicts: str
) -> None:
    # Issue 20: the command line refused a folder that `evaluate` started (and the other way).
    from evalgpu import load_engine

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in distinct_rows(6)))
    out = tmp_path / "out"
    engine = load_engine("smollm2-135m-instruct", backend="scripted")
    scorer = create_summarization_scorer(engine, max_questions=2, verdicts=verdicts)
    with evaluate(data, [scorer], out=out, chunk_size=2) as run:
        for i, _ in enumerate(run):
            if i == 2:
                break  # stopped mid-run: two chunks are on disk
    assert successes(out) == [1, 2, 3, 4]
    # Python again: only what is missing is scored, and yielded.
    assert [r["row"] for r in evaluate(data, [scorer], out=out, limit=5)] == [5]
    # The command line takes the same folder as its own and scores only the last row.
    flags = ["--model", "smollm2-135m-instruct", "--max-questions", "2", "--backend", "scripted"]
    code, err = cli_run(data, out, *flags, "--verdicts", verdicts)
    assert code == 0, err
    assert "1 row in" in err and "(5 already done)" in err
    assert successes(out) == [1, 2, 3, 4, 5, 6]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scorers"]["summarization-scorer"]["scored"] == 6


def test_a_folder_the_command_line_started_is_continued_by_python(tmp_path: Path) -> None:
    from evalgpu import load_engine

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in distinct_rows(5)))
    out = tmp_path / "out"
    flags = ["--max-questions", "2", "--backend", "scripted", "--map", "summary=summary"]
    code, err = cli_run(data, out, *flags, "--limit", "3")
    assert code == 0, err
    scorer = create_summarization_scorer(load_engine(backend="scripted"), max_questions=2)
    run = evaluate(data, [scorer], out=out, map={"summary": "summary"})
    assert [r["row"] for r in run] == [4, 5]  # nothing scored twice
    assert successes(out) == [1, 2, 3, 4, 5]
    # And the command line again: nothing left.
    code, err = cli_run(data, out, *flags)
    assert code == 0 and "0 rows in" in err and "(5 already done)" in err
    # Another judge is another configuration, and the message says what differs.
    other = create_summarization_scorer(load_engine(backend="scripted"), max_questions=3)
    with pytest.raises(ValueError, match=r"options: summarization-scorer max_questions: 2 -> 3\)"):
        evaluate(data, [other], out=out, map={"summary": "summary"}).run()


def test_an_out_folder_of_another_configuration_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in distinct_rows(1)))
    evaluate(data, [create_summarization_scorer(ScriptedEngine())], out=tmp_path / "o").run()
    other = create_summarization_scorer(ScriptedEngine(), max_questions=3)
    with pytest.raises(
        ValueError, match=r"output folder .* holds results of another configuration \(options: "
    ):
        evaluate(data, [other], out=tmp_path / "o").run()


def test_scorers_with_different_scales_share_a_folder_and_its_report(tmp_path: Path) -> None:
    from evalgpu.report import write_report

    engine = ScriptedEngine()
    scorers = [
        create_summarization_scorer(engine, scale=10.0),
        create_context_recall_scorer(engine, context=PASSAGES),
    ]
    data = [{"source": SOURCE, "summary": GOOD, "ground_truth": "Einstein was born in 1879."}]
    got = list(evaluate(data, scorers, out=tmp_path / "out"))
    assert [r["score"] for r in got] == [10.0, 1.0]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert {sid: o["scale"] for sid, o in config["options"].items()} == {
        "summarization-scorer": 10.0,
        "context-recall-scorer": 1.0,
    }
    text, page, _ = write_report(tmp_path / "out")
    assert "summarization-scorer" in text and page.exists()


def test_to_pandas(tmp_path: Path, engine: ScriptedEngine) -> None:
    pytest.importorskip("pandas")
    scorer = create_summarization_scorer(engine)
    frame = evaluate(distinct_rows(3), [scorer]).to_pandas()
    assert list(frame["row"]) == [1, 2, 3]
    assert {"score", "reason", "error", "preprocessStepResult"} <= set(frame.columns)
    out = tmp_path / "out"
    evaluate(distinct_rows(2), [scorer], out=out).run()
    whole = evaluate(
        distinct_rows(3), [scorer], out=out
    ).to_pandas()  # the folder's records, all runs
    assert sorted(whole["row"]) == [1, 2, 3]


def test_to_pandas_without_pandas_says_how_to_get_it(
    engine: ScriptedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    run = evaluate(distinct_rows(1), [create_summarization_scorer(engine)])
    with pytest.raises(ImportError, match=r"needs pandas, which evalgpu does not install"):
        run.to_pandas()
    assert engine.calls == []  # nothing was scored for nothing


def test_bad_arguments_fail_before_scoring(engine: ScriptedEngine, tmp_path: Path) -> None:
    scorer = create_summarization_scorer(engine)
    with pytest.raises(ValueError, match="map: unknown field 'answer'"):
        evaluate([], [scorer], map={"answer": "x"})
    with pytest.raises(ValueError, match="scorers must name at least one scorer"):
        evaluate([], [])
    with pytest.raises(ValueError, match="chunk_size must be >= 1, got 0"):
        evaluate([], [scorer], chunk_size=0)
    with pytest.raises(ValueError, match="data file not found"):
        evaluate(tmp_path / "missing.jsonl", [scorer])
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        evaluate([], [scorer], out=tmp_path / "taken")
    assert engine.calls == []


# run_evals (docs/SEMANTICS.md §1.6, the batch API), on the same driver


def test_run_evals_batches_across_items_and_scorers(engine):
    summarization = create_summarization_scorer(engine)
    recall = create_context_recall_scorer(engine, context=["The company is based in Seattle."])
    data = [
        {"input": SOURCE, "output": SOURCE, "ground_truth": "The company is based in Seattle."},
        {"input": SOURCE, "output": "The company is based in Seattle."},
    ]
    seen = []
    out = run_evals(data, [summarization, recall], on_item_complete=seen.append)
    # (claims, questions, claims), then (alignment, question checks, attribution), then coverage
    assert len(engine.calls) == 3
    assert out["summary"] == {"total_items": 2, "failed_items": 0}
    assert out["scores"]["summarization-scorer"] == pytest.approx((1.0 + 0.5) / 2)
    assert out["scores"]["context-recall-scorer"] == pytest.approx((1.0 + 0.0) / 2)
    assert [e["item"] for e in seen] == data
    assert set(seen[0]["scorer_results"]) == {"summarization-scorer", "context-recall-scorer"}


def test_run_evals_uses_target_and_isolates_its_failures(engine):
    def target(question):
        if question == "explode":
            raise ValueError("agent crashed")
        return SOURCE

    out = run_evals(
        [{"input": SOURCE}, {"input": "explode"}, {"input": SOURCE, "groundTruth": "x"}],
        [create_summarization_scorer(engine)],
        target=target,
    )
    items = out["items"]
    assert items[0]["output"] == SOURCE
    assert items[0]["scorer_results"]["summarization-scorer"].score == 1.0
    failed = items[1]["scorer_results"]["summarization-scorer"]
    assert failed.score is None
    assert failed.error == "item 2: target raised ValueError: agent crashed"
    assert out["summary"] == {"total_items": 3, "failed_items": 1}
    assert out["scores"]["summarization-scorer"] == 1.0


def test_run_evals_rejects_items_without_input(engine):
    out = run_evals([{"output": "x"}], [create_summarization_scorer(engine)])
    result = out["items"][0]["scorer_results"]["summarization-scorer"]
    assert result.error == "item 1: an item is a dict with an 'input' key"
    assert out["scores"] == {"summarization-scorer": None}


def test_run_evals_streams_items_in_chunks_with_their_own_context(engine):
    recall = create_context_recall_scorer(engine, context=["Nothing relevant here."])
    items = [
        {"input": "q", "ground_truth": "Einstein was born in 1879.", "context": PASSAGES}
        if i % 2 == 0
        else {"input": "q", "ground_truth": "Einstein was born in 1879."}
        for i in range(300)
    ]
    seen = []
    out = run_evals(items, [recall], on_item_complete=lambda e: seen.append(e["item"]))
    assert seen == items  # each item once, in order
    scores = [e["scorer_results"]["context-recall-scorer"].score for e in out["items"]]
    assert scores[:4] == [1.0, 0.0, 1.0, 0.0]  # an item's own context, else the scorer's
    # Two chunks (256 + 44 items); the second asks only what the first asked, so the engine's
    # reply cache answers it: claims, then attribution, are sent once each.
    assert [len(call) for call in engine.calls] == [1, 2]


@pytest.mark.slow
def test_a_folder_round_trips_between_python_and_the_command_line_on_the_tiny_model(
    tmp_path: Path,
) -> None:
    # Issue 20 as it was met: `load_engine(name)` from Python, `--model name` (backend "auto")
    # on the command line: one judge, one configuration.
    from evalgpu import load_engine
    from evalgpu.models import SMALL_MODEL

    data = tmp_path / "d.jsonl"
    # Blank summaries score 0 without a judge call: the model loads, and names the folder's
    # judge, without minutes of CPU decoding.
    blank = [{"id": f"b{i}", "source": SOURCE, "summary": " "} for i in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in blank))
    out = tmp_path / "out"
    engine = load_engine(SMALL_MODEL)
    scorer = create_summarization_scorer(engine, max_questions=2)
    assert [r["row"] for r in evaluate(data, [scorer], out=out, limit=2)] == [1, 2]
    code, err = cli_run(data, out, "--model", SMALL_MODEL, "--max-questions", "2", "--limit", "3")
    assert code == 0, err
    assert "1 row in" in err and "(2 already done)" in err
    assert [r["row"] for r in evaluate(data, [scorer], out=out)] == [4]
    config = json.loads((out / "config.json").read_text())
    assert (config["backend"], config["model"]) == (engine.name, SMALL_MODEL)


# What a row's record says: a blank summary, a text too long, each kind of failure


def test_a_blank_summary_scores_0_and_counts_in_the_mean(tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "good", "source": COMPANY, "summary": GOOD},
            {"id": "blank", "source": COMPANY, "summary": " \n "},
            {"id": "none", "source": COMPANY, "output": [{"role": "assistant", "content": ""}]},
        ],
    )
    out = tmp_path / "out"
    evaluate(data, [create_summarization_scorer(ScriptedEngine())], out=out).run()
    good, blank, none = records(out)
    for r in (blank, none):
        assert r["error"] is None and r["score"] == 0.0 and r["usage"]["calls"] == 0
        assert r["reason"].startswith("The summary is empty")
    summary = read_summary(out)["scorers"]["summarization-scorer"]
    assert (summary["scored"], summary["failed"]) == (3, 0)
    assert summary["mean"] == pytest.approx(good["score"] / 3)


def test_a_source_longer_than_the_judge_context_is_refused_with_sizes() -> None:
    long_source = "The company sells boats. " * 800  # 20,000 characters: 5,000 "tokens"
    rows = [
        {"id": "long", "source": long_source, "summary": "The company sells boats."},
        {"id": "ok", "source": COMPANY, "summary": GOOD},
    ]
    long, ok = evaluate(rows, [create_summarization_scorer(LimitedEngine())]).run().records
    assert long["error"].startswith(
        'row 1 (id "long"): source: 5,000 tokens, too long for the judge model\'s context of '
        "4,096 tokens (summarization.questions needs "
    )
    assert long["usage"]["calls"] == 0
    assert ok["error"] is None


def test_each_failure_carries_its_kind_and_summary_counts_them(tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "ok", "source": COMPANY, "summary": GOOD},
            {"id": "input", "source": COMPANY},
            {"id": "long", "source": "The company sells boats. " * 800, "summary": GOOD},
            {"id": "invalid", "source": COMPANY + " GARBLE", "summary": GOOD},
            {"id": "engine", "source": COMPANY + " EXPLODE", "summary": GOOD},
            "{not json",
        ],
    )
    out = tmp_path / "out"
    scorers = [create_summarization_scorer(TroubledEngine())]
    evaluate(data, scorers, out=out, chunk_size=1).run()
    kinds = [(r["id"], r["errorKind"]) for r in records(out)]
    assert kinds == [
        ("ok", None),
        ("input", "input"),
        ("long", "too_long"),
        ("invalid", "invalid_reply"),
        ("engine", "engine"),
        (None, "input"),
    ]
    summary = read_summary(out)
    counted = summary["scorers"]["summarization-scorer"]["errors"]
    assert counted == {"input": 2, "too_long": 1, "invalid_reply": 1, "engine": 1}
    text = format_report(summary)  # the table `python -m evalgpu run` prints at its end
    assert (
        "Failed rows, summarization-scorer (2 input, 1 too_long, 1 invalid_reply, 1 engine):"
        in text
    )
    assert '  [too_long] row 3 (id "long"): source: ' in text
