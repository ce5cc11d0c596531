"""`RunSettings`: the command line's flags normalised and checked at construction (a bad flag
is a usage error before a model loads), the judge they name, and the scorers built on it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from evalgpu import Scorer
from evalgpu.calibration import Calibration, CheckCalibration
from evalgpu.engines.base import Engine
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.results import ScoreResult, Steps
from evalgpu.rows import Fields
from evalgpu.settings import RunSettings
from samples import COMPANY, EINSTEIN, GOOD, PASSAGES, summary_rows, write_jsonl

from cli_engines import LimitedEngine

HERE = __name__
"""This module, as a `--scorer module:factory` names it (tests/ is on the path)."""

STRICT = Calibration(
    name="strict",
    checks={"summarization.alignment": CheckCalibration(threshold=0.95, slope=2.0)},
)


def echo_scorer(engine: Engine) -> Scorer:
    """`--scorer <this module>:echo_scorer`: 1 for any row, no judge call."""

    def steps(row: Fields) -> Steps:
        return ScoreResult(scorer="echo-scorer", score=1.0)
        yield  # a generator that asks the judge nothing

    return Scorer("echo-scorer", engine, steps)


def not_a_scorer(engine: Engine) -> Any:
    return "a scorer, honestly"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "d.jsonl", summary_rows(2))


def settings(data: Path, **kw: Any) -> RunSettings:
    kw.setdefault("scorers", ("summarization",))
    kw.setdefault("out", data.parent / "out")
    return RunSettings(data=(data,), **kw)


def refused(data: Path, message: str, **kw: Any) -> None:
    with pytest.raises(ValueError) as caught:
        settings(data, **kw)
    assert str(caught.value) == message


# Normalised, then checked


def test_paths_become_paths_scorers_lose_repeats_and_the_map_is_copied(data: Path) -> None:
    mapping = {"summary": "summary"}
    s = RunSettings(
        data=[str(data), data],  # type: ignore[arg-type]
        scorers=["context-recall", "summarization", "context-recall"],  # type: ignore[arg-type]
        out=str(data.parent / "out"),  # type: ignore[arg-type]
        mapping=mapping,
    )
    assert s.data == (data, data) and all(isinstance(p, Path) for p in s.data)
    assert s.scorers == ("context-recall", "summarization")  # in the order first given
    assert s.out == data.parent / "out" and isinstance(s.out, Path)
    mapping["source"] = "article"
    assert s.mapping == {"summary": "summary"}


def test_the_settings_are_frozen(data: Path) -> None:
    s = settings(data)
    with pytest.raises(AttributeError):
        s.scale = 2.0  # type: ignore[misc]


def test_a_run_needs_a_file_and_a_scorer(data: Path) -> None:
    with pytest.raises(ValueError, match=r"^data must name at least one file$"):
        RunSettings(data=(), scorers=("summarization",), out=data.parent / "out")
    refused(data, "scorers must name at least one scorer", scorers=())


@pytest.mark.parametrize("name", ["rouge", "Summarization", "mypackage.scorers", ""])
def test_a_scorer_that_is_neither_built_in_nor_module_factory_is_named(
    data: Path, name: str
) -> None:
    refused(
        data,
        f"scorer must be summarization, context-recall or module:factory, got {name!r}",
        scorers=("summarization", name),
    )


def test_a_module_factory_scorer_is_not_imported_before_its_scorers_are_built(
    data: Path,
) -> None:
    s = settings(data, scorers=("no_such_package.scorers:build",))
    with pytest.raises(
        ValueError, match=r"^scorer 'no_such_package\.scorers:build': cannot import"
    ):
        s.build_scorers(ScriptedEngine())


def test_the_runs_checks_of_its_files_limit_chunks_and_out_apply_first(data: Path) -> None:
    gone = data.parent / "gone.jsonl"
    with pytest.raises(ValueError, match=f"^data file not found: {re.escape(str(gone))}$"):
        RunSettings(data=(gone,), scorers=("rouge",), out=data.parent / "out")  # before scorers
    refused(data, "limit must be >= 0, got -1", limit=-1)
    refused(data, "chunk_size must be >= 1, got 0", chunk_size=0)
    with pytest.raises(ValueError, match=r"^map: unknown field 'answer'"):
        settings(data, mapping={"answer": "reply"})
    with pytest.raises(ValueError, match=r"^out: .* is a file, not a folder"):
        settings(data, out=data)


def test_a_verdict_mode_or_backend_out_of_range_is_refused_before_a_model_loads(
    data: Path,
) -> None:
    refused(data, "verdicts must be 'hard' or 'soft', got 'medium'", verdicts="medium")
    backends = "auto, vllm, transformers, scripted or module:factory"
    refused(data, f"backend must be {backends}, got 'tpu'", backend="tpu")


@pytest.mark.parametrize(("value", "shown"), [(0, "0"), (-3, "-3"), (True, "True"), (2.5, "2.5")])
def test_max_questions_is_a_count(data: Path, value: Any, shown: str) -> None:
    refused(data, f"max_questions must be >= 1, got {shown}", max_questions=value)


@pytest.mark.parametrize("scale", [0, -1.0, math.nan, math.inf])
def test_scale_is_a_finite_number_above_zero(data: Path, scale: float) -> None:
    refused(data, f"scale must be > 0, got {scale!r}", scale=scale)


@pytest.mark.parametrize("name", ["threads", "batch_size"])
@pytest.mark.parametrize(("value", "shown"), [(0, "0"), (1.5, "1.5"), (False, "False")])
def test_threads_and_batch_size_are_counts(data: Path, name: str, value: Any, shown: str) -> None:
    refused(data, f"{name} must be >= 1, got {shown}", backend="transformers", **{name: value})


def test_compute_is_one_of_the_engines_computes(data: Path) -> None:
    refused(data, "compute must be one of auto, bfloat16, float32, got 'fp8'", compute="fp8")
    for compute in ("auto", "bfloat16", "float32"):
        assert settings(data, compute=compute, backend="transformers").compute == compute


@pytest.mark.parametrize(
    ("options", "backend", "message"),
    [
        (
            {"compute": "float32"},
            "vllm",
            "compute is an option of the transformers engine, not of backend 'vllm'",
        ),
        (
            {"batch_size": 8, "threads": 2},
            "vllm",
            "batch_size is an option of the transformers engine, not of backend 'vllm'",
        ),
        (
            {"threads": 2},
            "scripted",
            "threads is an option of the transformers and vllm engines, not of backend 'scripted'",
        ),
        (
            {"compute": "auto", "batch_size": 2},
            "cli_engines:limited",
            "compute and batch_size are options of the transformers engine, "
            "not of backend 'cli_engines:limited'",
        ),
    ],
)
def test_an_engine_option_given_with_a_backend_that_does_not_take_it_is_refused(
    data: Path, options: dict[str, Any], backend: str, message: str
) -> None:
    refused(data, message, backend=backend, **options)


def test_engine_options_are_those_given_and_auto_takes_them_all(data: Path) -> None:
    assert settings(data, backend="scripted").engine_options() == {}
    assert settings(data, backend="vllm", threads=3).engine_options() == {"threads": 3}
    given = {"compute": "float32", "threads": 1, "batch_size": 4}
    for backend in ("auto", "transformers"):
        assert settings(data, backend=backend, **given).engine_options() == given


def test_a_calibration_file_that_is_not_a_calibration_is_a_usage_error_naming_it(
    data: Path,
) -> None:
    bad = data.parent / "bad.json"
    bad.write_text('{"name": "x"}', encoding="utf-8")
    refused(data, f"calibration {bad}: checks: Field required", calibration=str(bad))
    odd = data.parent / "odd.json"
    odd.write_text('{"name": "x", "checks": {"summarization.alignment": {"threshold": 2}}}')
    with pytest.raises(
        ValueError, match=rf"^calibration {re.escape(str(odd))}: checks\.summarization\.alignment"
    ):
        settings(data, calibration=str(odd))
    gone = data.parent / "gone.json"
    with pytest.raises(ValueError, match=rf"^calibration {re.escape(str(gone))}: cannot be read"):
        settings(data, calibration=str(gone))


def test_a_calibration_file_or_none_is_accepted(data: Path) -> None:
    path = data.parent / "strict.json"
    STRICT.save(path)
    assert settings(data, calibration=str(path)).calibration == str(path)
    assert settings(data, calibration="none").calibration == "none"  # no file is read


# The judge and the scorers


def test_the_scripted_backend_loads_a_judge_without_a_model(data: Path) -> None:
    engine = settings(data, backend="scripted").load_engine()
    assert isinstance(engine, ScriptedEngine)
    assert engine.record is False  # memory stays flat over a long run


def test_an_engine_factory_backend_is_loaded_with_the_model_named(data: Path) -> None:
    engine = settings(data, backend="cli_engines:limited", model="any-model").load_engine()
    assert isinstance(engine, LimitedEngine)


def test_the_scorers_are_built_in_order_on_the_engine_with_their_options(data: Path) -> None:
    engine = ScriptedEngine()
    s = settings(
        data,
        scorers=("context-recall", "summarization", f"{HERE}:echo_scorer"),
        max_questions=3,
        scale=5,
        verdicts="soft",
    )
    recall, summarization, echo = s.build_scorers(engine)
    assert [x.id for x in (recall, summarization, echo)] == [
        "context-recall-scorer",
        "summarization-scorer",
        "echo-scorer",
    ]
    assert recall.engine is summarization.engine is echo.engine is engine
    assert summarization.options == {"max_questions": 3, "scale": 5.0, "verdicts": "soft"}
    assert recall.options == {"scale": 5.0, "verdicts": "soft"}
    summarization.run(input=COMPANY, output=GOOD)
    (questions,) = engine.by_tag("summarization.questions")
    assert "at most 3" in questions.messages[-1]["content"]


def test_the_scale_reaches_the_scores(data: Path) -> None:
    def score(scale: float) -> float | None:
        engine = ScriptedEngine()
        (scorer,) = settings(data, scale=scale, verdicts="hard").build_scorers(engine)
        return scorer.run(input=COMPANY, output=GOOD).score

    one, ten = score(1.0), score(10.0)
    assert one is not None and 0 < one < 1
    assert ten == pytest.approx(10 * one)


def test_context_recall_reads_each_rows_own_context(data: Path) -> None:
    (scorer,) = settings(data, scorers=("context-recall",)).build_scorers(ScriptedEngine())
    with_context, without = scorer.run_batch(
        [
            {"input": "Who?", "output": "x", "ground_truth": EINSTEIN, "context": PASSAGES},
            {"input": "Who?", "output": "x", "ground_truth": EINSTEIN},
        ]
    )
    assert with_context.error is None and with_context.axes is not None
    assert with_context.axes["recall"] == pytest.approx(2 / 3)
    assert without.error_kind == "input" and without.error is not None
    assert "context: missing" in without.error


def test_a_calibration_file_is_applied_by_every_built_in_scorer(data: Path) -> None:
    path = data.parent / "strict.json"
    STRICT.save(path)
    s = settings(data, scorers=("summarization", "context-recall"), calibration=str(path))
    for scorer in s.build_scorers(ScriptedEngine()):
        assert scorer.calibration == STRICT
        assert scorer.options["calibration"] == {"name": "strict", "digest": STRICT.digest()}


def test_calibration_none_turns_off_the_presets_and_unset_takes_it(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "models"
    (models / "presets").mkdir(parents=True)
    (models / "presets" / "judge.toml").write_text(
        'hf_id = "org/judge"\nmax_model_len = 512\ncalibration = "judge.calibration.json"\n'
    )
    STRICT.save(models / "presets" / "judge.calibration.json")
    (models / "judge").mkdir()
    monkeypatch.setenv("EVALGPU_MODELS_DIR", str(models))
    judge = ScriptedEngine()
    judge.model_path = str(models / "judge")  # type: ignore[attr-defined]
    (preset,) = settings(data, verdicts="hard").build_scorers(judge)
    (off,) = settings(data, verdicts="hard", calibration="none").build_scorers(judge)
    assert preset.calibration == STRICT
    assert off.calibration is None and "calibration" not in off.options
    assert preset.run(input="Cats purr.", output="Cats purr.").calibration == "strict"
    assert off.run(input="Cats purr.", output="Cats purr.").calibration is None


def test_a_factory_that_returns_no_scorer_is_a_type_error_naming_it(data: Path) -> None:
    spec = f"{HERE}:not_a_scorer"
    s = settings(data, scorers=("summarization", spec))
    with pytest.raises(TypeError) as caught:
        s.build_scorers(ScriptedEngine())
    assert str(caught.value) == f"scorer {spec!r} returned str, not a Scorer"


def test_a_factory_missing_from_its_module_is_a_value_error_naming_it(data: Path) -> None:
    s = settings(data, scorers=(f"{HERE}:no_such_factory",))
    with pytest.raises(ValueError, match=rf"^scorer '{HERE}:no_such_factory': cannot import"):
        s.build_scorers(ScriptedEngine())


# The run they make


def test_the_settings_run_their_data_map_folder_chunking_and_limit(tmp_path: Path) -> None:
    rows = [{**r, "text": r["summary"]} for r in summary_rows(3)]
    for r in rows:
        del r["summary"]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    made = settings(data, backend="scripted", mapping={"summary": "text"}, chunk_size=2, limit=2)
    run = made.evaluate(made.build_scorers(made.load_engine())).run()
    got = [json.loads(line) for line in (made.out / "results.jsonl").read_text().splitlines()]
    assert [(r["row"], r["error"]) for r in got] == [(1, None), (2, None)]  # the map, the limit
    assert run.progress.rows_run == 2 and run.summary is not None
    assert json.loads((made.out / "summary.json").read_text())["run"]["chunk_size"] == 2
