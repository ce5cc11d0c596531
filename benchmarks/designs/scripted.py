"""Rules for the designs' requests on the scripted engine: dry runs and tests, no model.

`engine(model, **options)` is a `ScriptedEngine` with `RULES` as overrides, so that
`--backend benchmarks.designs.scripted:engine` runs any design (the product's own tags keep the
shipped rules). Like the shipped rules, they mean nothing about quality and are repeatable: a
fact is supported when every content word of it occurs in the text it is checked against.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from evalgpu.engines.base import JudgeRequest
from evalgpu.engines.scripted import ScriptedEngine

__all__ = ["RULES", "engine"]

STOP = set(
    "the and was were for with that this from has had have his her its are is it he she they "
    "by in of to a an on at as be which who did does do not".split()
)


def block(request: JudgeRequest, tag: str) -> str:
    """The text of the last `<tag>` block of the request's prompt."""
    found = re.findall(rf"<{tag}>\n(.*?)\n</{tag}>", request.messages[-1]["content"], flags=re.S)
    return found[-1] if found else ""


def blocks(request: JudgeRequest, tag: str) -> list[str]:
    return re.findall(rf"<{tag}>\n(.*?)\n</{tag}>", request.messages[-1]["content"], flags=re.S)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if w not in STOP}


def numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+", text))


def items(text: str) -> list[str]:
    """The items of a list written by `evalgpu.prompting.numbered`."""
    return [re.sub(r"^\d+\. ", "", line) for line in text.splitlines() if line.strip()]


def fact(question: str) -> str:
    return re.sub(r"^Is it true that |\?$", "", question)


def at_most(request: JudgeRequest) -> int:
    found = re.search(r"(?:at most )?(\d+) (?:closed|questions)", request.messages[-1]["content"])
    return int(found.group(1)) if found else 5


def questions(request: JudgeRequest) -> dict[str, Any]:
    asked = [f"Is it true that {s.rstrip('.')}?" for s in sentences(block(request, "source"))]
    return {"questions": asked[: at_most(request)]}


# -- mastra-1call --------------------------------------------------------------------------------


def mastra_alignment(request: JudgeRequest) -> dict[str, Any]:
    source = words(block(request, "source"))
    return {
        "alignment": [
            {"claim": s, "reason": "word by word", "supported": words(s) <= source}
            for s in sentences(block(request, "summary"))
        ]
    }


def mastra_coverage(request: JudgeRequest) -> dict[str, Any]:
    summary = words(block(request, "summary"))
    return {
        "coverage": [
            {"question": q, "reason": "looked", "answered": words(fact(q)) <= summary}
            for q in items(block(request, "questions"))
        ]
    }


def mastra_attribution(request: JudgeRequest) -> dict[str, Any]:
    passages = [words(p) for p in blocks(request, "passage")]
    verdicts = []
    for claim in items(block(request, "claims")):
        found = [i for i, p in enumerate(passages, 1) if words(claim) <= p]
        verdicts.append(
            {"claim": claim, "reason": "matched", "attributed": bool(found), "passages": found}
        )
    return {"verdicts": verdicts}


# -- deepeval ------------------------------------------------------------------------------------


def deepeval_verdicts(request: JudgeRequest) -> dict[str, Any]:
    """yes when the truths hold every word, no when a number is not theirs, else idk."""
    truths = block(request, "context")
    verdicts = []
    for claim in items(block(request, "claims")):
        stated = words(claim) <= words(truths)
        contradicted = not stated and bool(numbers(claim) - numbers(truths))
        verdicts.append(
            {
                "yes": {"stated": stated},
                "no": {"contradicted": contradicted},
                "reason": "compared with the facts",
            }
        )
    return {"verdicts": verdicts}


def deepeval_answers(request: JudgeRequest) -> dict[str, Any]:
    text = words(block(request, "summary") or block(request, "source"))
    return {
        "answers": [{"yes": words(fact(q)) <= text} for q in items(block(request, "questions"))]
    }


def deepeval_recall(request: JudgeRequest) -> dict[str, Any]:
    passages = [words(p) for p in blocks(request, "passage")]
    return {
        "verdicts": [
            {"attributed": any(words(s) <= p for p in passages), "reason": "matched"}
            for s in items(block(request, "answer"))
        ]
    }


# -- direct --------------------------------------------------------------------------------------


def direct_alignment(request: JudgeRequest) -> dict[str, Any]:
    supported = words(block(request, "summary")) <= words(block(request, "source"))
    return {"verdict": {"supported": supported, "reason": "word by word"}}


def direct_coverage(request: JudgeRequest) -> dict[str, Any]:
    """Covered when the summary holds at least half of the source's sentences."""
    summary = words(block(request, "summary"))
    held = [words(s) <= summary for s in sentences(block(request, "source"))]
    return {"verdict": {"covered": 2 * sum(held) >= len(held), "reason": "sentence by sentence"}}


def direct_recall(request: JudgeRequest) -> dict[str, Any]:
    context = set().union(*(words(p) for p in blocks(request, "passage")))
    supported = words(block(request, "answer")) <= context
    return {"verdict": {"supported": supported, "reason": "word by word"}}


# -- evalgpu-list ---------------------------------------------------------------------------------


def list_checks(request: JudgeRequest) -> dict[str, Any]:
    """Each listed claim or question checked as the shipped rules check one."""
    text = (
        block(request, "summary")
        or " ".join(blocks(request, "passage"))
        or block(request, "source")
    )
    listed = items(block(request, "claims") or block(request, "questions"))
    key = request.tag.rsplit(".", 1)[1]
    field = {"alignment": "supported", "attribution": "supported", "question_check": "yes"}
    return {
        "verdicts": [
            {field.get(key, "answered"): words(fact(item)) <= words(text)} for item in listed
        ]
    }


RULES: dict[str, Callable[[JudgeRequest], dict[str, Any]]] = {
    "mastra.alignment": mastra_alignment,
    "mastra.questions": questions,
    "mastra.coverage": mastra_coverage,
    "mastra.claims": lambda r: {"claims": sentences(block(r, "answer"))},
    "mastra.attribution": mastra_attribution,
    "deepeval.truths": lambda r: {"truths": sentences(block(r, "source"))},
    "deepeval.claims": lambda r: {"claims": sentences(block(r, "summary"))},
    "deepeval.questions": questions,
    "deepeval.verdicts": deepeval_verdicts,
    "deepeval.answers": deepeval_answers,
    "deepeval.recall": deepeval_recall,
    "direct.alignment": direct_alignment,
    "direct.coverage": direct_coverage,
    "direct.recall": direct_recall,
    "evalgpu-list.alignment": list_checks,
    "evalgpu-list.question_check": list_checks,
    "evalgpu-list.coverage": list_checks,
    "evalgpu-list.attribution": list_checks,
    "context_recall.passage_claims": lambda r: {"claims": sentences(block(r, "passage"))},
}
"""Request tag -> rule (a reply dict, its keys in the schema's order: p follows that order)."""


def engine(model: Any = None, **options: Any) -> ScriptedEngine:
    """A `ScriptedEngine` that also answers every design's requests (`load_engine` factory)."""
    return ScriptedEngine(model, overrides={**RULES, **options.pop("overrides", {})}, **options)
