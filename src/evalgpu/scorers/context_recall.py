"""Context recall scorer: the share of a ground-truth answer's claims attributable to the
retrieved context.

Read top-down, this is the reference pipeline (docs/SEMANTICS.md §1.3): prompts, the factory,
the requests, the score and the reason, and `_steps`: the ground truth's claims, listed from the
ground truth alone, then each claim checked against the numbered passages in a call of its own,
whose verdict is the judge's first token, read as a probability `p`
(`evalgpu.scorers._checks`: why the judge is asked this way).

Beyond the reference:

- Soft verdicts. Every verdict carries `p`, the judge's probability that the claim is
  attributed (None when the engine cannot read it). `axes` holds `recall`, the hard score
  before scaling, and `recall_soft`, the mean `p` (absent when any `p` is missing): named
  after the score they are, with the same `_soft` suffix as the summarization axes.
  `verdicts="soft"` scores `recall_soft * scale`.
- Duplicates are judged once: a claim identical to an earlier one after trimming and case
  folding is dropped before the attribution call, and
  `preprocessStepResult["duplicates_dropped"] == {"claims": n}` says how many.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, cast

from evalgpu._options import SCALE, check_scale
from evalgpu.calibration import CalibrationSpec
from evalgpu.engines.base import JudgeRequest
from evalgpu.messages import extract_tool_results, is_agent_run
from evalgpu.prompting import fence, judge_chat, numbered
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.rows import Fields, kind
from evalgpu.scorers._checks import CHECK_TOKENS, check_request
from evalgpu.scorers._checks import claims_request as _claims
from evalgpu.scorers._scorer import (
    Scorer,
    callable_name,
    digest,
    resolve_calibration,
    resolve_engine,
    resolve_verdicts,
)
from evalgpu.verdicts import (
    MAX_PASSAGES_CITED,
    SUMMARY_REASON_CHARS,
    VERDICT_MODES,
    Attributed,
    Claims,
    Reason,
    SoftVerdictError,
    VerdictMode,
    attribution_schema,
    budget,
    distinct,
    mean_p,
    p_fields,
)

__all__ = ["create_context_recall_scorer", "row_context_scorer"]

SCORER_ID = "context-recall-scorer"

# Prompts. The claims prompt sees the ground truth alone, so it is one request per distinct
# ground truth. Each attribution check puts the passages first: every claim checked against the
# same retrieved context shares that prefix.

ASK_ATTRIBUTED = (
    "Is every fact of this claim stated or directly implied by the passages? "
    "If so, which passages support it?"
)

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
    scale: float = SCALE,
    reason: ReasonMode = "template",
    verdicts: VerdictMode | None = None,
    calibration: CalibrationSpec = None,
) -> Scorer:
    """Create the context recall scorer.

    Args:
        model: an `Engine`, a model folder or preset name, or None for the default model.
        context: the retrieved passages (a single string is one passage).
        context_extractor: `(input, output) -> list[str]`, used only for agent-shaped runs.
        scale: the score lies in [0, scale] (> 0).
        reason: "template" builds the reason without a model call; "model" asks the judge.
        verdicts: "hard" (the reference: the share of attributed claims) or "soft" (the mean
            probability of attributed; needs an engine that reads its logits, else each row
            is an error); None: the judge's measured default (its preset's `verdicts`, else
            "hard").
        calibration: a calibration file (or `Calibration`) its attribution verdicts go
            through (`evalgpu.calibration`: `python -m evalgpu calibrate` fits one); False:
            the judge's own; None: the one the judge's preset names, if any.

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
    return _scorer(model, scale, reason, verdicts, calibration, context, context_extractor)


def row_context_scorer(
    model: Any = None,
    *,
    scale: float = SCALE,
    reason: ReasonMode = "template",
    verdicts: VerdictMode | None = None,
    calibration: CalibrationSpec = None,
) -> Scorer:
    """The context recall scorer of a dataset whose every row brings its own `context` (the
    command line's): an agent-shaped row without one has its tool results as the passages, and
    any other row without one is an input error. Options as `create_context_recall_scorer`'s.
    """
    return _scorer(model, scale, reason, verdicts, calibration)


def _scorer(
    model: Any,
    scale: float,
    reason: ReasonMode,
    verdicts: VerdictMode | None,
    calibration: CalibrationSpec,
    context: Sequence[str] | str | None = None,
    context_extractor: Callable[[Any, Any], Sequence[str]] | None = None,
) -> Scorer:
    """The scorer, its options checked (both factories': `context` is checked by the public one)."""
    check_scale(scale)
    if reason not in ("template", "model"):
        raise ValueError(f"reason must be 'template' or 'model', got {reason!r}")
    if verdicts is not None and verdicts not in VERDICT_MODES:
        raise ValueError(f"verdicts must be 'hard' or 'soft', got {verdicts!r}")
    engine = resolve_engine(model)
    verdicts = resolve_verdicts(verdicts, engine)
    calibrated = resolve_calibration(calibration, engine)
    steps = partial(
        _steps,
        context=context,
        context_extractor=context_extractor,
        scale=scale,
        reason=reason,
        verdicts=verdicts,
        engine_name=engine.name,
    )
    options: dict[str, Any] = {"scale": float(scale)}
    if reason != "template":
        options["reason"] = reason
    if verdicts != "hard":
        options["verdicts"] = verdicts
    if context is not None:
        options["context"] = digest(json.dumps(context))
    if context_extractor is not None:
        options["context_extractor"] = callable_name(context_extractor)
    if calibrated is not None:
        options["calibration"] = calibrated.option()
    return Scorer(SCORER_ID, engine, steps, options=options, calibration=calibrated)


def claims_request(ground_truth: str) -> JudgeRequest:
    """The ground truth's atomic claims (nothing else is in this prompt)."""
    return _claims("context_recall.claims", "answer", ground_truth)


def numbered_passages(passages: Sequence[str]) -> str:
    """The passages, each fenced and numbered from 1, as every attribution prompt shows them."""
    return "\n\n".join(f"Passage {i}:\n{fence('passage', p)}" for i, p in enumerate(passages, 1))


def attribution_request(passages: list[str], claim: str) -> JudgeRequest:
    """One claim checked against the numbered passages: the verdict, then the passages cited."""
    context = numbered_passages(passages)
    return check_request(
        "context_recall.attribution",
        context,
        "passages",
        ("claim", claim),
        ASK_ATTRIBUTED,
        attribution_schema(len(passages)),
        max_tokens=CHECK_TOKENS + 2 * min(len(passages), MAX_PASSAGES_CITED),
    )


def reason_request(verdicts: list[dict[str, Any]], score: float) -> JudgeRequest:
    """A model-written reason, from the verdicts only (`reason="model"`).

    `score` is the scaled recall that set the score (hard or soft).
    """
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


def verdict_entry(claim: str, verdict: Attributed) -> dict[str, Any]:
    """A claim's record: the verdict, its `p`, and the passages cited (none when not
    attributed: a citation beside a "no" is dropped)."""
    return {
        "claim": claim,
        "attributed": verdict.supported,
        "reason": "found in the passages" if verdict.supported else "not found in the passages",
        "passages": sorted(set(verdict.passages)) if verdict.supported else [],
        **p_fields(verdict),
    }


def template_reason(
    score: float, verdicts: list[dict[str, Any]], n_passages: int, mode: VerdictMode = "hard"
) -> str:
    """Which claims were found (with their passages), and which were missing.

    `score` is the (scaled) score; the first line says which verdicts made it.
    """
    found = [v for v in verdicts if v["attributed"]]
    missing = [v for v in verdicts if not v["attributed"]]
    how = "hard verdicts" if mode == "hard" else "soft verdicts, mean p(attributed)"
    lines = [
        f"Recall {score:.2f} ({how}): {len(found)} of {len(verdicts)} ground-truth claims "
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
        lines.append(
            "Missing: "
            + "; ".join(
                f'"{v["claim"]}" ({v["reason"]}'
                + ("" if v.get("p") is None else f"; p={v['p']:.2f}")
                + ")"
                for v in missing
            )
        )
    return "\n".join(lines)


def _steps(
    row: Fields,
    *,
    context: Sequence[str] | str | None,
    context_extractor: Callable[[Any, Any], Sequence[str]] | None,
    scale: float,
    reason: ReasonMode,
    verdicts: VerdictMode = "hard",
    engine_name: str = "?",
) -> Steps:
    """One run through the pipeline; the runner batches its requests with other rows'."""
    # No ground truth: score 0 and say so, without a model call.
    ground_truth = row.get("ground_truth", "groundTruth")
    if ground_truth is None or (isinstance(ground_truth, str) and not ground_truth.strip()):
        return ScoreResult(
            scorer=SCORER_ID,
            score=0.0,
            reason="No ground truth was given, so there are no claims to recall: score 0.",
            preprocess_step_result={"claims": [], "duplicates_dropped": {"claims": 0}},
            analyze_step_result={"verdicts": []},
            axes={"recall": 0.0, "recall_soft": 0.0},
        )
    if not isinstance(ground_truth, str):
        raise InputError(f"ground_truth: must be a string, got {type(ground_truth).__name__}")
    passages = _passages(row, context, context_extractor)

    # Step 1: the ground truth's claims (one request per distinct ground truth); a repeated
    # claim is judged once.
    (extracted,) = yield [claims_request(ground_truth)]
    assert isinstance(extracted, Claims)
    claims, dropped = distinct(list(extracted.claims))

    # Step 2: each claim checked against the passages, one call each (none without passages).
    judged_verdicts: list[dict[str, Any]] = []
    if claims and passages:
        judged = yield [attribution_request(passages, c) for c in claims]
        judged_verdicts = [
            verdict_entry(c, v) for c, v in zip(claims, cast(list[Attributed], judged), strict=True)
        ]
    else:
        # No passage can support a claim: certain, without asking a judge.
        judged_verdicts = [
            {
                "claim": c,
                "attributed": False,
                "reason": "the context has no passages",
                "passages": [],
                "p": 0.0,
            }
            for c in claims
        ]

    # Step 3: recall = attributed / claims (or the mean p), times the scale.
    attributed = sum(v["attributed"] for v in judged_verdicts)
    axes = {"recall": attributed / len(claims) if claims else 0.0}
    soft = mean_p(judged_verdicts)
    if soft is not None:
        axes["recall_soft"] = soft
    if verdicts == "soft" and soft is None:
        raise SoftVerdictError("context_recall.attribution", engine_name)
    recall = axes["recall" if verdicts == "hard" else "recall_soft"]
    score = recall * scale
    if not claims:
        why = "The ground truth yields no claims to recall: score 0."
    elif reason == "model":
        (written,) = yield [reason_request(judged_verdicts, score)]
        assert isinstance(written, Reason)
        why = written.reason
    else:
        why = template_reason(score, judged_verdicts, len(passages), verdicts)
    return ScoreResult(
        scorer=SCORER_ID,
        score=score,
        reason=why,
        preprocess_step_result={"claims": claims, "duplicates_dropped": {"claims": dropped}},
        analyze_step_result={"verdicts": judged_verdicts},
        axes=axes,
    )


def _passages(
    row: Fields,
    context: Sequence[str] | str | None,
    context_extractor: Callable[[Any, Any], Sequence[str]] | None,
) -> list[str]:
    """The run's passages, read and checked from its fields (the one place).

    The extractor for agent-shaped runs; else the row's own `context`; else the scorer's
    static context; else (agent-shaped runs) the results of its finished tool calls.
    """
    input_, output = row.get("input"), row.get("output")
    agent = is_agent_run(input_, output)
    own = row.get("context")
    if context_extractor is not None and agent:
        try:
            got: Any = context_extractor(input_, output)
        except Exception as exc:
            raise InputError(
                f"context: context_extractor raised {type(exc).__name__}: {exc}"
            ) from exc
        where = "context_extractor returned"
    elif own is not None:
        return _own_passages(own)
    elif context is not None:
        got, where = context, "context is"
    elif agent and (results := extract_tool_results(output)):
        return _own_passages(
            [
                r["result"] if isinstance(r["result"], str) else json.dumps(r["result"])
                for r in results
            ]
        )
    elif context_extractor is not None:
        raise InputError(
            "context: context_extractor applies to agent-shaped runs only, "
            "and no static context was given"
        )
    else:
        raise row.missing("context")
    if isinstance(got, str):
        got = [got]
    if not isinstance(got, (list, tuple)) or not all(isinstance(p, str) for p in got):
        raise InputError(f"context: {where} not a list of strings ({type(got).__name__})")
    return list(got)


def _own_passages(context: Any) -> list[str]:
    """A row's own context (one string is one passage), with at least one passage of text."""
    if isinstance(context, str):
        context = [context]
    if not isinstance(context, list):
        raise InputError(f"context: must be a list of strings or a string, got {kind(context)}")
    wrong = [p for p in context if not isinstance(p, str)]
    if wrong:
        raise InputError(f"context: must be a list of strings, got a list holding {kind(wrong[0])}")
    if not any(p.strip() for p in context):
        raise InputError("context: blank (no passage has text)")
    return context
