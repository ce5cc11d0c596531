"""Verdict schemas: one bounded pydantic model per judge step.

The same class is the constrained-decoding schema and the parser of the reply. Field names are
a contract (docs/SEMANTICS.md §1). Each list has `maxItems` and each string a `maxLength`, so that a
reply that follows the schema always fits its `max_tokens` (docs/SEMANTICS.md §3): a small judge
model left unbounded rambles in free-text fields until it is cut.

Inside a verdict, `reason` comes before the boolean on purpose: the judge writes its evidence
first and decides after, instead of justifying a coin it has already tossed. JSON objects are
unordered, so readers of the result see the contract's fields either way.

Bounds and budgets were chosen from measurements on the default model (docs/SCHEMAS.md).
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = [
    "Alignment",
    "Attribution",
    "AttributionVerdict",
    "ClaimVerdict",
    "Claims",
    "Coverage",
    "CoverageVerdict",
    "Questions",
    "Reason",
    "attribution_schema",
    "budget",
    "coverage_schema",
    "questions_schema",
]

MAX_CLAIMS = 10
"""Claims extracted from one summary or one ground truth."""
CLAIM_CHARS = 200
"""A claim or a question: one atomic sentence."""
REASON_CHARS = 100
"""A verdict's reason: one short sentence of evidence."""
SUMMARY_REASON_CHARS = 600
"""A model-written reason for a whole score (`reason="model"`)."""
MAX_PASSAGES_CITED = 8
ENUM_PASSAGES = 64
"""Up to this many passages, a passage number is an enum of 1..n (see `attribution_schema`)."""

_STRICT = ConfigDict(extra="forbid")

Text = Annotated[str, Field(min_length=1, max_length=CLAIM_CHARS)]
ShortReason = Annotated[str, Field(min_length=1, max_length=REASON_CHARS)]


class ClaimVerdict(BaseModel):
    """One claim of the summary, judged against the source."""

    model_config = _STRICT
    claim: Text
    """An atomic claim the summary makes, in the summary's language."""
    reason: ShortReason
    """Where the source states it, or what the source says instead."""
    supported: bool
    """True only when the source states or directly implies the claim."""


class Alignment(BaseModel):
    """Reply of `summarization.alignment`."""

    model_config = _STRICT
    alignment: list[ClaimVerdict] = Field(max_length=MAX_CLAIMS)


class CoverageVerdict(BaseModel):
    """One question of the source, answered from the summary alone."""

    model_config = _STRICT
    question: Text
    """The question, as asked."""
    reason: ShortReason
    """What the summary says that answers it, or that it says nothing."""
    answered: bool
    """True when the summary alone answers the question "yes"."""


class Questions(BaseModel):
    """Reply of `summarization.questions` (its `maxItems` is set per scorer: `questions_schema`)."""

    model_config = _STRICT
    questions: list[Text]


class Coverage(BaseModel):
    """Reply of `summarization.coverage` (its `maxItems` is set per scorer: `coverage_schema`)."""

    model_config = _STRICT
    coverage: list[CoverageVerdict]


class Claims(BaseModel):
    """Reply of `context_recall.claims`."""

    model_config = _STRICT
    claims: list[Text] = Field(max_length=MAX_CLAIMS)


class AttributionVerdict(BaseModel):
    """One ground-truth claim, checked against the numbered context passages."""

    model_config = _STRICT
    claim: Text
    reason: ShortReason
    attributed: bool
    """True when the passages support the claim."""
    passages: list[int]
    """1-based numbers of the passages that support it (empty when not attributed)."""


class Attribution(BaseModel):
    """Reply of `context_recall.attribution` (bounds per passage count: `attribution_schema`)."""

    model_config = _STRICT
    verdicts: list[AttributionVerdict]


class Reason(BaseModel):
    """Reply of a `*.reason` step: the model-written explanation of a score."""

    model_config = _STRICT
    reason: Annotated[str, Field(min_length=1, max_length=SUMMARY_REASON_CHARS)]


@cache
def questions_schema(max_questions: int) -> type[Questions]:
    """`Questions` with at most `max_questions` items (one class per bound, built once)."""
    return create_model(
        f"Questions{max_questions}",
        __base__=Questions,
        questions=(list[Text], Field(min_length=0, max_length=max_questions)),
    )


@cache
def coverage_schema(max_questions: int) -> type[Coverage]:
    """`Coverage` with at most `max_questions` verdicts."""
    return create_model(
        f"Coverage{max_questions}",
        __base__=Coverage,
        coverage=(list[CoverageVerdict], Field(max_length=max_questions)),
    )


@cache
def attribution_schema(n_passages: int) -> type[Attribution]:
    """`Attribution` whose passage numbers can only be 1..n_passages.

    The numbers are an enum (`Literal[1, ..., n]`), not an integer with `minimum`/`maximum`:
    outlines' JSON-schema compiler, in the transformers engine and in vLLM's outlines backend
    alike, ignores integer bounds but honours an enum. So a judge cannot cite a passage that
    does not exist, and nothing has to be dropped after the fact. Past `ENUM_PASSAGES` the
    enum would slow the compile for no gain; the bound is then checked on validation, and an
    out-of-range number fails the row with its reason.
    """
    passage: Any
    if n_passages <= ENUM_PASSAGES:
        passage = Literal[tuple(range(1, n_passages + 1))]
    else:
        passage = Annotated[int, Field(ge=1, le=n_passages)]
    verdict = create_model(
        f"AttributionVerdict{n_passages}",
        __base__=AttributionVerdict,
        passages=(list[passage], Field(max_length=min(n_passages, MAX_PASSAGES_CITED))),
    )
    return create_model(
        f"Attribution{n_passages}",
        __base__=Attribution,
        verdicts=(list[verdict], Field(max_length=MAX_CLAIMS)),  # type: ignore[valid-type]
    )


def budget(items: int, chars_per_item: int) -> int:
    """`max_tokens` for a reply of `items` objects of at most `chars_per_item` characters.

    One token per 2 characters covers English words and about covers Chinese, Japanese and
    Korean under the default model's tokenizer; 16 tokens per item cover JSON punctuation and
    the keys, and 32 the envelope. It is not a hard bound: the default model's tokenizer
    writes digits one token each, so a reply that fills its strings with digits needs up to
    twice this, which the runner's one retry at twice the budget covers. Measured on the
    default model (docs/SCHEMAS.md): on 16 dev rows the longest reply used 72 % of its budget;
    on one FRANK article it wrote dates and times into every string and was cut.
    """
    return 32 + items * (16 + chars_per_item // 2)
