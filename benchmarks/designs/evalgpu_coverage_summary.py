"""`evalgpu-coverage-summary`: the product's pipeline, each coverage question answered from the
summary's own text, as the product answered it until 2026-12-07, instead of from its claims.

The trial that moved the product (issue 36, item 3: instructions inside the texts), kept so that
the comparison can be run again: the product now answers each coverage question from the
summary's claims, one per line (`evalgpu.scorers.summarization.summary_as_claims`), since a note
to the evaluator appended to a summary is not a claim, and a coverage check that read the
summary's text obeyed it (docs/DECISIONS.md, 2026-12-07). Everything else is the product's.

One run records both: each coverage check is asked as the product asks it and against the
summary's text. The design's axes are the text's, and `coverage_product` /
`coverage_soft_product` are the product's axes from the same run on the same questions:
`coverage_soft - coverage_soft_product` is the effect of the change alone (agreement.py's
`readings`).

Cost: one more check per question, as long as the summary.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.designs._common import relayed, share
from evalgpu.engines.base import JudgeRequest
from evalgpu.prompting import fenced
from evalgpu.results import ScoreResult, Steps
from evalgpu.scorers import Scorer
from evalgpu.scorers.summarization import coverage_request

NAME = "evalgpu-coverage-summary"

CLAIMS = "summarization.claims"
COVERAGE = "summarization.coverage"


def design(kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """The product's scorer, its coverage checks also asked against the summary's text."""
    from benchmarks.designs import evalgpu_design  # here: designs imports this module

    product = evalgpu_design(kind, engine, scale, max_questions)
    if kind == "attribution":
        return product
    return coverage_trial(product)


def coverage_trial(product: Scorer) -> Scorer:
    """The `product` scorer with each coverage check answered from the summary's text
    (`coverage_from_summary`)."""
    return dataclasses.replace(
        product, steps_fn=lambda row: coverage_from_summary(product.steps_fn(row))
    )


def fenced_one(request: JudgeRequest, tag: str) -> str:
    """The text of a request's `<tag>` fence (its first)."""
    return fenced(request.messages[-1]["content"], tag)[0]


def coverage_from_summary(steps: Steps) -> Any:
    """The product's `steps`, each coverage check also asked against the summary's text (as the
    claims call saw it) and that answer used; the product's own verdicts kept as
    `coverage_product` and `coverage_soft_product`."""
    summary: list[str] = []
    product: list[Any] = []

    def relay(requests: list[JudgeRequest]) -> tuple[list[JudgeRequest], Any]:
        for request in requests:
            if request.tag == CLAIMS:
                summary[:] = [fenced_one(request, "summary")]
        checks = [i for i, r in enumerate(requests) if r.tag == COVERAGE]
        again = [coverage_request(summary[0], fenced_one(requests[i], "question")) for i in checks]

        def back(sent: list[Any]) -> list[Any]:
            replies, asked = list(sent[: len(requests)]), sent[len(requests) :]
            for i, reply in zip(checks, asked, strict=True):
                product.append(replies[i])
                replies[i] = reply
            return replies

        return [*requests, *again], back

    result = yield from relayed(steps, relay)
    return with_product(result, product)


def with_product(result: ScoreResult, product: list[Any]) -> ScoreResult:
    """`result` with the product's coverage axes on the same questions."""
    axes = dict(result.axes or {})
    if "coverage" not in axes:
        return result
    if not product:  # no question was answered: the product's axes are the design's
        axes["coverage_product"] = axes["coverage"]
        if "coverage_soft" in axes:
            axes["coverage_soft_product"] = axes["coverage_soft"]
        return result.model_copy(update={"axes": axes})
    axes["coverage_product"] = share([v.answered for v in product])
    if all(v.p is not None for v in product):
        axes["coverage_soft_product"] = sum(v.p for v in product) / len(product)
    return result.model_copy(update={"axes": axes})
