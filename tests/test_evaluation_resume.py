"""`evaluate` into an output folder: resumably (scored here, or chunk by chunk by an executor,
as on Ray); a folder of another configuration is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgpu import create_summarization_scorer, evaluate
from evalgpu.driver import Driver
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.evaluation import Evaluation
from evalgpu.rows import Row
from evalgpu.scorers.context_recall import row_context_scorer
from evalgpu.storage import ConfigError
from samples import (
    COMPANY,
    distinct_rows,
    read_summary,
    records,
    successes,
    summary_rows,
    write_jsonl,
)

from cli_engines import BrokenEngine, FlakyEngine


def summarization(**options: Any) -> list[Any]:
    """The scorers of `python -m evalgpu run --scorer summarization --backend scripted`."""
    return [create_summarization_scorer(ScriptedEngine(), **options)]


def test_an_executor_scores_chunks_elsewhere_and_the_run_appends_and_counts_them(
    tmp_path: Path,
) -> None:
    """As `run --ray` does: the chunks go to an executor, its records come back in any order;
    a failure is told, and records of a chunk scored twice (a retry) are not written twice."""
    scorers = [create_summarization_scorer(ScriptedEngine())]
    data = write_jsonl(tmp_path / "d.jsonl", distinct_rows(3))
    errors: list[str] = []

    def elsewhere(run: Evaluation, chunks: Iterator[list[Row]]) -> Iterator[tuple[int, list[Any]]]:
        driver = Driver(scorers, files=run.files)
        scored = [(c, driver.score_chunk(c)) for c in chunks]
        assert [len(c) for c, _ in scored] == [1, 1, 1]
        (first, a), (_, b), (third, c) = scored
        yield len(third), [{**c[0], "score": None, "error": "row 3: boom"}]
        yield len(first), a
        yield 0, a  # the same records again: nothing new
        yield 1, b

    out = tmp_path / "out"
    run = evaluate(data, scorers, out=out, chunk_size=1, executor=elsewhere, on_error=errors.append)
    assert [r["row"] for r in run] == [3, 1, 2] and errors == ["row 3: boom"]
    assert run.progress is not None and (run.progress.rows_run, run.progress.failed) == (3, 1)
    summary = read_summary(out)
    assert (summary["scorers"]["summarization-scorer"]["scored"], summary["run"]["rows"]) == (2, 3)
    assert sorted(k[1] for k in successes(out)) == [1, 2] and len(records(out)) == 3


# Resume


def test_resume_scores_only_what_is_missing(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(10))
    out = tmp_path / "out"
    evaluate(data, summarization(), out=out, chunk_size=3, limit=4).run()
    assert len(records(out)) == 4
    run = evaluate(data, summarization(), out=out, chunk_size=3).run()
    assert run.progress is not None
    assert (run.progress.rows_run, run.progress.resumed) == (6, 4)
    assert len(records(out)) == 10
    assert sorted(k[1] for k in successes(out)) == list(range(1, 11))
    run = evaluate(data, summarization(), out=out, chunk_size=3).run()
    assert run.progress is not None and run.progress.rows_run == 0 and len(records(out)) == 10


def test_a_broken_engine_fails_rows_not_the_run_and_a_later_run_retries_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(3))
    out = tmp_path / "out"
    scorers = [create_summarization_scorer(FlakyEngine())]
    monkeypatch.setenv("EVALGPU_TEST_BROKEN", "1")
    run = evaluate(data, scorers, out=out).run()
    assert run.summary is not None
    assert run.summary["scorers"]["summarization-scorer"]["scored"] == 0
    got = records(out)
    assert len(got) == 3
    assert all(
        "engine 'scripted' failed: RuntimeError: the device fell over" in r["error"] for r in got
    )
    # A later run with a working judge retries the failures: each row ends scored once.
    monkeypatch.delenv("EVALGPU_TEST_BROKEN")
    evaluate(data, scorers, out=out).run()
    assert len(successes(out)) == 3
    summary = read_summary(out)
    assert summary["scorers"]["summarization-scorer"]["scored"] == 3
    assert summary["scorers"]["summarization-scorer"]["failed"] == 0


# A folder of another configuration


def test_an_engine_that_breaks_its_contract_fails_its_rows_not_the_run(tmp_path: Path) -> None:
    """Too few replies (a bug of the engine, not a score): the rows it was judging fail with
    an engine error, the other chunks are scored, and a rerun retries them (as on Ray)."""
    rows = [
        {
            "id": str(i),
            "source": f"Shop {i} opened." + (" BOOM." if i == 1 else ""),
            "summary": "x.",
        }
        for i in range(3)
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "out"
    run = evaluate(data, [create_summarization_scorer(BrokenEngine())], out=out, chunk_size=1)
    run.run()
    failed = {r["row"]: r for r in records(out) if r["error"]}
    assert list(failed) == [2] and failed[2]["errorKind"] == "engine"
    assert failed[2]["error"].startswith('row 2 (id "1"): RuntimeError: engine ')
    assert "returned 0 replies" in failed[2]["error"]
    assert run.progress is not None and (run.progress.scored, run.progress.failed) == (2, 1)


def test_a_config_change_is_refused(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(2))
    out = tmp_path / "out"
    evaluate(data, summarization(), out=out).run()
    with pytest.raises(ConfigError) as refused:
        evaluate(data, summarization(scale=2.0), out=out).run()
    message = str(refused.value)
    assert f"output folder {out} holds results of another configuration (options: " in message
    assert "use a new output folder, or delete" in message
    both = [*summarization(), row_context_scorer(ScriptedEngine())]
    with pytest.raises(ConfigError, match="scorer_ids: "):
        evaluate(data, both, out=out).run()
    write_jsonl(data, summary_rows(3))
    with pytest.raises(ConfigError, match=r"data file 1 \(.*has other content"):
        evaluate(data, summarization(), out=out).run()
    # What does not change scores is not configuration.
    write_jsonl(data, summary_rows(2))
    evaluate(data, summarization(), out=out, chunk_size=1, limit=1).run()
    assert len(records(out)) == 2


def _two_of_three_rows_as_written_before(
    tmp_path: Path, **earlier: Any
) -> tuple[Path, Path, dict[str, Any]]:
    """A folder with 2 of 3 rows scored, its config.json rewritten with `earlier`'s keys (and
    another hash); the data file, the folder and the config as it was written."""
    data, out = write_jsonl(tmp_path / "d.jsonl", summary_rows(3)), tmp_path / "out"
    evaluate(data, summarization(), out=out, limit=2).run()
    now = json.loads((out / "config.json").read_text())
    changed = {**now, **earlier, "hash": "0123456789abcdef"}
    (out / "config.json").write_text(json.dumps(changed))
    return data, out, now


def test_a_folder_of_the_earlier_configuration_shape_is_resumed_or_refused(
    tmp_path: Path,
) -> None:
    # As version 1 wrote it: the judge as asked for ("auto", no model), shared options.
    data, out, now = _two_of_three_rows_as_written_before(
        tmp_path,
        version=1,
        scorers=["summarization"],
        backend="auto",
        options={"max_questions": 10, "scale": 1.0},
    )
    with pytest.raises(
        ConfigError, match=r"\(options: summarization-scorer max_questions: 10 -> 3\)"
    ):
        evaluate(data, summarization(max_questions=3), out=out).run()
    run = evaluate(data, summarization(), out=out).run()
    assert run.progress is not None
    assert (run.progress.rows_run, run.progress.resumed) == (1, 2)
    assert json.loads((out / "config.json").read_text())["hash"] == now["hash"]
    assert len(successes(out)) == 3


def test_a_folder_of_the_earlier_judge_pipeline_is_refused_not_mixed(tmp_path: Path) -> None:
    data, out, _ = _two_of_three_rows_as_written_before(tmp_path, result_version=1)
    with pytest.raises(
        ConfigError, match="results of judge pipeline version 1, this one scores version 2"
    ):
        evaluate(data, summarization(), out=out).run()
    assert len(records(out)) == 2  # nothing appended


# Several files


def test_several_files_are_named_in_records_and_labels(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", summary_rows(2))
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": "bad", "source": COMPANY}, *summary_rows(1)])
    out = tmp_path / "out"
    evaluate([a, b], summarization(), out=out).run()
    got = records(out)
    assert [(Path(r["file"]).name, r["row"]) for r in got] == [
        ("a.jsonl", 1),
        ("a.jsonl", 2),
        ("b.jsonl", 1),
        ("b.jsonl", 2),
    ]
    assert got[2]["error"].startswith(f'{b} row 1 (id "bad"): summary: missing')
    run = evaluate([a, b], summarization(), out=out).run()
    assert run.progress is not None and run.progress.rows_run == 1
    assert len(successes(out)) == 3


def test_several_files_resume_whatever_their_paths_are_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jsonl(tmp_path / "a.jsonl", summary_rows(2))
    write_jsonl(tmp_path / "b.jsonl", summary_rows(2))
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    evaluate(["a.jsonl", "b.jsonl"], summarization(), out=out, limit=3).run()
    run = evaluate([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], summarization(), out=out).run()
    assert run.progress is not None
    assert (run.progress.rows_run, run.progress.resumed) == (1, 3)
    assert {r["file"] for r in records(out)} == {"a.jsonl", "b.jsonl"}  # the folder's names


def test_by_default_the_first_chunk_is_one_row_and_later_ones_fit_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks sized by time: a judge at 20 s a row writes its first record after one row, then
    three rows a chunk (a minute); every row is written once, in order."""
    import evalgpu.evaluation

    clock = [0.0]
    monkeypatch.setattr(evalgpu.evaluation.time, "monotonic", lambda: clock[0])
    scorers = summarization()
    data = write_jsonl(tmp_path / "d.jsonl", distinct_rows(10))
    sizes: list[int] = []

    def slow(run: Evaluation, chunks: Iterator[list[Row]]) -> Iterator[tuple[int, list[Any]]]:
        driver = Driver(scorers, files=run.files)
        for chunk in chunks:
            sizes.append(len(chunk))
            clock[0] += 20.0 * len(chunk)
            yield len(chunk), driver.score_chunk(chunk)

    out = tmp_path / "out"
    run = evaluate(data, scorers, out=out, executor=slow)
    first = next(iter(run))
    assert (first["row"], sizes) == (1, [1])  # on disk after one row's work
    assert len(records(out)) == 1
    assert [r["row"] for r in run] == list(range(2, 11))
    assert sizes == [1, 3, 3, 3]
    assert read_summary(out)["run"]["chunk_seconds"] == 60.0
