"""`direct`: one question per summary and axis, the verdict first, read as p(yes).

No claims, no questions: the judge reads the texts and answers one yes/no question.

- summarization: two calls a summary, both with the source and then the summary (so the
  second is served from the prefix cache of the first):
  `alignment_soft` = p("does the source support every fact of the summary?"),
  `coverage_soft` = p("does the summary cover the source's important facts?"); the hard axes
  are 1 when the verdict is true, else 0; `score` = min(alignment, coverage) * scale.
- context recall: one call a row, `recall_soft` = p("do the passages support every fact of
  the answer?"), `recall` = 1 when true, else 0.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.designs._common import (
    recall_result,
    recall_scorer,
    summarization_result,
    summarization_scorer,
)
from evalgpu.engines.base import Engine, JudgeRequest
from evalgpu.prompting import fence, judge_chat
from evalgpu.results import Steps
from evalgpu.scorers import Scorer
from evalgpu.scorers.context_recall import numbered_passages
from evalgpu.verdicts import REASON_CHARS, Verdict, budget

NAME = "direct"

ALIGNMENT_TASK = """\
Question: does the source support every fact that the summary states? supported is true only \
when each fact of the summary is stated or directly implied by the source, with numbers, \
dates and names exactly as the source gives them; a fact the source does not give makes it \
false. Answer first, then give a short reason."""

COVERAGE_TASK = """\
Question: does the summary cover the important facts of the source? covered is true when a \
reader of the summary alone learns the facts of the source that matter most (who, what, when, \
where, how much); missing one of them makes it false. Answer first, then give a short reason."""

RECALL_TASK = """\
Question: do the numbered passages support every fact of the answer? supported is true only \
when each fact of the answer is stated or directly implied by the passages; a fact they do \
not give makes it false. Answer first, then give a short reason."""

ShortReason = Annotated[str, Field(min_length=1, max_length=REASON_CHARS)]


class SupportedVerdict(Verdict):
    """p: of `supported`."""

    supported: bool
    reason: ShortReason


class CoveredVerdict(Verdict):
    """p: of `covered`."""

    covered: bool
    reason: ShortReason


# The verdict sits in an envelope: engines read p only for schemas whose fields hold verdicts
# (`evalgpu.verdicts.has_soft_verdicts` looks at the fields, not at the schema itself).


class Supported(BaseModel):
    """Reply of `direct.alignment` and `direct.recall`."""

    model_config = ConfigDict(extra="forbid")
    verdict: SupportedVerdict


class Covered(BaseModel):
    """Reply of `direct.coverage`."""

    model_config = ConfigDict(extra="forbid")
    verdict: CoveredVerdict


def texts(source: str, summary: str) -> str:
    return f"{fence('source', source)}\n\n{fence('summary', summary)}"


def alignment_request(source: str, summary: str) -> JudgeRequest:
    user = f"{texts(source, summary)}\n\n{ALIGNMENT_TASK}"
    return JudgeRequest("direct.alignment", judge_chat(user), Supported, budget(1, REASON_CHARS))


def coverage_request(source: str, summary: str) -> JudgeRequest:
    user = f"{texts(source, summary)}\n\n{COVERAGE_TASK}"
    return JudgeRequest("direct.coverage", judge_chat(user), Covered, budget(1, REASON_CHARS))


def recall_request(passages: list[str], answer: str) -> JudgeRequest:
    context = numbered_passages(passages)
    user = f"{context}\n\n{fence('answer', answer)}\n\n{RECALL_TASK}"
    return JudgeRequest("direct.recall", judge_chat(user), Supported, budget(1, REASON_CHARS))


def summarization_steps(
    source: str, summary: str, *, scorer_id: str, max_questions: int, scale: float
) -> Steps:
    # One call per axis, both in one wave; max_questions does not apply (no questions).
    supported, covered = yield [
        alignment_request(source, summary),
        coverage_request(source, summary),
    ]
    assert isinstance(supported, Supported) and isinstance(covered, Covered)
    s, c = supported.verdict, covered.verdict
    axes = {
        "alignment": float(s.supported),
        "coverage": float(c.covered),
        "alignment_soft": s.p,
        "coverage_soft": c.p,
    }
    return summarization_result(
        scorer_id,
        axes,
        scale,
        {"alignment": s.model_dump()},
        {"coverage": c.model_dump()},
        "",
    )


def recall_steps(passages: list[str], ground_truth: str, *, scorer_id: str, scale: float) -> Steps:
    (judged,) = yield [recall_request(passages, ground_truth)]
    assert isinstance(judged, Supported)
    v = judged.verdict
    return recall_result(scorer_id, float(v.supported), v.p, scale, {}, {"verdict": v.model_dump()})


def design(kind: str, engine: Engine, scale: float, max_questions: int) -> Scorer:
    """The `direct` scorer for a kind of file (see `designs.DESIGNS`)."""
    if kind == "attribution":
        return recall_scorer(NAME, engine, recall_steps, scale=scale)
    return summarization_scorer(
        NAME, engine, summarization_steps, scale=scale, max_questions=max_questions
    )
