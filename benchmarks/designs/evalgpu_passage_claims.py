"""`evalgpu-passage-claims`: the product's pipeline, each attribution check asked against the
passages' listed claims instead of their text.

A trial of one change to how the judge is asked (issue 36, item 3: instructions inside the
texts), the passages' twin of what coverage does with the summary (docs/DECISIONS.md,
2026-12-07): a note to the evaluator appended to a passage is no claim of it, and a claims call
drops it, so an attribution check that reads each passage as its claims, one per line, no longer
sees the note. Everything else is the product's: the ground truth's claims, the check's prompt
(each passage's claims stand in its numbered fence), the schema and the axes.

The price to measure: what a passage's claims leave out (at most `MAX_CLAIMS` a passage, each one
sentence) cannot support a claim, so recall may fall on long passages.

One run records both: each attribution check is asked as the product asks it and against the
claims. The design's axes are the claims' (`recall`, `recall_soft`), and `recall_product` /
`recall_soft_product` the product's from the same run on the same claims.

Cost: one claims call per distinct passage (shared by every row that retrieves it), and one
more check per claim.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.designs._common import ATTRIBUTION, relayed, with_product
from evalgpu.engines.base import JudgeRequest
from evalgpu.prompting import fenced
from evalgpu.results import Steps
from evalgpu.rows import Fields
from evalgpu.scorers import claims_request
from evalgpu.scorers.context_recall import attribution_request
from evalgpu.verdicts import Claims, distinct

NAME = "evalgpu-passage-claims"

PASSAGE_CLAIMS = "context_recall.passage_claims"


def design(kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """The product's scorer, its attribution checks also asked against the passages' claims."""
    from benchmarks.designs import evalgpu_design  # here: designs imports this module

    product = evalgpu_design(kind, engine, scale, max_questions)
    if kind != "attribution":
        return product
    return dataclasses.replace(
        product, steps_fn=lambda row: attribution_from_claims(product.steps_fn(row), row)
    )


def passages_of(row: Fields) -> list[str]:
    """The run's passages, as the product reads them (a string is one passage)."""
    context = row.get("context")
    if isinstance(context, str):
        return [context]
    return [p for p in context] if isinstance(context, list) else []


def passage_claims_request(passage: str) -> JudgeRequest:
    """A passage's atomic claims, from the passage alone (the claims call of every text)."""
    return claims_request(PASSAGE_CLAIMS, "passage", passage)


def attribution_from_claims(steps: Steps, row: Fields) -> Any:
    """The product's `steps`, each attribution check also asked against the passages as their
    distinct claims, one per line, and that answer used; the product's own verdicts kept as
    `recall_product` and `recall_soft_product`."""
    passages = passages_of(row)
    stated: list[str] = []
    product: list[Any] = []

    def relay(requests: list[JudgeRequest]) -> tuple[list[JudgeRequest], Any]:
        listing = not stated and passages and any(r.tag != ATTRIBUTION for r in requests)
        extra = [passage_claims_request(p) for p in passages] if listing else []
        checks = [i for i, r in enumerate(requests) if r.tag == ATTRIBUTION]
        again = [
            attribution_request(stated, fenced(requests[i].messages[-1]["content"], "claim")[0])
            for i in checks
        ]

        def back(sent: list[Any]) -> list[Any]:
            replies, rest = list(sent[: len(requests)]), sent[len(requests) :]
            listed, asked = rest[: len(extra)], rest[len(extra) :]
            for reply in listed:
                assert isinstance(reply, Claims)
                stated.append("\n".join(distinct(list(reply.claims))[0]))
            for i, reply in zip(checks, asked, strict=True):
                product.append(replies[i])
                replies[i] = reply
            return replies

        return [*requests, *extra, *again], back

    result = yield from relayed(steps, relay)
    return with_product(result, product, ATTRIBUTION)
