"""What every design shares: the runs agreement.py and bench.py score, and the results' shape.

The designs score plain runs only, as the two scripts build them: summarization
`{"input": source, "output": summary}` (or a per-run `source`), context recall
`{"input": question, "ground_truth": answer, "context": [passages]}`. Agent-shaped runs,
extractors and model-written reasons are the product's; a design does without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from typing import Any

from evalgpu.engines.base import Engine, JudgeRequest
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.rows import Fields
from evalgpu.scorers import Scorer

SUMMARIZATION_AXES = ("alignment", "coverage", "alignment_soft", "coverage_soft")
RECALL_AXES = ("recall", "recall_soft")


def summarization_scorer(
    design: str, engine: Engine, steps: Callable[..., Steps], **options: Any
) -> Scorer:
    """A `Scorer` of summarization runs whose steps are `steps(source, summary, **options)`."""
    scorer_id = f"summarization-scorer@{design}"

    def run_steps(row: Fields) -> Steps:
        text, output = row.get("source", "input"), row.get("output")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"source: must be a non-blank string, got {type(text).__name__}")
        if not isinstance(output, str):
            raise InputError(f"summary: must be a string, got {type(output).__name__}")
        if not output.strip():
            return empty_summary(scorer_id)
        return (yield from steps(text, output, scorer_id=scorer_id, **options))

    return Scorer(scorer_id, engine, run_steps, options=options)


def recall_scorer(
    design: str, engine: Engine, steps: Callable[..., Steps], **options: Any
) -> Scorer:
    """A `Scorer` of context recall runs whose steps are `steps(passages, ground_truth, ...)`."""
    scorer_id = f"context-recall-scorer@{design}"

    def run_steps(row: Fields) -> Steps:
        ground_truth, context = row.get("ground_truth"), row.get("context")
        if ground_truth is None or (isinstance(ground_truth, str) and not ground_truth.strip()):
            return ScoreResult(
                scorer=scorer_id,
                score=0.0,
                reason="No ground truth was given: score 0.",
                axes={"recall": 0.0, "recall_soft": 0.0},
            )
        if not isinstance(ground_truth, str):
            raise InputError(f"ground_truth: must be a string, got {type(ground_truth).__name__}")
        passages = [context] if isinstance(context, str) else context
        if not isinstance(passages, list) or not all(isinstance(p, str) for p in passages):
            raise InputError("context: each run needs its own context, a list of strings")
        if not passages:
            raise InputError("context: the run's context has no passages")
        return (yield from steps(passages, ground_truth, scorer_id=scorer_id, **options))

    return Scorer(scorer_id, engine, run_steps, options=options)


Relay = Callable[[list[JudgeRequest]], tuple[list[JudgeRequest], Callable[[list[Any]], list[Any]]]]
"""`(the product's requests) -> (the requests to send, replies sent -> the product's replies)`."""


def relayed(steps: Steps, relay: Relay) -> Generator[list[JudgeRequest], Any, Any]:
    """The product's `steps`, each wave of requests passed through `relay` on its way to the
    judge and its replies on their way back; the product's result (also one scored without a
    judge call)."""
    try:
        requests = next(steps)
    except StopIteration as done:
        return done.value
    while True:
        sent, back = relay(requests)
        replies = yield sent
        try:
            requests = steps.send(back(replies))
        except StopIteration as done:
            return done.value


ALIGNMENT = "summarization.alignment"
"""The tag of the product's alignment checks, the ones the alignment trials ask again."""
COVERAGE = "summarization.coverage"
ATTRIBUTION = "context_recall.attribution"

PRODUCT_AXES = {
    ALIGNMENT: ("alignment", "supported"),
    COVERAGE: ("coverage", "answered"),
    ATTRIBUTION: ("recall", "supported"),
}
"""A check's tag -> the axis its verdicts make and the verdict's boolean field."""


def asked_again(
    steps: Steps, tag: str, again: Callable[[JudgeRequest], JudgeRequest]
) -> Generator[list[JudgeRequest], Any, Any]:
    """The product's `steps`, each check of `tag` also asked as `again(check)` and that answer
    used; the product's own verdicts on the same items kept as `<axis>_product` and
    `<axis>_soft_product` (`with_product`: a trial's paired reading, the change alone)."""
    product: list[Any] = []

    def relay(requests: list[JudgeRequest]) -> tuple[list[JudgeRequest], Any]:
        checks = [i for i, r in enumerate(requests) if r.tag == tag]

        def back(sent: list[Any]) -> list[Any]:
            replies, asked = list(sent[: len(requests)]), sent[len(requests) :]
            for i, reply in zip(checks, asked, strict=True):
                product.append(replies[i])
                replies[i] = reply
            return replies

        return [*requests, *(again(requests[i]) for i in checks)], back

    result = yield from relayed(steps, relay)
    return with_product(result, product, tag)


def alignment_trial(product: Scorer, again: Callable[[JudgeRequest], JudgeRequest]) -> Scorer:
    """The `product` scorer with each alignment check also asked as `again(check)`
    (`asked_again`): a trial design of one change to that check."""
    return dataclasses.replace(
        product, steps_fn=lambda row: asked_again(product.steps_fn(row), ALIGNMENT, again)
    )


def with_product(result: ScoreResult, product: list[Any], tag: str = ALIGNMENT) -> ScoreResult:
    """`result` with the product's axes of the `tag` checks (`PRODUCT_AXES`), from its
    verdicts `product` on the same items."""
    axis, field = PRODUCT_AXES[tag]
    axes = dict(result.axes or {})
    if axis not in axes:
        return result
    if not product:  # nothing was checked: the product's axes are the design's
        axes[f"{axis}_product"] = axes[axis]
        if f"{axis}_soft" in axes:
            axes[f"{axis}_soft_product"] = axes[f"{axis}_soft"]
        return result.model_copy(update={"axes": axes})
    axes[f"{axis}_product"] = share([getattr(v, field) for v in product])
    if all(v.p is not None for v in product):
        axes[f"{axis}_soft_product"] = sum(v.p for v in product) / len(product)
    return result.model_copy(update={"axes": axes})


def empty_summary(scorer_id: str) -> ScoreResult:
    """A blank summary: score 0 on every axis without a judge call (as the product does)."""
    return ScoreResult(
        scorer=scorer_id,
        score=0.0,
        reason="The summary is empty: score 0.",
        axes=dict.fromkeys(SUMMARIZATION_AXES, 0.0),
    )


def share(flags: Sequence[bool]) -> float:
    """The share of true flags; 0 when there are none (as the product's axes)."""
    return sum(flags) / len(flags) if flags else 0.0


def summarization_result(
    scorer_id: str,
    axes: dict[str, float | None],
    scale: float,
    preprocess: dict[str, Any],
    analyze: dict[str, Any],
    reason: str,
) -> ScoreResult:
    """`score = min(alignment, coverage) * scale`; soft axes kept only when both are known."""
    kept = {k: float(v) for k, v in axes.items() if v is not None}
    if "alignment_soft" not in kept or "coverage_soft" not in kept:
        kept.pop("alignment_soft", None)
        kept.pop("coverage_soft", None)
    score = min(kept["alignment"], kept["coverage"]) * scale
    why = f"Score {score:.2f} (alignment {kept['alignment']:.2f}, coverage {kept['coverage']:.2f})."
    return ScoreResult(
        scorer=scorer_id,
        score=score,
        reason=f"{why} {reason}".strip(),
        preprocess_step_result=preprocess,
        analyze_step_result=analyze,
        axes=kept,
    )


def recall_result(
    scorer_id: str,
    recall: float,
    soft: float | None,
    scale: float,
    preprocess: dict[str, Any],
    analyze: dict[str, Any],
) -> ScoreResult:
    """`score = recall * scale`; `recall_soft` only when known."""
    axes = {"recall": recall}
    if soft is not None:
        axes["recall_soft"] = soft
    return ScoreResult(
        scorer=scorer_id,
        score=recall * scale,
        reason=f"Recall {recall * scale:.2f}.",
        preprocess_step_result=preprocess,
        analyze_step_result=analyze,
        axes=axes,
    )
