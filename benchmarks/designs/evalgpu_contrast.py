"""`evalgpu-contrast`: the product's pipeline, each check's `p` contrasted with the judge's prior.

A trial of a structural change for the world-knowledge failure of issue 19 (wording did not fix
it: `evalgpu-closed-book`). The default judge finds a true-in-the-world claim supported by
evidence that does not state it (`examples/context_recall.jsonl`, `eiffel-missed`: "The Eiffel
Tower was completed in 1889" against a passage about the Louvre, p 0.55), because what it knows
leaks into its verdict. This design measures that leak and takes it out.

Every alignment and attribution check is asked twice: as the product asks it (`p_e`, with the
evidence), and with the evidence emptied (`p_0`: the same prompt, the same claim, an empty
source or one empty passage: what the judge says from what it knows). The verdict's `p` is
then the context-aware contrast of Shi et al. (2023, "Trusting Your Evidence: Hallucinate Less
with Context-aware Decoding"), on the verdict's log-odds:

    logit(p) = (1 + ALPHA) * logit(p_e) - ALPHA * logit(p_0)

so a claim the evidence does not make more likely than the judge's prior loses support, and a
claim the evidence states keeps it. `supported` is `p >= 0.5` (the product's hard verdict is the
judge's greedy token, the same threshold on `p_e`). ALPHA is the paper's default, 0.5, fixed
before any row was scored; the axes also record ALPHA = 1 (`*_soft_alpha1`), the evidence alone
(`*_soft_evidence`, the product's `p`) and the prior alone (`*_soft_prior`), so that one run
holds every variant on the same rows.

Cost: one more check per claim, whose prompt is the task, the claim and no evidence (short, and
the same prefix for every claim of every row).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Generator
from typing import Any

from benchmarks.designs._common import relayed
from evalgpu.engines.base import JudgeRequest
from evalgpu.prompting import fence
from evalgpu.results import ScoreResult, Steps
from evalgpu.scorers import CHECK_TASK
from evalgpu.scorers.context_recall import numbered_passages

NAME = "evalgpu-contrast"

ALPHA = 0.5
"""The weight of the contrast (Shi et al. 2023's default), fixed before any row was scored."""

EMPTY = {
    "summarization.alignment": ("source", fence("source", "")),
    "context_recall.attribution": ("passages", numbered_passages([""])),
}
"""Step tag -> (what the evidence is called, the evidence emptied)."""

AXES = {"summarization.alignment": "alignment", "context_recall.attribution": "recall"}

EPS = 1e-6
"""`p` is clipped to [EPS, 1 - EPS] before its log-odds are taken (a float32 softmax can give
exactly 0 or 1)."""


def design(kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """The product's scorer, its checks contrasted with the prior (see the module's docstring)."""
    from benchmarks.designs import evalgpu_design  # here: designs imports this module

    product = evalgpu_design(kind, engine, scale, max_questions)

    def steps(row: Any) -> Steps:
        return contrasted(product.steps_fn(row))

    return dataclasses.replace(product, steps_fn=steps)


def contrast(p_evidence: float, p_prior: float, alpha: float = ALPHA) -> float:
    """`sigmoid((1 + alpha) * logit(p_evidence) - alpha * logit(p_prior))`."""

    def logit(p: float) -> float:
        p = min(max(p, EPS), 1.0 - EPS)
        return math.log(p / (1.0 - p))

    z = (1.0 + alpha) * logit(p_evidence) - alpha * logit(p_prior)
    return 1.0 / (1.0 + math.exp(-z))


def prior_request(request: JudgeRequest) -> JudgeRequest:
    """`request` (an alignment or attribution check) with its evidence emptied."""
    name, empty = EMPTY[request.tag]
    user = request.messages[-1]
    _evidence, sep, tail = user["content"].partition(f"\n\n{CHECK_TASK.format(name=name)}")
    assert sep, f"{request.tag}: the check's task is not in the prompt"
    messages = [*request.messages[:-1], {**user, "content": empty + sep + tail}]
    return dataclasses.replace(request, messages=messages)


def contrasted(steps: Steps) -> Generator[list[JudgeRequest], Any, Any]:
    """The product's steps, each check's verdict replaced by its contrast with the prior."""
    seen: dict[str, list[tuple[float, float]]] = {}  # axis -> (p_e, p_0) of each check

    def relay(requests: list[JudgeRequest]) -> tuple[list[JudgeRequest], Any]:
        checks = [i for i, r in enumerate(requests) if r.tag in EMPTY]

        def back(sent: list[Any]) -> list[Any]:
            replies, priors = list(sent[: len(requests)]), sent[len(requests) :]
            for i, prior in zip(checks, priors, strict=True):
                verdict = replies[i]
                if verdict.p is None or prior.p is None:
                    continue  # no p: the product's verdict stands (and no soft axes)
                seen.setdefault(AXES[requests[i].tag], []).append((verdict.p, prior.p))
                p = contrast(verdict.p, prior.p)
                replies[i] = verdict.model_copy(update={"supported": p >= 0.5})
                replies[i].p = p
            return replies

        return [*requests, *(prior_request(requests[i]) for i in checks)], back

    result = yield from relayed(steps, relay)
    return with_variants(result, seen) if seen else result


def with_variants(result: ScoreResult, seen: dict[str, list[tuple[float, float]]]) -> ScoreResult:
    """`result` with the other variants' soft axes: ALPHA = 1, the evidence alone, the prior."""
    axes = dict(result.axes or {})
    for axis, pairs in seen.items():
        if f"{axis}_soft" not in axes:
            continue
        variants = {
            "alpha1": [contrast(e, z, 1.0) for e, z in pairs],
            "evidence": [e for e, _ in pairs],
            "prior": [z for _, z in pairs],
        }
        for name, ps in variants.items():
            axes[f"{axis}_soft_{name}"] = sum(ps) / len(ps)
    return result.model_copy(update={"axes": axes})
