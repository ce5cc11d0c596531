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

from benchmarks.designs._common import COVERAGE, asked_again
from evalgpu.engines.base import JudgeRequest
from evalgpu.messages import last_assistant_text
from evalgpu.prompting import fenced
from evalgpu.rows import Fields
from evalgpu.scorers import Scorer
from evalgpu.scorers.summarization import coverage_request

NAME = "evalgpu-coverage-summary"


def design(kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """The product's scorer, its coverage checks also asked against the summary's text."""
    from benchmarks.designs import evalgpu_design  # here: designs imports this module

    product = evalgpu_design(kind, engine, scale, max_questions)
    if kind == "attribution":
        return product
    return coverage_trial(product)


def coverage_trial(product: Scorer) -> Scorer:
    """The `product` scorer with each coverage check also asked against the summary's text and
    that answer used (`asked_again`); the product's own verdicts kept as `coverage_product` and
    `coverage_soft_product`."""

    def steps(row: Fields) -> Any:
        summary = last_assistant_text(row.get("summary", "output"))  # as the product reads it
        return asked_again(product.steps_fn(row), COVERAGE, asked_of_text(summary))

    return dataclasses.replace(product, steps_fn=steps)


def asked_of_text(summary: str) -> Any:
    """`check -> the same question asked against the summary's text`."""

    def again(check: JudgeRequest) -> JudgeRequest:
        (question,) = fenced(check.messages[-1]["content"], "question")
        return coverage_request(summary, question)

    return again
