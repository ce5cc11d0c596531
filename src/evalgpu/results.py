"""Typed result records: what a scorer returns for one run, and how it is serialised."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, ClassVar, get_args

from pydantic import AliasChoices, BaseModel, Field, model_validator

from evalgpu.engines.base import ErrorKind, JudgeRequest

__all__ = [
    "ERROR_KINDS",
    "ErrorKind",
    "InputError",
    "Record",
    "ScoreResult",
    "Steps",
    "TooLongError",
    "Usage",
    "make_record",
]

RESULT_VERSION = 2
"""What a record's scores mean. 2: the judge lists a summary's claims from the summary alone and
checks each claim and question in a call of its own (`evalgpu.scorers._checks`); 1: claims and
verdicts in one call that saw both texts. A folder of another version is refused, never mixed."""

ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)
"""Every `ErrorKind`: "input", "too_long", "invalid_reply", "engine" (the order reports use)."""


class InputError(ValueError):
    """A run cannot be scored as given (a missing summary, a context that is not a list, ...).

    Raised inside a scorer's steps; the runner turns it into that row's `error`, with
    `error_kind` set to the class's `kind`, and every other row is still scored.
    """

    kind: ClassVar[ErrorKind] = "input"
    """The `error_kind` of the result this error becomes."""


class TooLongError(InputError):
    """A text of the row is too long for the judge model's context (checked before sending)."""

    kind: ClassVar[ErrorKind] = "too_long"


class Usage(BaseModel):
    """Judge tokens spent on one result.

    A request shared by several rows (questions of a repeated source) is counted once, on the
    first row that asked for it, so that usage summed over rows equals what the engine did.
    """

    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens served from the engine's prefix cache."""
    calls: int = 0
    """Judge calls this row sent to the engine (retries included, shared calls once)."""

    def add(self, prompt: int, output: int, cached: int, calls: int = 1) -> None:
        self.prompt_tokens += prompt
        self.output_tokens += output
        self.cached_tokens += cached
        self.calls += calls


class ScoreResult(BaseModel):
    """One scorer's result for one run.

    `model_dump(by_alias=True)` gives the reference names (`preprocessStepResult`,
    `analyzeStepResult`). A failed run has `score=None` and `error` set; it is never scored 0.
    """

    scorer: str
    """The scorer's id: "summarization-scorer", "context-recall-scorer", or your own's."""
    score: float | None = None
    """Between 0 and the scorer's scale; None when `error` is set."""
    reason: str | None = None
    preprocess_step_result: dict[str, Any] | None = Field(
        default=None,
        serialization_alias="preprocessStepResult",
        validation_alias=AliasChoices("preprocess_step_result", "preprocessStepResult"),
    )
    """Summarization: `{"alignment": [...], "questions": [...]}`; context recall: `{"claims"}`."""
    analyze_step_result: dict[str, Any] | None = Field(
        default=None,
        serialization_alias="analyzeStepResult",
        validation_alias=AliasChoices("analyze_step_result", "analyzeStepResult"),
    )
    """Summarization: `{"coverage": [...]}`; context recall: `{"verdicts": [...]}`."""
    axes: dict[str, float] | None = None
    """Axis scores in [0, 1]. Summarization: `alignment`, `coverage`, and their soft twins
    `alignment_soft`, `coverage_soft` (mean `p` of the verdicts); context recall: `recall` and
    `recall_soft`. A soft axis is absent when the engine gave no `p`."""
    error: str | None = None
    error_kind: ErrorKind | None = Field(
        default=None,
        serialization_alias="errorKind",
        validation_alias=AliasChoices("error_kind", "errorKind"),
    )
    """Why `error` is set: "input" | "too_long" | "invalid_reply" | "engine" (see
    `ErrorKind`); None when there is no error. An error given without a kind is "input"."""
    usage: Usage = Field(default_factory=Usage)
    calibration: str | None = None
    """The name of the calibration its verdicts went through (`evalgpu.calibration`); None:
    the judge's own p and verdicts."""
    version: int = RESULT_VERSION

    @model_validator(mode="after")
    def _kind_goes_with_error(self) -> ScoreResult:
        if self.error is None and self.error_kind is not None:
            raise ValueError(f"error_kind {self.error_kind!r} without an error")
        if self.error is not None and self.error_kind is None:
            self.error_kind = "input"  # the row could not be scored as given
        return self


Steps = Generator[list[JudgeRequest], list[BaseModel], ScoreResult]
"""A row's pipeline: yields the judge requests it needs next, is sent their parsed replies in
the same order, and returns its `ScoreResult`. Scorers write them; the runner drives them."""


Record = dict[str, Any]
"""One `results.jsonl` line: where it comes from (`file`, `row`, `id`, `scorer`), then the
result with the reference names (`make_record`). Every entry point writes and yields these."""


def make_record(base: dict[str, Any], result: ScoreResult) -> Record:
    """One `results.jsonl` record: where it comes from, then the result with reference names."""
    return {
        **base,
        "score": result.score,
        "reason": result.reason,
        "axes": result.axes,
        "preprocessStepResult": result.preprocess_step_result,
        "analyzeStepResult": result.analyze_step_result,
        "usage": result.usage.model_dump(),
        "error": result.error,
        "errorKind": result.error_kind,
        "calibration": result.calibration,
        "version": result.version,
    }
