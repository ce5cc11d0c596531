"""Context recall scorer: the share of a ground-truth answer's claims attributable to the
retrieved context.

Read top-down, this is the reference pipeline (docs/SEMANTICS.md §1.3):
prompts, the factory, the two requests, the score and the reason, and `_steps`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

from evalgpu.engines.base import JudgeRequest
from evalgpu.messages import is_agent_run
from evalgpu.prompting import fence, judge_chat, numbered
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.scorers._scorer import Scorer, callable_name, digest, resolve_engine
from evalgpu.verdicts import (
    CLAIM_CHARS,
    MAX_CLAIMS,
    REASON_CHARS,
    SUMMARY_REASON_CHARS,
    Attribution,
    AttributionVerdict,
    Claims,
    Reason,
    attribution_schema,
    budget,
)

__all__ = ["create_context_recall_scorer"]

SCORER_ID = "context-recall-scorer"

# Prompts. The claims prompt sees the ground truth alone, so it is one request per distinct
# ground truth. The attribution prompt puts the passages first: every ground truth checked
# against the same retrieved context shares that prefix.

CLAIMS_TASK = f"""\
Task: break the answer into its atomic claims, at most {MAX_CLAIMS}, in the order they appear. \
Each claim is one self-contained fact that can be checked on its own (replace pronouns by the \
names they stand for), written in the language of the answer. Keep numbers, dates and names \
exactly as written."""

ATTRIBUTION_TASK = """\
Task: for each claim, in the order given, decide whether the numbered passages support it. \
attributed is true only when the passages state the claim or directly imply it; numbers, dates \
and names must match exactly, and an approximation of a precise fact is not support. What you \
know about the world does not count. Copy the claim, give a short reason that points at the \
passage, then the verdict, and list the numbers of the passages that support it (none when \
not attributed)."""

REASON_TASK = """\
Task: explain this context recall score in two or three sentences for the person who built \
the retriever: which claims of the answer the context covers, which it misses, and which \
passages supported the covered claims."""

ReasonMode = Literal["template", "model"]


def create_context_recall_scorer(
    model: Any = None,
    *,
    context: Sequence[str] | str | None = None,
    context_extractor: Callable[[Any, Any], Sequence[str]] | None = None,
    scale: float = 1.0,
    reason: ReasonMode = "template",
) -> Scorer:
    """Create the context recall scorer.

    Args:
        model: an `Engine`, a model folder or preset name, or None for the default model.
        context: the retrieved passages (a single string is one passage).
        context_extractor: `(input, output) -> list[str]`, used only for agent-shaped runs.
        scale: the score lies in [0, scale] (> 0).
        reason: "template" builds the reason without a model call; "model" asks the judge.

    Returns:
        A `Scorer` with id "context-recall-scorer". Its `run` needs a `ground_truth`.

    Raises:
        ValueError: neither `context` nor `context_extractor`, `context == []`, or an option
            out of range (before any model is loaded).
    """
    if context is None and context_extractor is None:
        raise ValueError("context or context_extractor is required")
    if context is not None and len(context) == 0:
        raise ValueError("context must not be empty, got []")
    if context_extractor is not None and not callable(context_extractor):
        raise ValueError("context_extractor must be callable")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    if reason not in ("template", "model"):
        raise ValueError(f"reason must be 'template' or 'model', got {reason!r}")
    steps = partial(
        _steps, context=context, context_extractor=context_extractor, scale=scale, reason=reason
    )
    options: dict[str, Any] = {"scale": float(scale)}
    if reason != "template":
        options["reason"] = reason
    if context is not None:
        options["context"] = digest(json.dumps(context))
    if context_extractor is not None:
        options["context_extractor"] = callable_name(context_extractor)
    return Scorer(
        SCORER_ID,
        resolve_engine(model),
        steps,
        per_run_fields=frozenset({"context"}),
        fallbacks=frozenset({"context"}),
        options=options,
    )


def claims_request(ground_truth: str) -> JudgeRequest:
    """The ground truth's atomic claims (nothing else is in this prompt)."""
    user = f"{fence('answer', ground_truth)}\n\n{CLAIMS_TASK}"
    return JudgeRequest(
        tag="context_recall.claims",
        messages=judge_chat(user),
        schema=Claims,
        max_tokens=budget(MAX_CLAIMS, CLAIM_CHARS),
    )


def attribution_request(passages: list[str], claims: list[str]) -> JudgeRequest:
    """Each claim checked against the numbered passages."""
    context = "\n\n".join(f"Passage {i}:\n{fence('passage', p)}" for i, p in enumerate(passages, 1))
    user = f"{context}\n\n{fence('claims', numbered(claims))}\n\n{ATTRIBUTION_TASK}"
    return JudgeRequest(
        tag="context_recall.attribution",
        messages=judge_chat(user),
        schema=attribution_schema(len(passages)),
        max_tokens=budget(MAX_CLAIMS, CLAIM_CHARS + REASON_CHARS + 24),
    )


def reason_request(verdicts: list[dict[str, Any]], score: float) -> JudgeRequest:
    """A model-written reason, from the verdicts only (`reason="model"`)."""
    lines = numbered(
        [
            f"{v['claim']} -> "
            + (f"found in passages {v['passages']}" if v["attributed"] else "NOT found")
            for v in verdicts
        ]
    )
    user = f"Recall {score:.2f}.\n\n{fence('claims', lines)}\n\n{REASON_TASK}"
    return JudgeRequest(
        tag="context_recall.reason",
        messages=judge_chat(user),
        schema=Reason,
        max_tokens=budget(1, SUMMARY_REASON_CHARS),
    )


def match_verdicts(
    claims: list[str], verdicts: Sequence[AttributionVerdict]
) -> list[dict[str, Any]]:
    """One verdict per claim, matched by position; a missing verdict is not attributed."""
    entries = []
    for i, claim in enumerate(claims):
        if i < len(verdicts):
            v = verdicts[i]
            passages = sorted(set(v.passages)) if v.attributed else []
            entries.append(
                {
                    "claim": claim,
                    "attributed": v.attributed,
                    "reason": v.reason,
                    "passages": passages,
                }
            )
        else:
            entries.append(
                {
                    "claim": claim,
                    "attributed": False,
                    "reason": "no verdict was returned",
                    "passages": [],
                }
            )
    return entries


def template_reason(score: float, verdicts: list[dict[str, Any]], n_passages: int) -> str:
    """Which claims were found (with their passages), and which were missing."""
    found = [v for v in verdicts if v["attributed"]]
    missing = [v for v in verdicts if not v["attributed"]]
    lines = [
        f"Recall {score:.2f}: {len(found)} of {len(verdicts)} ground-truth claims "
        "found in the context."
    ]
    if n_passages == 0:
        lines.append("The context has no passages.")
    if found:
        lines.append(
            "Found: "
            + "; ".join(
                f'"{v["claim"]}" (passage{"s" if len(v["passages"]) > 1 else ""} '
                f"{', '.join(map(str, v['passages'])) or '?'})"
                for v in found
            )
        )
    if missing:
        lines.append("Missing: " + "; ".join(f'"{v["claim"]}" ({v["reason"]})' for v in missing))
    return "\n".join(lines)


def _steps(
    input: Any,
    output: Any,
    ground_truth: Any,
    *,
    context: Sequence[str] | str | None,
    context_extractor: Callable[[Any, Any], Sequence[str]] | None,
    scale: float,
    reason: ReasonMode,
) -> Steps:
    """One run through the pipeline; the runner batches its requests with other rows'."""
    # No ground truth: score 0 and say so, without a model call.
    if ground_truth is None or (isinstance(ground_truth, str) and not ground_truth.strip()):
        return ScoreResult(
            scorer=SCORER_ID,
            score=0.0,
            reason="No ground truth was given, so there are no claims to recall: score 0.",
            preprocess_step_result={"claims": []},
            analyze_step_result={"verdicts": []},
        )
    if not isinstance(ground_truth, str):
        raise InputError(f"ground_truth: must be a string, got {type(ground_truth).__name__}")

    # The context: the extractor only for agent-shaped runs, else the static context.
    passages = _passages(input, output, context, context_extractor)

    # Step 1: the ground truth's claims (one request per distinct ground truth).
    (extracted,) = yield [claims_request(ground_truth)]
    assert isinstance(extracted, Claims)
    claims = list(extracted.claims)

    # Step 2: attribution of each claim to the passages (no call without claims or passages).
    verdicts: list[dict[str, Any]] = []
    if claims and passages:
        (judged,) = yield [attribution_request(passages, claims)]
        assert isinstance(judged, Attribution)
        verdicts = match_verdicts(claims, judged.verdicts)
    elif claims:
        verdicts = match_verdicts(claims, [])
        for v in verdicts:
            v["reason"] = "the context has no passages"

    # Step 3: recall = attributed / claims, times the scale.
    attributed = sum(v["attributed"] for v in verdicts)
    score = attributed / len(claims) * scale if claims else 0.0
    if not claims:
        why = "The ground truth yields no claims to recall: score 0."
    elif reason == "model":
        (written,) = yield [reason_request(verdicts, score)]
        assert isinstance(written, Reason)
        why = written.reason
    else:
        why = template_reason(score, verdicts, len(passages))
    return ScoreResult(
        scorer=SCORER_ID,
        score=score,
        reason=why,
        preprocess_step_result={"claims": claims},
        analyze_step_result={"verdicts": verdicts},
    )


def _passages(
    input: Any,
    output: Any,
    context: Sequence[str] | str | None,
    context_extractor: Callable[[Any, Any], Sequence[str]] | None,
) -> list[str]:
    if context_extractor is not None and is_agent_run(input, output):
        try:
            got: Any = context_extractor(input, output)
        except Exception as exc:
            raise InputError(
                f"context: context_extractor raised {type(exc).__name__}: {exc}"
            ) from exc
        where = "context_extractor returned"
    elif context is not None:
        got, where = context, "context is"
    else:
        raise InputError(
            "context: context_extractor applies to agent-shaped runs only, "
            "and no static context was given"
        )
    if isinstance(got, str):
        got = [got]
    if not isinstance(got, (list, tuple)) or not all(isinstance(p, str) for p in got):
        raise InputError(f"context: {where} not a list of strings ({type(got).__name__})")
    return list(got)
