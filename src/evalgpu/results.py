"""Typed result records: what a scorer returns for one run, and how it is serialised."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from pydantic import AliasChoices, BaseModel, Field

from evalgpu.engines.base import JudgeRequest

__all__ = ["InputError", "ScoreResult", "Steps", "Usage"]

RESULT_VERSION = 1


class InputError(ValueError):
    """A run cannot be scored as given (a blank summary, a context that is not a list, ...).

    Raised inside a scorer's steps; the runner turns it into that row's `error`, and every
    other row is still scored.
    """


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
    """The scorer id: "summarization-scorer" | "context-recall-scorer"."""
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
    usage: Usage = Field(default_factory=Usage)
    version: int = RESULT_VERSION


Steps = Generator[list[JudgeRequest], list[BaseModel], ScoreResult]
"""A row's pipeline: yields the judge requests it needs next, is sent their parsed replies in
the same order, and returns its `ScoreResult`. Scorers write them; the runner drives them."""
