"""Verdict schemas: one bounded pydantic model per judge step.

The same class is the constrained-decoding schema and the parser of the reply. Field names are
a contract (docs/SEMANTICS.md §1). Each list has `maxItems` and each string a `maxLength`, so that a
reply that follows the schema always fits its `max_tokens` (docs/SEMANTICS.md §3): a small judge
model left unbounded rambles in free-text fields until it is cut.

Two kinds of reply. Lists (`Claims`, `Questions`) are what a judge extracts from one text,
seeing that text alone. Verdicts (`Supported`, `SaysYes`, `Answered`, `Attributed`) check one
claim or question against one text; their boolean is the first field, so that the judge decides
at its first token, where its probability is read, and a verify call costs its claim and one
verdict token (docs/SEMANTICS.md §1: why the judge is asked this way).

Every list has the lower bound its step implies, so that constrained decoding cannot take
the shortest valid path (`{"claims": []}`), which a small judge otherwise takes: a non-blank
summary or ground truth makes at least one claim, a non-blank source yields at least one
question.

Soft verdicts. Each boolean verdict (`supported`, `yes`, `answered`) carries `p`, the
judge's probability of `true` at that token, renormalised over `true` and `false`. The judge
does not write it: `p` is left out of the JSON schema the engine constrains decoding to
(`SkipJsonSchema`), and a reply text that sets it is refused. The engine sets it after parsing,
from its own logits (`attach_p`), or leaves it None when it cannot read them.

Bounds and budgets were chosen from measurements on the default model (docs/SCHEMAS.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import cache
from typing import Annotated, Any, Literal, TypeVar, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator
from pydantic.json_schema import SkipJsonSchema

from evalgpu._options import check_count

__all__ = [
    "VERDICT_MODES",
    "Answered",
    "Attributed",
    "Claims",
    "Questions",
    "Reason",
    "SaysYes",
    "SoftVerdictError",
    "Supported",
    "Verdict",
    "VerdictMode",
    "attach_p",
    "attribution_schema",
    "budget",
    "distinct",
    "has_soft_verdicts",
    "mean_p",
    "p_fields",
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

VerdictMode = Literal["hard", "soft"]
VERDICT_MODES = ("hard", "soft")
"""How a scorer counts verdicts: "hard", the share of true verdicts (the reference semantics),
or "soft", the mean probability of true (`Verdict.p`)."""

Text = Annotated[str, Field(min_length=1, max_length=CLAIM_CHARS)]
ShortReason = Annotated[str, Field(min_length=1, max_length=REASON_CHARS)]


class Verdict(BaseModel):
    """A verdict with one boolean, and `p`, the engine's probability that the boolean is true."""

    model_config = _STRICT
    p: SkipJsonSchema[float | None] = None
    """The judge's probability of `true` at the boolean's token, renormalised over `true` and
    `false`; None when the engine cannot read it. Not in the JSON schema: the judge never
    writes it, the engine sets it after parsing (`attach_p`). Calibrated when a calibration
    maps this kind of check (`evalgpu.calibration`)."""
    p_raw: SkipJsonSchema[float | None] = None
    """The judge's own p where `p` is calibrated; None when it is not."""

    @field_validator("p", "p_raw", mode="before")
    @classmethod
    def _not_from_the_reply(cls, value: Any) -> None:
        # Validation only ever sees reply text; an engine sets `p` by assignment.
        if value is not None:
            raise ValueError("p is read from the judge's logits by the engine, not written in it")
        return None


class Claims(BaseModel):
    """Reply of `*.claims`: a non-blank text makes at least one claim."""

    model_config = _STRICT
    claims: list[Text] = Field(min_length=1, max_length=MAX_CLAIMS)


class Questions(BaseModel):
    """Reply of `summarization.questions` (1 to `max_questions` items: `questions_schema`)."""

    model_config = _STRICT
    questions: list[Text]


class Supported(Verdict):
    """Reply of `summarization.alignment`: is one claim of the summary supported by the source?"""

    supported: bool


class SaysYes(Verdict):
    """Reply of `summarization.question_check`: does the source answer one question "yes"?"""

    yes: bool


class Answered(Verdict):
    """Reply of `summarization.coverage`: does the summary alone answer one question "yes"?"""

    answered: bool


class Attributed(Verdict):
    """Reply of `context_recall.attribution`: do the passages support one claim? The verdict
    first, then the numbers of the passages that support it (see `attribution_schema`).

    The verdict's key is `supported`, as in an alignment check (the record names it
    `attributed`): the judge reads its own key before it decides, and on the default judge
    `"attributed":` squeezed p toward 0.5 (0.70 for a claim a passage states word for word, 0.94
    after `"supported":`; the passages cited after it do not change p)."""

    supported: bool
    passages: list[int]
    """1-based numbers of the passages that support it (empty when not attributed)."""


class Reason(BaseModel):
    """Reply of a `*.reason` step: the model-written explanation of a score."""

    model_config = _STRICT
    reason: Annotated[str, Field(min_length=1, max_length=SUMMARY_REASON_CHARS)]


def questions_schema(max_questions: int, pattern: str | None = None) -> type[Questions]:
    """`Questions` with 1 to `max_questions` items, each matching `pattern` when given (a
    closed-question form: `evalgpu.scorers.summarization.closed_question_pattern`). One class
    per (bound, pattern), built once.

    A pattern carries its own length bound and no `minLength`/`maxLength` beside it:
    outlines-core (vLLM's outlines structured-output backend) drops a pattern that has length
    bounds beside it, and pastes a pattern into the JSON string's regex as it is, so a pattern
    must not admit a quote, a backslash or a newline either (the closed forms do not).
    """
    check_count("max_questions", max_questions)  # before the cache: True would hit 1's
    return _questions_schema(max_questions, pattern)


@cache
def _questions_schema(max_questions: int, pattern: str | None) -> type[Questions]:
    item: Any = Text if pattern is None else Annotated[str, Field(pattern=pattern)]
    return create_model(
        f"Questions{max_questions}" + ("" if pattern is None else "Closed"),
        __base__=Questions,
        questions=(list[item], Field(min_length=1, max_length=max_questions)),
    )


def attribution_schema(n_passages: int) -> type[Attributed]:
    """`Attributed` whose passage numbers are 1..n_passages.

    The passage numbers are an enum (`Literal[1, ..., n]`), not an integer with
    `minimum`/`maximum`: outlines' JSON-schema compiler, in the transformers engine and in
    vLLM's outlines backend alike, ignores integer bounds but honours an enum. So a judge cannot
    cite a passage that does not exist, and nothing has to be dropped after the fact. Past
    `ENUM_PASSAGES` the enum would slow the compile for no gain; the bound is then checked on
    validation, and an out-of-range number fails the row with its reason.
    """
    check_count("n_passages", n_passages)  # before the cache: True would hit 1's
    return _attribution_schema(n_passages)


@cache
def _attribution_schema(n_passages: int) -> type[Attributed]:
    passage: Any
    if n_passages <= ENUM_PASSAGES:
        passage = Literal[tuple(range(1, n_passages + 1))]
    else:
        passage = Annotated[int, Field(ge=1, le=n_passages)]
    return create_model(
        f"Attributed{n_passages}",
        __base__=Attributed,
        passages=(list[passage], Field(max_length=min(n_passages, MAX_PASSAGES_CITED))),
    )


def attach_p(parsed: BaseModel, probabilities: Sequence[float]) -> bool:
    """Set `p` on the verdicts of `parsed` from an engine's probabilities of `true`.

    `probabilities` holds one value per boolean literal of the reply text, in text order.
    Constrained decoding writes an object's properties in schema order, so the k-th boolean of
    the text is the k-th boolean field of `parsed` in declaration order. When the counts differ
    (an engine missed a decision), nothing is set and every `p` stays None: a wrong pairing
    would be worse than none.

    Returns:
        Whether the probabilities were attached.
    """
    slots = list(_booleans(parsed))
    if len(slots) != len(probabilities):
        return False
    for owner, value in zip(slots, probabilities, strict=True):
        if owner is not None and "p" in type(owner).model_fields:
            cast(Verdict, owner).p = float(value)  # assigned, not validated: see Verdict.p
    return True


def _booleans(node: Any) -> Iterator[BaseModel | None]:
    """The owner of each boolean under `node`, in declaration order (None: a bare list item)."""
    if isinstance(node, BaseModel):
        for name in type(node).model_fields:
            value = getattr(node, name)
            if isinstance(value, bool):
                yield node
            elif name != "p":
                yield from _booleans(value)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, bool):
                yield None
            else:
                yield from _booleans(item)


@cache
def has_soft_verdicts(schema: type[BaseModel]) -> bool:
    """Whether replies of `schema` hold verdicts with a `p` (engines then read their logits)."""
    return "p" in schema.model_fields or any(
        _verdict_types(field.annotation) for field in schema.model_fields.values()
    )


def _verdict_types(annotation: Any) -> bool:
    # By shape, not by class: a model with a `p` field is a verdict (so are copies of these
    # classes, such as the variants benchmarks/measure_schemas.py builds with other bounds).
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "p" in annotation.model_fields or has_soft_verdicts(annotation)
    return any(_verdict_types(arg) for arg in get_args(annotation))


class SoftVerdictError(RuntimeError):
    """`verdicts="soft"` on a reply whose verdicts have no `p`: the engine cannot read them.

    Raised inside a scorer's steps; the runner makes it that row's error.
    """

    def __init__(self, step: str, engine: str) -> None:
        super().__init__(
            f"{step}: verdicts='soft' needs the judge's probability p of every verdict, and "
            f"engine {engine!r} gives none (use verdicts='hard', or an engine that reads its "
            "logits: transformers or vllm)"
        )


T = TypeVar("T")


def distinct(items: Sequence[T], key: Callable[[T], str] = str) -> tuple[list[T], int]:
    """`items` without repeats (the same text after trimming and case folding), and how many
    were dropped; the first of each is kept, in order."""
    seen: set[str] = set()
    kept: list[T] = []
    for item in items:
        text = key(item).strip().casefold()
        if text not in seen:
            seen.add(text)
            kept.append(item)
    return kept, len(items) - len(kept)


def p_fields(verdict: Verdict) -> dict[str, float | None]:
    """A verdict's `p` for its record entry, and `p_raw` beside it where `p` is calibrated."""
    if verdict.p_raw is None:
        return {"p": verdict.p}
    return {"p": verdict.p, "p_raw": verdict.p_raw}


def mean_p(verdicts: Sequence[dict[str, Any]]) -> float | None:
    """The mean `p` of verdict entries: 0 when there are none (as for the hard axes), None
    when any `p` is missing."""
    ps = [v.get("p") for v in verdicts]
    known = [float(p) for p in ps if p is not None]
    if len(known) < len(ps):
        return None
    return sum(known) / len(known) if known else 0.0


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
