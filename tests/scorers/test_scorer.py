"""A scorer of your own, written outside the package (here, in this test): `evaluate` and the
command line's `--scorer module:factory` run it beside the built-in ones, and nothing in evalgpu
names it (issue 20, item 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgpu import Scorer, cli, create_summarization_scorer, evaluate, load_engine
from evalgpu.engines.base import Engine
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.rows import Fields

SOURCE = "Cats purr. Dogs bark. Birds sing at dawn."
ROWS = [
    {"id": "short", "source": SOURCE, "summary": "Cats purr."},
    {
        "id": "long",
        "source": SOURCE,
        "summary": "Cats purr and dogs bark while birds sing at dawn.",
    },
    {"id": "none", "source": SOURCE},
    {"id": "odd", "source": SOURCE, "summary": 42},
]
LENGTH_ERRORS = {
    "none": "row 3 (id \"none\"): summary: missing (no 'summary' column or a null value)",
    "odd": 'row 4 (id "odd"): summary: the length scorer reads a string, got int',
}


def length_scorer(engine: Engine) -> Scorer:
    """`--scorer <module>:length_scorer`: the summary's words / 10, at most 1; no judge call."""

    def steps(row: Fields) -> Steps:
        summary = row.get("summary", "output")
        if summary is None:
            raise row.missing("summary")
        if not isinstance(summary, str):
            raise InputError(
                f"summary: the length scorer reads a string, got {type(summary).__name__}"
            )
        words = len(summary.split())
        return ScoreResult(
            scorer="length-scorer", score=min(words / 10, 1.0), reason=f"{words} words"
        )
        yield  # a generator of steps that asks the judge nothing

    return Scorer("length-scorer", engine, steps, options={"words_for_1": 10})


def not_a_scorer(engine: Engine) -> Any:
    return 42


def by_row(records: list[dict[str, Any]], scorer: str) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in records if r["scorer"] == scorer}


def check_length_records(records: list[dict[str, Any]]) -> None:
    length = by_row(records, "length-scorer")
    assert length["short"]["score"] == pytest.approx(0.2)
    assert length["long"]["score"] == 1.0 and length["long"]["reason"] == "10 words"
    assert {i: length[i]["error"] for i in LENGTH_ERRORS} == LENGTH_ERRORS
    assert all(r["usage"]["calls"] == 0 for r in length.values())
    summarization = by_row(records, "summarization-scorer")
    assert summarization["short"]["score"] is not None and summarization["none"]["error"]


def test_your_own_scorer_runs_through_evaluate_beside_a_built_in_one(tmp_path: Path) -> None:
    engine = load_engine(backend="scripted")
    scorers = [create_summarization_scorer(engine, max_questions=2), length_scorer(engine)]
    check_length_records(list(evaluate(ROWS, scorers)))
    # And into an output folder: its configuration records the scorer's id and options.
    out = tmp_path / "out"
    check_length_records(list(evaluate(ROWS, scorers, out=out)))
    config = json.loads((out / "config.json").read_text())
    assert config["scorer_ids"] == ["summarization-scorer", "length-scorer"]
    assert config["options"]["length-scorer"] == {"words_for_1": 10}
    summary = json.loads((out / "summary.json").read_text())["scorers"]["length-scorer"]
    assert (summary["scored"], summary["failed"]) == (2, 2)


def test_your_own_scorer_runs_from_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "out"
    argv = ["run", str(data), "--scorer", "summarization", "--scorer", f"{__name__}:length_scorer"]
    flags = ["--out", str(out), "--max-questions", "2", "--backend", "scripted"]
    assert cli.main([*argv, *flags]) == 0, capsys.readouterr().err
    stdout, err = capsys.readouterr()
    assert "length-scorer" in stdout and LENGTH_ERRORS["odd"] in err
    lines = (out / "results.jsonl").read_text().splitlines()
    check_length_records([json.loads(line) for line in lines])
    # Python continues the folder the command line started: nothing is scored twice.
    engine = load_engine(backend="scripted")
    scorers = [create_summarization_scorer(engine, max_questions=2), length_scorer(engine)]
    again = list(evaluate(data, scorers, out=out))
    assert {(r["id"], r["scorer"]) for r in again} == {
        (i, s) for i in ("none", "odd") for s in ("summarization-scorer", "length-scorer")
    }  # only the failures are tried again


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module:factory", "scorer 'no_such_module:factory': cannot import 'factory'"),
        (f"{__name__}:missing", f"scorer '{__name__}:missing': cannot import 'missing'"),
        (
            f"{__name__}:not_a_scorer",
            f"scorer '{__name__}:not_a_scorer' returned int, not a Scorer",
        ),
    ],
)
def test_a_scorer_factory_that_fails_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: str, message: str
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n")
    argv = [
        "run",
        str(data),
        "--scorer",
        spec,
        "--out",
        str(tmp_path / "o"),
        "--backend",
        "scripted",
    ]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
