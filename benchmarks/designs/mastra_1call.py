"""`mastra-1call`: the judge as it was at commit d4e0157, kept here to compare against.

Copied from that commit's `src/evalgpu/scorers/summarization.py` and `context_recall.py`,
trimmed to what the comparison needs (plain runs, template reasons, hard and soft axes):

- summarization: the summary's claims listed and judged in **one** alignment call that sees
  the source and the summary (reason before verdict); yes-questions drawn from the source
  alone (not checked against it); coverage in one call that lists every question and sees the
  summary alone.
- context recall: claims from the ground truth alone; one attribution call that lists every
  claim against the numbered passages, the reason before the verdict.

The schemas are this module's own copies (the package's may change), with the same bounds.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from benchmarks.designs._common import (
    recall_result,
    recall_scorer,
    summarization_result,
    summarization_scorer,
)
from evalgpu.engines.base import Engine, JudgeRequest
from evalgpu.prompting import fence, judge_chat, numbered
from evalgpu.results import Steps
from evalgpu.scorers import Scorer
from evalgpu.scorers.context_recall import numbered_passages
from evalgpu.verdicts import (
    CLAIM_CHARS,
    MAX_CLAIMS,
    REASON_CHARS,
    Questions,
    Verdict,
    budget,
    distinct,
    mean_p,
    questions_schema,
)

NAME = "mastra-1call"

ALIGNMENT_TASK = f"""\
Task: list the atomic claims that the summary makes, at most {MAX_CLAIMS}, the most important \
first. Each claim is one self-contained fact, written in the language of the summary. Judge each \
claim against the source alone:
- supported is true only when the source states the claim or directly implies it;
- numbers, dates, names and quantities must match the source exactly: an approximation of a \
precise fact ("about 500" for "512", "the 1990s" for "1995") is not support;
- a detail that the source does not give is not supported, even if it is true in the world.
Give a short reason that points at what the source says, then the verdict."""

QUESTIONS_TASK = """\
Task: write at most {n} closed-ended questions about the source, the most important first. \
Each question asks about one fact, is answered "yes" by the source, and is written in the \
language of the source. Ask about the facts a good summary must keep: who, what, when, where, \
how much."""

COVERAGE_TASK = """\
Task: answer each question using only the summary. answered is true only when the summary \
itself says "yes" to the question; it is false when the summary does not mention the fact or \
says something else. Answer every question, in the order given, copying each question; give a \
short reason that points at the summary's words, then the verdict."""

CLAIMS_TASK = f"""\
Task: break the answer into its atomic claims, at most {MAX_CLAIMS}, in the order they appear. \
Each claim is one self-contained fact that can be checked on its own (replace pronouns by the \
names they stand for), written in the language of the answer. Keep numbers, dates and names \
exactly as written."""

ATTRIBUTION_TASK = """\
Task: for each claim, in the order given, decide whether the numbered passages support it. \
attributed is true only when the passages state the claim or directly imply it; numbers, dates \
and names must match exactly, and an approximation of a precise fact is not support. What you \
know about the world does not count. Copy the claim, give a short reason that points at the \
passage, then the verdict, and list the numbers of the passages that support it (none when \
not attributed)."""

# -- schemas (copies of d4e0157's evalgpu.verdicts, same bounds) -----------------------------

_STRICT = ConfigDict(extra="forbid")
Text = Annotated[str, Field(min_length=1, max_length=CLAIM_CHARS)]
ShortReason = Annotated[str, Field(min_length=1, max_length=REASON_CHARS)]
MAX_PASSAGES_CITED = 8
ENUM_PASSAGES = 64


class ClaimVerdict(Verdict):
    """One claim of the summary, judged against the source (p: of `supported`)."""

    claim: Text
    reason: ShortReason
    supported: bool


class Alignment(BaseModel):
    """Reply of `mastra.alignment`: the summary's claims, each judged."""

    model_config = _STRICT
    alignment: list[ClaimVerdict] = Field(min_length=1, max_length=MAX_CLAIMS)


class CoverageVerdict(Verdict):
    """One question of the source, answered from the summary alone (p: of `answered`)."""

    question: Text
    reason: ShortReason
    answered: bool


class Coverage(BaseModel):
    model_config = _STRICT
    coverage: list[CoverageVerdict]


class Claims(BaseModel):
    """Reply of `mastra.claims`: the ground truth's claims."""

    model_config = _STRICT
    claims: list[Text] = Field(min_length=1, max_length=MAX_CLAIMS)


class AttributionVerdict(Verdict):
    """One ground-truth claim against the passages (p: of `attributed`)."""

    claim: Text
    reason: ShortReason
    attributed: bool
    passages: list[int]


class Attribution(BaseModel):
    model_config = _STRICT
    verdicts: list[AttributionVerdict]


@cache
def coverage_schema(n: int) -> type[Coverage]:
    return create_model(
        f"MastraCoverage{n}",
        __base__=Coverage,
        coverage=(list[CoverageVerdict], Field(min_length=n, max_length=n)),
    )


@cache
def attribution_schema(n_passages: int, n_claims: int) -> type[Attribution]:
    passage: Any
    if n_passages <= ENUM_PASSAGES:
        passage = Literal[tuple(range(1, n_passages + 1))]
    else:
        passage = Annotated[int, Field(ge=1, le=n_passages)]
    verdict = create_model(
        f"MastraAttributionVerdict{n_passages}",
        __base__=AttributionVerdict,
        passages=(list[passage], Field(max_length=min(n_passages, MAX_PASSAGES_CITED))),
    )
    return create_model(
        f"MastraAttribution{n_passages}x{n_claims}",
        __base__=Attribution,
        verdicts=(list[verdict], Field(min_length=n_claims, max_length=n_claims)),  # type: ignore[valid-type]
    )


# -- requests ------------------------------------------------------------------------------------


def alignment_request(source: str, summary: str) -> JudgeRequest:
    """Claims of the summary, listed and judged in one call that sees both texts."""
    user = f"{fence('source', source)}\n\n{fence('summary', summary)}\n\n{ALIGNMENT_TASK}"
    return JudgeRequest(
        "mastra.alignment",
        judge_chat(user),
        Alignment,
        budget(MAX_CLAIMS, CLAIM_CHARS + REASON_CHARS),
    )


def questions_request(source: str, n: int) -> JudgeRequest:
    """Yes-questions from the source alone (shares the source prefix with alignment)."""
    user = f"{fence('source', source)}\n\n{QUESTIONS_TASK.format(n=n)}"
    return JudgeRequest(
        "mastra.questions", judge_chat(user), questions_schema(n), budget(n, CLAIM_CHARS)
    )


def coverage_request(summary: str, questions: list[str]) -> JudgeRequest:
    """Every question answered in one call from the summary alone."""
    listed = fence("questions", numbered(questions))
    user = f"{listed}\n\n{fence('summary', summary)}\n\n{COVERAGE_TASK}"
    return JudgeRequest(
        "mastra.coverage",
        judge_chat(user),
        coverage_schema(len(questions)),
        budget(len(questions), CLAIM_CHARS + REASON_CHARS),
    )


def claims_request(ground_truth: str) -> JudgeRequest:
    user = f"{fence('answer', ground_truth)}\n\n{CLAIMS_TASK}"
    return JudgeRequest("mastra.claims", judge_chat(user), Claims, budget(MAX_CLAIMS, CLAIM_CHARS))


def attribution_request(passages: list[str], claims: list[str]) -> JudgeRequest:
    """Every claim against the numbered passages in one call, the reason before the verdict."""
    context = numbered_passages(passages)
    user = f"{context}\n\n{fence('claims', numbered(claims))}\n\n{ATTRIBUTION_TASK}"
    return JudgeRequest(
        "mastra.attribution",
        judge_chat(user),
        attribution_schema(len(passages), len(claims)),
        budget(len(claims), CLAIM_CHARS + REASON_CHARS + 24),
    )


# -- steps -----------------------------------------------------------------------------------


def summarization_steps(
    source: str, summary: str, *, scorer_id: str, max_questions: int, scale: float
) -> Steps:
    # Step 1: alignment and questions, together (both see the source).
    judged, asked = yield [
        alignment_request(source, summary),
        questions_request(source, max_questions),
    ]
    assert isinstance(judged, Alignment) and isinstance(asked, Questions)
    claims, _ = distinct(judged.alignment, key=lambda v: v.claim)
    alignment = [
        {"claim": v.claim, "supported": v.supported, "reason": v.reason, "p": v.p} for v in claims
    ]
    questions, _ = distinct(list(asked.questions))

    # Step 2: coverage from the summary alone; a missing verdict is not answered.
    coverage: list[dict[str, Any]] = []
    if questions:
        (answers,) = yield [coverage_request(summary, questions)]
        assert isinstance(answers, Coverage)
        got = answers.coverage
        coverage = [
            {"question": q, "answered": got[i].answered, "p": got[i].p}
            if i < len(got)
            else {"question": q, "answered": False, "p": None}
            for i, q in enumerate(questions)
        ]

    # Step 3: the lower axis, times the scale.
    axes = {
        "alignment": sum(v["supported"] for v in alignment) / len(alignment) if alignment else 0.0,
        "coverage": sum(v["answered"] for v in coverage) / len(coverage) if coverage else 0.0,
        "alignment_soft": mean_p(alignment),
        "coverage_soft": mean_p(coverage),
    }
    return summarization_result(
        scorer_id,
        axes,
        scale,
        {"alignment": alignment, "questions": questions},
        {"coverage": coverage},
        "",
    )


def recall_steps(passages: list[str], ground_truth: str, *, scorer_id: str, scale: float) -> Steps:
    (extracted,) = yield [claims_request(ground_truth)]
    assert isinstance(extracted, Claims)
    claims, _ = distinct(list(extracted.claims))
    (judged,) = yield [attribution_request(passages, claims)]
    assert isinstance(judged, Attribution)
    verdicts = [
        {"claim": c, "attributed": v.attributed, "p": v.p}
        for c, v in zip(claims, judged.verdicts, strict=False)
    ]
    verdicts += [{"claim": c, "attributed": False, "p": None} for c in claims[len(verdicts) :]]
    recall = sum(v["attributed"] for v in verdicts) / len(claims) if claims else 0.0
    return recall_result(
        scorer_id, recall, mean_p(verdicts), scale, {"claims": claims}, {"verdicts": verdicts}
    )


def design(kind: str, engine: Engine, scale: float, max_questions: int) -> Scorer:
    """The `mastra-1call` scorer for a kind of file (see `designs.DESIGNS`)."""
    if kind == "attribution":
        return recall_scorer(NAME, engine, recall_steps, scale=scale)
    return summarization_scorer(
        NAME, engine, summarization_steps, scale=scale, max_questions=max_questions
    )
