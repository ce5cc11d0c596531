"""The same judge, other designs, side by side (issue 19 item 5).

`DESIGNS[name](kind, engine, scale, max_questions)` returns a scorer (a `Scorer`: `run_batch`,
`steps`, `id`) for one kind of file as agreement.py's `kind_of` names it: "faithfulness" and
"coverage" files are scored by a summarization design (runs `{"input": source, "output":
summary}`), "attribution" files by a context recall design (runs `{"input", "ground_truth",
"context"}`). Every design gives the product's axes, so that agreement.py's metrics and
`--compare` read them unchanged: summarization `alignment`, `coverage`, `alignment_soft`,
`coverage_soft`; context recall `recall`, `recall_soft` (soft axes from the engine's `p`,
absent when it gives none); `score` is min(alignment, coverage) * scale, or recall * scale.

- `evalgpu`: the product's scorers, as the package has them.
- `mastra-1call`: the judge as it was at commit d4e0157 (`designs.mastra_1call`).
- `deepeval`: DeepEval's SummarizationMetric and ContextualRecall designs
  (`designs.deepeval_like`).
- `direct`: one yes/no question per summary and axis, read as p(yes) (`designs.direct`).
- `evalgpu-list`: the product's pipeline with each list of checks in one call
  (`designs.evalgpu_list`): one call per claim against one call for all claims.
- `evalgpu-closed-book`: the product's pipeline, its alignment and attribution checks asking
  for what the evidence itself states, "not what you know" (`designs.evalgpu_closed_book`).
- `evalgpu-contrast`: the product's pipeline, each alignment and attribution check's `p`
  contrasted with the judge's answer to the same check without the evidence
  (`designs.evalgpu_contrast`).
- `evalgpu-fewshot`: the product's pipeline, its alignment checks shown four answered checks
  of an invented source first (`designs.evalgpu_fewshot`).
- `evalgpu-retrieve`: the product's pipeline, each alignment check asked against the source
  sentences that share the claim's words (`designs.evalgpu_retrieve`).
- `evalgpu-coverage-summary`: the product's pipeline, each coverage question answered from the
  summary's text, as until 2026-12-07, instead of its claims (`designs.evalgpu_coverage_summary`).
- `evalgpu-passage-claims`: the product's pipeline, each attribution check asked against the
  passages' listed claims instead of their text (`designs.evalgpu_passage_claims`).

`benchmarks.designs.scripted:engine` is a scripted judge with rules for every design's requests
(`--backend benchmarks.designs.scripted:engine`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.designs import (
    deepeval_like,
    direct,
    evalgpu_closed_book,
    evalgpu_contrast,
    evalgpu_coverage_summary,
    evalgpu_fewshot,
    evalgpu_list,
    evalgpu_passage_claims,
    evalgpu_retrieve,
    mastra_1call,
)
from evalgpu import create_context_recall_scorer, create_summarization_scorer

__all__ = ["DEFAULT", "DESIGNS", "KINDS", "Factory", "make"]

Factory = Callable[[str, Any, float, int], Any]
"""`(kind, engine, scale, max_questions) -> scorer with run_batch(runs)`."""

KINDS = ("faithfulness", "coverage", "attribution")


def evalgpu_design(kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """The product's scorers (hard verdicts; the soft axes come with them)."""
    if kind == "attribution":
        # Every row brings its own context; the static one only satisfies the factory.
        return create_context_recall_scorer(
            engine, context=["(per row)"], scale=scale, verdicts="hard"
        )
    return create_summarization_scorer(
        engine, max_questions=max_questions, scale=scale, verdicts="hard"
    )


DESIGNS: dict[str, Factory] = {
    "evalgpu": evalgpu_design,
    mastra_1call.NAME: mastra_1call.design,
    deepeval_like.NAME: deepeval_like.design,
    direct.NAME: direct.design,
    evalgpu_list.NAME: evalgpu_list.design,
    evalgpu_closed_book.NAME: evalgpu_closed_book.design,
    evalgpu_contrast.NAME: evalgpu_contrast.design,
    evalgpu_fewshot.NAME: evalgpu_fewshot.design,
    evalgpu_retrieve.NAME: evalgpu_retrieve.design,
    evalgpu_coverage_summary.NAME: evalgpu_coverage_summary.design,
    evalgpu_passage_claims.NAME: evalgpu_passage_claims.design,
}
DEFAULT = "evalgpu"


def make(design: str, kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """`DESIGNS[design](kind, engine, scale, max_questions)`, with the names checked.

    Raises:
        ValueError: an unknown design or kind.
    """
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {design!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return DESIGNS[design](kind, engine, scale, max_questions)
