"""Result records: `ScoreResult`'s error and kind, its reference names, `Usage` and the
`results.jsonl` record `make_record` writes."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from evalgpu.results import (
    ERROR_KINDS,
    RESULT_VERSION,
    InputError,
    ScoreResult,
    TooLongError,
    Usage,
    make_record,
)

RECORD_KEYS = [
    "score",
    "reason",
    "axes",
    "preprocessStepResult",
    "analyzeStepResult",
    "usage",
    "error",
    "errorKind",
    "calibration",
    "version",
]


def scored() -> ScoreResult:
    return ScoreResult(
        scorer="summarization-scorer",
        score=0.75,
        reason="Three of four claims are supported.",
        preprocess_step_result={"alignment": [{"claim": "A.", "supported": True}]},
        analyze_step_result={"coverage": [{"question": "Is it A?", "answered": False}]},
        axes={"alignment": 0.75, "coverage": 1.0},
        usage=Usage(prompt_tokens=120, output_tokens=9, cached_tokens=80, calls=3),
        calibration="strict",
    )


def test_a_result_without_an_error_has_no_kind_and_the_current_version() -> None:
    result = ScoreResult(scorer="s", score=1.0)
    assert result.error is None and result.error_kind is None
    assert result.version == RESULT_VERSION
    assert result.usage == Usage(prompt_tokens=0, output_tokens=0, cached_tokens=0, calls=0)


def test_an_error_given_without_a_kind_is_an_input_error() -> None:
    result = ScoreResult(scorer="s", error="row 3: summary: missing")
    assert result.error_kind == "input"
    assert result.score is None  # a failed run is never scored 0


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_an_error_keeps_the_kind_it_is_given(kind: str) -> None:
    assert ScoreResult(scorer="s", error="it failed", error_kind=kind).error_kind == kind


def test_a_kind_without_an_error_is_refused_naming_the_kind() -> None:
    with pytest.raises(ValidationError, match="error_kind 'engine' without an error"):
        ScoreResult(scorer="s", score=0.5, error_kind="engine")
    with pytest.raises(ValidationError, match="error_kind 'too_long' without an error"):
        ScoreResult.model_validate({"scorer": "s", "errorKind": "too_long"})


def test_a_kind_that_is_not_an_error_kind_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        ScoreResult(scorer="s", error="it failed", error_kind="timeout")
    assert caught.value.errors()[0]["loc"] == ("error_kind",)


def test_the_input_errors_carry_the_kind_their_results_get() -> None:
    assert issubclass(TooLongError, InputError) and issubclass(InputError, ValueError)
    assert InputError("x").kind == "input"
    assert TooLongError("x").kind == "too_long"
    assert {InputError.kind, TooLongError.kind} <= set(ERROR_KINDS)


def test_model_dump_by_alias_gives_the_reference_names() -> None:
    failed = ScoreResult(scorer="s", error="cut", error_kind="invalid_reply")
    dumped = scored().model_dump(by_alias=True)
    assert dumped["preprocessStepResult"] == {"alignment": [{"claim": "A.", "supported": True}]}
    assert dumped["analyzeStepResult"] == {
        "coverage": [{"question": "Is it A?", "answered": False}]
    }
    assert failed.model_dump(by_alias=True)["errorKind"] == "invalid_reply"
    for name in ("preprocess_step_result", "analyze_step_result", "error_kind"):
        assert name not in dumped
    # Without aliases, the Python names.
    assert {"preprocess_step_result", "analyze_step_result", "error_kind"} <= set(
        scored().model_dump()
    )


def test_a_result_reads_back_from_either_name() -> None:
    original = scored()
    assert ScoreResult.model_validate(original.model_dump(by_alias=True)) == original
    assert ScoreResult.model_validate(original.model_dump()) == original
    failed = ScoreResult.model_validate({"scorer": "s", "error": "long", "errorKind": "too_long"})
    assert failed.error_kind == "too_long"


def test_usage_adds_one_call_unless_told_how_many() -> None:
    usage = Usage()
    usage.add(100, 7, 40)
    usage.add(50, 3, 0, calls=2)
    usage.add(0, 0, 0, calls=0)  # a shared request: its tokens counted on another row
    assert usage == Usage(prompt_tokens=150, output_tokens=10, cached_tokens=40, calls=3)


def test_every_result_has_a_usage_of_its_own() -> None:
    first, second = ScoreResult(scorer="s"), ScoreResult(scorer="s")
    first.usage.add(10, 1, 0)
    assert second.usage.calls == 0 and second.usage.prompt_tokens == 0


def test_a_record_is_where_it_comes_from_then_the_result_with_reference_names() -> None:
    base = {"file": "d.jsonl", "row": 4, "id": "r3", "scorer": "summarization-scorer"}
    record = make_record(base, scored())
    assert list(record) == [*base, *RECORD_KEYS]
    assert record["file"] == "d.jsonl" and record["row"] == 4 and record["id"] == "r3"
    assert record["score"] == 0.75 and record["axes"] == {"alignment": 0.75, "coverage": 1.0}
    assert record["preprocessStepResult"] == scored().preprocess_step_result
    assert record["analyzeStepResult"] == scored().analyze_step_result
    assert record["usage"] == {
        "prompt_tokens": 120,
        "output_tokens": 9,
        "cached_tokens": 80,
        "calls": 3,
    }
    assert record["calibration"] == "strict" and record["version"] == RESULT_VERSION
    assert (record["error"], record["errorKind"]) == (None, None)
    assert json.loads(json.dumps(record)) == record  # one results.jsonl line as it is


def test_a_failed_results_record_has_no_score_and_its_error_kind() -> None:
    record = make_record({"row": 1}, ScoreResult(scorer="s", error="context: missing"))
    assert record["score"] is None
    assert (record["error"], record["errorKind"]) == ("context: missing", "input")


def test_a_records_usage_is_a_copy_of_the_results() -> None:
    result = scored()
    record = make_record({}, result)
    record["usage"]["calls"] = 99
    assert result.usage.calls == 3
