"""`evalgpu-closed-book`: the product's pipeline, its checks asking for the evidence alone.

A trial of one change to how the judge is asked (issue 19): the closed question that ends an
alignment or attribution check names the evidence as the only ground for a "yes". The product
asks "Is every fact of this claim stated or directly implied by the source?"; this design asks
"... by the source itself, not by what you know?" (and "... by the passages themselves, ..." for
attribution). Everything else is the product's: the claims, the questions, the task text (which
already says, earlier in the prompt, that a detail the evidence does not give is not
supported), the schemas and the axes.

Why: the default judge finds true-in-the-world claims supported by evidence that does not state
them (`examples/context_recall.jsonl`, `eiffel-missed`: "The Eiffel Tower was completed in
1889" against a passage about the Louvre, p 0.59), and AttributionBench labels a claim
unattributed when its passages do not state it, true or not. The hypothesis: a small judge
weighs the sentence just before its verdict most.

The design wraps the product's scorer and rewrites those two questions in the requests its steps
yield, so the product's code runs unchanged and nothing outside this scorer is altered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any

from benchmarks.designs._common import relayed
from evalgpu.engines.base import JudgeRequest
from evalgpu.results import Steps
from evalgpu.scorers import context_recall, summarization

NAME = "evalgpu-closed-book"

ASKS = {
    "summarization.alignment": (
        summarization.ASK_SUPPORTED,
        "Is every fact of this claim stated or directly implied by the source itself, not by "
        "what you know?",
    ),
    "context_recall.attribution": (
        context_recall.ASK_ATTRIBUTED,
        "Is every fact of this claim stated or directly implied by the passages themselves, not "
        "by what you know? If so, which passages support it?",
    ),
}
"""Step tag -> (the product's question, this design's)."""


def design(kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """The product's scorer, its checks asked closed-book (see the module's docstring)."""
    from benchmarks.designs import evalgpu_design  # here: designs imports this module

    product = evalgpu_design(kind, engine, scale, max_questions)
    return dataclasses.replace(product, steps_fn=lambda row: closed_book(product.steps_fn(row)))


def closed_book(steps: Steps) -> Generator[list[JudgeRequest], Any, Any]:
    """The product's steps, each alignment or attribution question swapped for this design's."""
    return relayed(steps, lambda requests: ([ask_closed_book(r) for r in requests], list))


def ask_closed_book(request: JudgeRequest) -> JudgeRequest:
    """`request` with its closing question swapped, when it is an alignment or attribution check."""
    if request.tag not in ASKS:
        return request
    old, new = ASKS[request.tag]
    user = request.messages[-1]
    assert old in user["content"], f"{request.tag}: the product's question is not in the prompt"
    content = user["content"].replace(old, new)
    messages = [*request.messages[:-1], {**user, "content": content}]
    return dataclasses.replace(request, messages=messages)
