"""`evalgpu-fewshot`: the product's pipeline, its alignment checks shown worked examples first.

A trial of one change to how the judge is asked (issue 19): before an alignment check, the chat
holds four checks of the same form already answered (a user turn built by the product's own
`check_request`, an assistant turn with the verdict), about one short invented source: a
paraphrase that is supported, a number changed (not supported), a plausible detail the source
does not give (not supported), and a fact the source implies without stating it in those words
(supported). Everything else is the product's: the claims, the questions, the check's own
prompt, the schema and the axes.

Why: with the product's prompt the default judge's `p` ranks the faithful summary of a FRANK
pair first in 0.65 of the 60 reported pairs, and a mean over claims dilutes the one wrong claim
of an unfaithful summary (docs/BENCHMARKS.md). A small judge follows a demonstrated standard
more closely than a described one: the demonstrations show, in the check's own format, that
a changed number and an added detail are "false" and a paraphrase is "true". The examples were
written for this trial from the kinds of error FRANK annotates (entity, number, out-of-article
detail), before any FRANK row was looked at; none of them is a dev row.

One run records both: each alignment check is asked as the product asks it and with the
examples. The design's axes are the examples' (so `--compare` pairs it with a product run), and
`alignment_product` / `alignment_soft_product` are the product's axes from the same run, the
same claims: `paired(kind, rows, "alignment_soft", rows, "alignment_soft_product")` is the
effect of the examples alone. Attribution checks (a different schema) are the product's.

Cost: one more check per claim, whose prompt is the examples (about 1,100 tokens, the same for
every check of every row: an engine's prefix cache computes them once) and the product's check.

Measured on 35 FRANK pairs (docs/DECISIONS.md, 2026-12-04, "worked examples before each
alignment check"): the soft ranking unchanged (+0.000 pair win),
every `p` moved toward "yes", and the hard verdicts worse (-0.100): not shipped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.designs._common import ALIGNMENT, alignment_trial
from evalgpu.engines.base import JudgeRequest
from evalgpu.prompting import fence
from evalgpu.scorers import check_request
from evalgpu.scorers.summarization import ASK_SUPPORTED
from evalgpu.verdicts import Supported

NAME = "evalgpu-fewshot"

TAG = ALIGNMENT

EXAMPLE_SOURCE = (
    "Harbour City council voted on Tuesday to close the Elm Street library for eight months "
    "while its roof is replaced. The work will cost 1.3 million dollars, paid from the city's "
    "maintenance fund. During the closure, the library's 40,000 books will be lent from a "
    "temporary site in the town hall. Council member Rosa Diaz, who proposed the plan, said "
    "the branch should reopen in the spring of next year."
)
"""An invented source (no dev row): short, with numbers, names and a stated plan."""

EXAMPLES = (
    (
        "Harbour City council decided to shut the Elm Street library so its roof can be replaced.",
        True,
    ),
    ("The Elm Street library will be closed for six months.", False),
    ("The library's roof was damaged in a storm last winter.", False),
    ("Rosa Diaz expects the Elm Street library to reopen next spring.", True),
)
"""(claim, verdict): a paraphrase; a number changed; a plausible detail the source does not
give; a statement the source makes in other words. Two of each verdict, not alternating."""


def examples_chat() -> tuple[dict[str, str], ...]:
    """The demonstration turns: each example asked exactly as the product asks a check, then
    answered with the verdict in the reply format of `Supported`."""
    source = fence("source", EXAMPLE_SOURCE)
    turns = []
    for claim, verdict in EXAMPLES:
        request = check_request(TAG, source, "source", ("claim", claim), ASK_SUPPORTED, Supported)
        turns.append(request.messages[-1])
        turns.append({"role": "assistant", "content": f'{{"supported": {str(verdict).lower()}}}'})
    return tuple(turns)


EXAMPLE_TURNS = examples_chat()
"""The turns every alignment check is shown, built once (the same for every check)."""


def design(kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """The product's scorer, its alignment checks shown the examples (the module's docstring)."""
    from benchmarks.designs import evalgpu_design  # here: designs imports this module

    product = evalgpu_design(kind, engine, scale, max_questions)
    return alignment_trial(product, shown_examples)


def shown_examples(request: JudgeRequest) -> JudgeRequest:
    """`request` (an alignment check) with the demonstration turns after its system message."""
    system, *rest = request.messages
    return dataclasses.replace(request, messages=[system, *EXAMPLE_TURNS, *rest])
