"""`deepeval`: the design of DeepEval's SummarizationMetric and ContextualRecallMetric.

Built from DeepEval's public description of the two metrics; the prompts are ours, written
for this comparison, and DeepEval's own text is not used.

Summarization (five calls a summary; truths, questions and the source's answers depend on the
source alone, so the runner sends them once per distinct source):

1. truths: the facts the source states, from the source alone;
2. claims: the facts the summary states, from the summary alone;
3. questions: closed yes/no assessment questions drawn from the source;
4. verdicts: each claim against the truths (never the source itself): yes (the truths state
   it), no (they contradict it), idk (they say nothing of it);
5. answers: the questions answered once from the source and once from the summary.

- `alignment` = the share of claims whose verdict is yes. DeepEval counts only yes here: its
  summarization metric penalises idk (a claim the source does not give is a hallucination),
  unlike its faithfulness metric. `alignment_not_no`, the share whose verdict is not no (idk
  counted as aligned), is kept beside it as an extra axis.
- `coverage` = of the questions the source answers yes, the share the summary answers yes
  too (DeepEval: "both the summary and the original document provide a 'yes' answer").
- `score` = min(alignment, coverage) * scale.

How yes / no / idk is read with probabilities: a verdict holds two booleans, each its own
`Verdict` so that each gets its own p: `yes.stated` (the truths state or imply the claim) and
`no.contradicted` (the truths contradict it). The verdict is no when `contradicted`, else yes
when `stated`, else idk. Soft axes, with the two read as independent:
`alignment_soft` = mean p(stated) * (1 - p(contradicted)) (the probability of yes),
`alignment_not_no_soft` = mean 1 - p(contradicted), and an answer's `yes` boolean carries
p(yes): `coverage_soft` = sum p_source * p_summary / sum p_source (the expected count of
questions both answer yes over the expected count the source answers yes; 0 when that is 0).

Context recall (ContextualRecall): each sentence of the ground truth (the expected output)
gets a yes/no verdict of whether the retrieval context supports it, verdict first;
`recall` = the share of yes, `recall_soft` = the mean p(yes). DeepEval asks the judge to walk
the sentences itself; here they are split by punctuation and numbered, so that the reply has
exactly one verdict per sentence.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from benchmarks.designs._common import (
    recall_result,
    recall_scorer,
    share,
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
    Claims,
    Questions,
    Verdict,
    budget,
    distinct,
    questions_schema,
)

NAME = "deepeval"

MAX_TRUTHS = 2 * MAX_CLAIMS
"""Truths drawn from one source (DeepEval's limit is open; a bound keeps the reply finite)."""

TRUTHS_TASK = f"""\
Task: list the facts that the source states, at most {MAX_TRUTHS}, in the order they appear. \
Each fact is one self-contained sentence that can be checked on its own (names instead of \
pronouns), taken from the source and not from what you know. Keep numbers, dates and names \
exactly as written."""

CLAIMS_TASK = f"""\
Task: list the facts that the summary states, at most {MAX_CLAIMS}, in the order they appear. \
Each fact is one self-contained sentence that can be checked on its own (names instead of \
pronouns). Keep numbers, dates and names exactly as written."""

QUESTIONS_TASK = """\
Task: write {n} closed questions about the most important facts of the source, each one \
answered "yes" or "no" by the source, the most important first."""

VERDICTS_TASK = """\
Task: judge each numbered claim, in the order given, against the facts in <context> alone. \
stated is true when the facts state the claim or directly imply it; contradicted is true when \
the facts say otherwise (a different number, date, name or outcome). When the facts say \
nothing about the claim, both are false. Decide first, then give a short reason."""

ANSWERS_TASK = """\
Task: answer each numbered question, in the order given, from the {text} alone: yes is true \
when the {text} says "yes" to it, false when it says "no" or does not say."""

RECALL_TASK = """\
Task: for each numbered sentence of the answer, in the order given, decide whether the \
numbered passages support it: attributed is true when the passages state it or directly imply \
it. Decide first, then give a short reason that names the passage."""

# -- schemas -------------------------------------------------------------------------------------

_STRICT = ConfigDict(extra="forbid")
Text = Annotated[str, Field(min_length=1, max_length=CLAIM_CHARS)]
ShortReason = Annotated[str, Field(min_length=1, max_length=REASON_CHARS)]


class Truths(BaseModel):
    """Reply of `deepeval.truths`."""

    model_config = _STRICT
    truths: list[Text] = Field(min_length=1, max_length=MAX_TRUTHS)


class Stated(Verdict):
    """The "yes" half of a verdict (p: of `stated`)."""

    stated: bool


class Contradicted(Verdict):
    """The "no" half of a verdict (p: of `contradicted`)."""

    contradicted: bool


class ClaimVerdict(BaseModel):
    """yes / no / idk as two booleans, each with its own p (see the module docstring)."""

    model_config = _STRICT
    yes: Stated
    no: Contradicted
    reason: ShortReason


class Verdicts(BaseModel):
    model_config = _STRICT
    verdicts: list[ClaimVerdict]


class Answer(Verdict):
    """A question's answer from one text (p: of `yes`)."""

    yes: bool


class Answers(BaseModel):
    model_config = _STRICT
    answers: list[Answer]


class SentenceVerdict(Verdict):
    """A ground-truth sentence against the passages (p: of `attributed`)."""

    attributed: bool
    reason: ShortReason


class RecallVerdicts(BaseModel):
    model_config = _STRICT
    verdicts: list[SentenceVerdict]


@cache
def exactly(schema: type[BaseModel], field: str, item: Any, n: int) -> type[BaseModel]:
    """`schema` whose `field` holds exactly `n` items (one per claim, question or sentence)."""
    return create_model(
        f"{schema.__name__}{n}",
        __base__=schema,
        **{field: (list[item], Field(min_length=n, max_length=n))},
    )


# -- requests ------------------------------------------------------------------------------------


def truths_request(source: str) -> JudgeRequest:
    user = f"{fence('source', source)}\n\n{TRUTHS_TASK}"
    return JudgeRequest(
        "deepeval.truths", judge_chat(user), Truths, budget(MAX_TRUTHS, CLAIM_CHARS)
    )


def questions_request(source: str, n: int) -> JudgeRequest:
    user = f"{fence('source', source)}\n\n{QUESTIONS_TASK.format(n=n)}"
    return JudgeRequest(
        "deepeval.questions", judge_chat(user), questions_schema(n), budget(n, CLAIM_CHARS)
    )


def claims_request(summary: str) -> JudgeRequest:
    """The summary's claims, from the summary alone."""
    user = f"{fence('summary', summary)}\n\n{CLAIMS_TASK}"
    return JudgeRequest(
        "deepeval.claims", judge_chat(user), Claims, budget(MAX_CLAIMS, CLAIM_CHARS)
    )


def verdicts_request(truths: list[str], claims: list[str]) -> JudgeRequest:
    """Each claim against the source's truths (the source itself is not in this prompt)."""
    user = (
        f"{fence('context', numbered(truths))}\n\n{fence('claims', numbered(claims))}\n\n"
        f"{VERDICTS_TASK}"
    )
    return JudgeRequest(
        "deepeval.verdicts",
        judge_chat(user),
        exactly(Verdicts, "verdicts", ClaimVerdict, len(claims)),
        budget(len(claims), REASON_CHARS + 32),
    )


def answers_request(tag: str, text: str, questions: list[str]) -> JudgeRequest:
    """The questions answered from `text` alone, `tag` "source" or "summary" (its fence)."""
    user = (
        f"{fence(tag, text)}\n\n{fence('questions', numbered(questions))}\n\n"
        f"{ANSWERS_TASK.format(text=tag)}"
    )
    return JudgeRequest(
        "deepeval.answers",
        judge_chat(user),
        exactly(Answers, "answers", Answer, len(questions)),
        budget(len(questions), 0),
    )


def recall_request(passages: list[str], sentences: list[str]) -> JudgeRequest:
    context = numbered_passages(passages)
    user = f"{context}\n\n{fence('answer', numbered(sentences))}\n\n{RECALL_TASK}"
    return JudgeRequest(
        "deepeval.recall",
        judge_chat(user),
        exactly(RecallVerdicts, "verdicts", SentenceVerdict, len(sentences)),
        budget(len(sentences), REASON_CHARS),
    )


# -- steps -----------------------------------------------------------------------------------


def verdict_of(v: ClaimVerdict) -> str:
    """yes / no / idk from the two booleans: contradicted wins, then stated."""
    return "no" if v.no.contradicted else "yes" if v.yes.stated else "idk"


def summarization_steps(
    source: str, summary: str, *, scorer_id: str, max_questions: int, scale: float
) -> Steps:
    # Step 1: truths, claims and questions; each sees one text only.
    truths_reply, claims_reply, questions_reply = yield [
        truths_request(source),
        claims_request(summary),
        questions_request(source, max_questions),
    ]
    assert isinstance(truths_reply, Truths) and isinstance(claims_reply, Claims)
    assert isinstance(questions_reply, Questions)
    truths, _ = distinct(list(truths_reply.truths))
    claims, _ = distinct(list(claims_reply.claims))
    questions, _ = distinct(list(questions_reply.questions))

    # Step 2: the claims against the truths; the questions answered from each text.
    judged, from_source, from_summary = yield [
        verdicts_request(truths, claims),
        answers_request("source", source, questions),
        answers_request("summary", summary, questions),
    ]
    assert isinstance(judged, Verdicts)
    assert isinstance(from_source, Answers) and isinstance(from_summary, Answers)
    alignment = [
        {
            "claim": claim,
            "verdict": verdict_of(v),
            "reason": v.reason,
            "p_stated": v.yes.p,
            "p_contradicted": v.no.p,
        }
        for claim, v in zip(claims, judged.verdicts, strict=True)
    ]
    coverage = [
        {"question": q, "source": s.yes, "summary": m.yes, "p_source": s.p, "p_summary": m.p}
        for q, s, m in zip(questions, from_source.answers, from_summary.answers, strict=True)
    ]

    # Step 3: the axes (see the module docstring) and the lower one, times the scale.
    asked = [c for c in coverage if c["source"]]
    axes = {
        "alignment": share([v["verdict"] == "yes" for v in alignment]),
        "alignment_not_no": share([v["verdict"] != "no" for v in alignment]),
        "coverage": share([c["summary"] for c in asked]) if asked else 0.0,
        **soft_axes(alignment, coverage),
    }
    return summarization_result(
        scorer_id,
        axes,
        scale,
        {"truths": truths, "alignment": alignment, "questions": questions},
        {"coverage": coverage},
        "",
    )


def soft_axes(alignment: list[dict[str, Any]], coverage: list[dict[str, Any]]) -> dict[str, Any]:
    """The soft axes, or {} when any p is unknown (the engine cannot read them)."""
    ps = [v["p_stated"] for v in alignment] + [v["p_contradicted"] for v in alignment]
    ps += [c["p_source"] for c in coverage] + [c["p_summary"] for c in coverage]
    if any(p is None for p in ps):
        return {}
    n = len(alignment)
    expected_asked = sum(c["p_source"] for c in coverage)
    both = sum(c["p_source"] * c["p_summary"] for c in coverage)
    return {
        "alignment_soft": sum(v["p_stated"] * (1 - v["p_contradicted"]) for v in alignment) / n
        if n
        else 0.0,
        "alignment_not_no_soft": sum(1 - v["p_contradicted"] for v in alignment) / n if n else 0.0,
        "coverage_soft": both / expected_asked if expected_asked > 0 else 0.0,
    }


def split_sentences(text: str) -> list[str]:
    """The sentences of a ground truth: split after . ! ? followed by a space."""
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def recall_steps(passages: list[str], ground_truth: str, *, scorer_id: str, scale: float) -> Steps:
    sentences = split_sentences(ground_truth)
    (judged,) = yield [recall_request(passages, sentences)]
    assert isinstance(judged, RecallVerdicts)
    verdicts = [
        {"sentence": s, "attributed": v.attributed, "reason": v.reason, "p": v.p}
        for s, v in zip(sentences, judged.verdicts, strict=True)
    ]
    ps = [v["p"] for v in verdicts]
    soft = None if any(p is None for p in ps) else sum(ps) / len(ps)
    return recall_result(
        scorer_id,
        share([v["attributed"] for v in verdicts]),
        soft,
        scale,
        {"sentences": sentences},
        {"verdicts": verdicts},
    )


def design(kind: str, engine: Engine, scale: float, max_questions: int) -> Scorer:
    """The `deepeval` scorer for a kind of file (see `designs.DESIGNS`)."""
    if kind == "attribution":
        return recall_scorer(NAME, engine, recall_steps, scale=scale)
    return summarization_scorer(
        NAME, engine, summarization_steps, scale=scale, max_questions=max_questions
    )
