"""`evalgpu-list`: the product's pipeline, but each list of checks in one call.

The product (`evalgpu.scorers`) checks each claim and each question in a call of its own, the
verdict its only output token. This design asks the same judge the same things with the same
claims and questions calls, but puts every claim of a summary in one verification call (and
every question in one source check, every kept question in one coverage call), with a list of
verdicts, each verdict's boolean first and its `p` read there. It is the comparison issue 19
item 2 asks for: one call per claim against one call that lists all claims.

- summarization: `{"verdicts": [{"supported": bool}] * n}` against the source, `{"verdicts":
  [{"yes": bool}] * m}` against the source, `{"verdicts": [{"answered": bool}] * k}` against the
  summary; axes as the product's.
- context recall: the ground truth's claims (the product's call), then one call with
  `{"verdicts": [{"supported": bool}] * n}` against the passages.
"""

from __future__ import annotations

from functools import cache
from typing import Any

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
from evalgpu.scorers import CHECK_TASK, Scorer, context_recall, summarization
from evalgpu.scorers.context_recall import numbered_passages
from evalgpu.verdicts import Answered, Claims, Questions, SaysYes, Supported, distinct, mean_p

NAME = "evalgpu-list"

ASK = {
    Supported: (
        "For each claim, in order: is every fact of it stated or directly implied by the {name}?"
    ),
    SaysYes: 'For each question, in order: does the {name} answer it "yes"?',
    Answered: 'For each question, in order: does the {name} alone answer it "yes"?',
}


@cache
def verdicts_schema(verdict: type[BaseModel], n: int) -> type[BaseModel]:
    """`{"verdicts": [verdict] * n}`: exactly one verdict per item, in order."""
    return create_model(
        f"ListOf{verdict.__name__}{n}",
        __config__=ConfigDict(extra="forbid"),
        verdicts=(list[verdict], Field(min_length=n, max_length=n)),  # type: ignore[valid-type]
    )


def list_request(
    tag: str, evidence: str, name: str, items: list[str], verdict: type[BaseModel]
) -> JudgeRequest:
    """Every item checked against one text in one call, the verdicts in the items' order."""
    item_tag = "claims" if verdict is Supported else "questions"
    user = (
        f"{evidence}\n\n{CHECK_TASK.format(name=name)}\n\n{fence(item_tag, numbered(items))}\n"
        f"{ASK[verdict].format(name=name)}"
    )
    schema = verdicts_schema(verdict, len(items))
    return JudgeRequest(tag, judge_chat(user), schema, 32 + 12 * len(items))


def _entries(items: list[str], reply: Any, key: str, field: str) -> list[dict[str, Any]]:
    return [
        {key: item, field: getattr(v, field), "p": v.p}
        for item, v in zip(items, reply.verdicts, strict=True)
    ]


def summarization_steps(
    source: str, summary: str, *, scorer_id: str, max_questions: int, scale: float
) -> Steps:
    listed, asked = yield [
        summarization.claims_request(summary),
        summarization.questions_request(source, max_questions),
    ]
    assert isinstance(listed, Claims) and isinstance(asked, Questions)
    claims, _ = distinct(list(listed.claims))
    candidates, _ = distinct(list(asked.questions))
    evidence = fence("source", source)
    checked, says = yield [
        list_request("evalgpu-list.alignment", evidence, "source", claims, Supported),
        list_request("evalgpu-list.question_check", evidence, "source", candidates, SaysYes),
    ]
    alignment = _entries(claims, checked, "claim", "supported")
    kept = [q for q, v in zip(candidates, says.verdicts, strict=True) if v.yes]
    coverage: list[dict[str, Any]] = []
    if kept:
        (answers,) = yield [
            list_request(
                "evalgpu-list.coverage", fence("summary", summary), "summary", kept, Answered
            )
        ]
        coverage = _entries(kept, answers, "question", "answered")
    axes = summarization.combine(alignment, coverage)
    axes.setdefault("alignment_soft", mean_p(alignment))
    axes.setdefault("coverage_soft", mean_p(coverage))
    return summarization_result(
        scorer_id,
        axes,
        scale,
        {"alignment": alignment, "questions": kept},
        {"coverage": coverage},
        "",
    )


def recall_steps(passages: list[str], ground_truth: str, *, scorer_id: str, scale: float) -> Steps:
    (listed,) = yield [context_recall.claims_request(ground_truth)]
    assert isinstance(listed, Claims)
    claims, _ = distinct(list(listed.claims))
    evidence = numbered_passages(passages)
    (checked,) = yield [
        list_request("evalgpu-list.attribution", evidence, "passages", claims, Supported)
    ]
    verdicts = _entries(claims, checked, "claim", "supported")
    recall = sum(v["supported"] for v in verdicts) / len(verdicts) if verdicts else 0.0
    return recall_result(scorer_id, recall, mean_p(verdicts), scale, {"claims": claims}, {})


def design(kind: str, engine: Engine, scale: float, max_questions: int) -> Scorer:
    """The `evalgpu-list` scorer for a kind of file (see `designs.DESIGNS`)."""
    if kind == "attribution":
        return recall_scorer(NAME, engine, recall_steps, scale=scale)
    return summarization_scorer(
        NAME, engine, summarization_steps, scale=scale, max_questions=max_questions
    )
