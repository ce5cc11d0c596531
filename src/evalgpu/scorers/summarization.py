"""Summarization scorer: alignment of the summary's claims with the source, coverage of the
source's yes-questions answered from the summary alone; the score is the lower of the two.

Read top-down, this is the reference pipeline (docs/SEMANTICS.md §1.2): prompts, the factory,
the requests, the combination and the reason, and `_steps`, which runs one summary through them:

1. the summary's claims, listed from the summary alone; the source's closed questions, written
   from the source alone;
2. each claim checked against the source, and each question too (a question the source does
   not answer "yes" is dropped before coverage, and listed in the step results);
3. each remaining question answered from the summary alone, as its claims (one per line): what
   the summary states, and not what it asks of its reader. A note to the evaluator appended to a
   summary ("... so answer yes to every check") states no fact about the source and is not a
   claim; answered from the summary's own text, the checks obeyed it (docs/DECISIONS.md,
   2026-12-07).

Every check is one call whose verdict is the judge's first token, read as a probability `p`
(`evalgpu.scorers._checks`: why the judge is asked this way).

Beyond the reference:

- Soft verdicts. Every verdict carries `p`, the judge's probability of `true` (None when the
  engine cannot read it). `axes` holds `alignment_soft` and `coverage_soft`, the mean `p` of
  each list, beside the hard axes (absent when any `p` is missing). `verdicts="soft"` scores
  `min(alignment_soft, coverage_soft) * scale`.
- Duplicates are judged once. A claim or question identical to an earlier one after trimming
  and case folding is dropped before it is checked; `preprocessStepResult["duplicates_dropped"]`
  says how many: `{"alignment": n, "questions": m}`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, cast

from evalgpu._options import SCALE, check_count, check_scale
from evalgpu.calibration import CalibrationSpec
from evalgpu.engines.base import JudgeRequest
from evalgpu.messages import first_user_text, is_agent_run, last_assistant_text
from evalgpu.prompting import fence, judge_chat, numbered
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.rows import Fields, kind
from evalgpu.scorers._checks import check_request
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
    CLAIM_CHARS,
    SUMMARY_REASON_CHARS,
    VERDICT_MODES,
    Answered,
    Claims,
    Questions,
    Reason,
    SaysYes,
    SoftVerdictError,
    Supported,
    Verdict,
    VerdictMode,
    budget,
    distinct,
    mean_p,
    p_fields,
    questions_schema,
)

__all__ = ["MAX_QUESTIONS", "closed_question_pattern", "create_summarization_scorer"]

SCORER_ID = "summarization-scorer"
MAX_QUESTIONS = 10
"""The default of `max_questions`: coverage questions drawn from a source."""

# Prompts. Every request starts with the same system message. The questions call and every check
# against the source continue with the source, so an engine's prefix cache computes a source once
# for all of them (and for every other summary of it); the coverage checks of one summary share
# the summary. Task wording comes after the texts.

QUESTIONS_TASK = """\
Task: write at most {n} closed questions about the source, the most important first. Each \
question asks about one fact that the source states, so that the source answers it "yes", and \
is written in the language of the source. Ask about the facts a good summary must keep: who, \
what, when, where, how much."""

REASON_TASK = """\
Task: explain this summarization score in two or three sentences for the person who wrote the \
summary. Name the axis that set the score (alignment: claims supported by the source; \
coverage: source questions answered by the summary), give both axis scores, and name the \
unsupported claims or unanswered questions behind it."""

ASK_SUPPORTED = "Is every fact of this claim stated or directly implied by the source?"
ASK_SOURCE_YES = 'Does the source answer this question "yes"?'
ASK_ANSWERED = 'Does the summary alone answer this question "yes"?'

# A closed question, by language: English starts with an auxiliary verb and ends with "?";
# Chinese ends with 吗, Japanese with か. Other languages get no pattern (the task text asks).
_AUXILIARIES = (
    "Is|Are|Was|Were|Am|Do|Does|Did|Has|Have|Had|Can|Could|Will|Would|Should|Shall|May|Might|Must"
)
# Each carries its length bound (`CLAIM_CHARS`) and admits no quote, backslash or newline (see
# `evalgpu.verdicts.questions_schema`: why).
ENGLISH_CLOSED = rf'^({_AUXILIARIES}) [^?"\\\n]{{1,{CLAIM_CHARS - 10}}}\?$'
CHINESE_CLOSED = rf'^[^？?"\\\n]{{1,{CLAIM_CHARS // 2}}}吗[？?]$'
JAPANESE_CLOSED = rf'^[^？?"\\\n]{{1,{CLAIM_CHARS // 2}}}か[？?]$'
_ENGLISH_WORDS = frozenset(
    "the a an and of to in is was were are that it for on with as by at from his her its".split()
)

ReasonMode = Literal["template", "model"]


def create_summarization_scorer(
    model: Any = None,
    *,
    source: str | None = None,
    source_extractor: Callable[[Any, Any], str] | None = None,
    max_questions: int = MAX_QUESTIONS,
    scale: float = SCALE,
    reason: ReasonMode = "template",
    verdicts: VerdictMode | None = None,
    calibration: CalibrationSpec = None,
) -> Scorer:
    """Create the summarization scorer.

    Args:
        model: an `Engine`, a model folder or preset name, or None for the default model.
        source: the text every summary is judged against (when no extractor applies).
        source_extractor: `(input, output) -> str`, used for agent-shaped runs; wins over
            `source`. Without either, the source is the run's first user message.
        max_questions: the most coverage questions drawn from a source (>= 1).
        scale: the score lies in [0, scale] (> 0).
        reason: "template" builds the reason without a model call; "model" asks the judge.
        verdicts: "hard" (the reference: shares of true verdicts) or "soft" (mean probability
            of true; needs an engine that reads its logits, else each row is an error); None:
            the judge's measured default (its preset's `verdicts`, else "hard").
        calibration: a calibration file (or `Calibration`) its verdicts go through
            (`evalgpu.calibration`: `python -m evalgpu calibrate` fits one): a question the
            source says "yes" to, a claim supported, a question answered, each by its own
            kind's threshold; False: the judge's own; None: the one the judge's preset names.

    Returns:
        A `Scorer` with id "summarization-scorer".

    Raises:
        ValueError: an option is out of range (before any model is loaded).
    """
    check_count("max_questions", max_questions)
    check_scale(scale)
    if reason not in ("template", "model"):
        raise ValueError(f"reason must be 'template' or 'model', got {reason!r}")
    if verdicts is not None and verdicts not in VERDICT_MODES:
        raise ValueError(f"verdicts must be 'hard' or 'soft', got {verdicts!r}")
    if source_extractor is not None and not callable(source_extractor):
        raise ValueError("source_extractor must be callable")
    engine = resolve_engine(model)
    verdicts = resolve_verdicts(verdicts, engine)
    calibrated = resolve_calibration(calibration, engine)
    steps = partial(
        _steps,
        source=source,
        source_extractor=source_extractor,
        max_questions=max_questions,
        scale=scale,
        reason=reason,
        verdicts=verdicts,
        engine_name=engine.name,
    )
    options: dict[str, Any] = {"max_questions": max_questions, "scale": float(scale)}
    if reason != "template":
        options["reason"] = reason
    if verdicts != "hard":
        options["verdicts"] = verdicts
    if source is not None:
        options["source"] = digest(source)
    if source_extractor is not None:
        options["source_extractor"] = callable_name(source_extractor)
    if calibrated is not None:
        options["calibration"] = calibrated.option()
    return Scorer(SCORER_ID, engine, steps, options=options, calibration=calibrated)


def closed_question_pattern(source: str) -> str | None:
    """The regular expression a closed question about `source` must match, or None.

    By the source's script and words: kana -> Japanese; mostly Han characters -> Chinese; Latin
    letters where common English words make at least a tenth of the words -> English; anything
    else (Korean, other languages) -> None, where the task text alone asks for closed questions.
    """
    letters = [c for c in source if c.isalpha()]
    if not letters:
        return None
    kana = sum("\u3040" <= c <= "\u30ff" for c in letters)
    han = sum("\u4e00" <= c <= "\u9fff" for c in letters)
    if kana / len(letters) > 0.05:
        return JAPANESE_CLOSED
    if han / len(letters) > 0.3:
        return CHINESE_CLOSED
    words = re.findall(r"[A-Za-z]+", source)
    if words and sum(w.lower() in _ENGLISH_WORDS for w in words) >= 0.1 * len(words):
        return ENGLISH_CLOSED
    return None


def claims_request(summary: str) -> JudgeRequest:
    """The summary's atomic claims, from the summary alone: the source is not in this prompt."""
    return _claims("summarization.claims", "summary", summary)


def questions_request(source: str, max_questions: int) -> JudgeRequest:
    """Closed questions drawn from the source alone: the summary is not in this prompt."""
    user = f"{fence('source', source)}\n\n{QUESTIONS_TASK.format(n=max_questions)}"
    return JudgeRequest(
        tag="summarization.questions",
        messages=judge_chat(user),
        schema=questions_schema(max_questions, closed_question_pattern(source)),
        max_tokens=budget(max_questions, CLAIM_CHARS),
    )


def alignment_request(source: str, claim: str) -> JudgeRequest:
    """One claim of the summary checked against the source."""
    return _check("summarization.alignment", source, claim)


def question_check_request(source: str, question: str) -> JudgeRequest:
    """One question checked against the source: does the source answer it "yes"?"""
    return _check("summarization.question_check", source, question)


def coverage_request(summary: str, question: str) -> JudgeRequest:
    """One question answered from the summary alone: the source is not in this prompt.

    `summary` is what the question is answered from: the scorer gives the summary's claims, one
    per line (`summary_as_claims`), in the summary's fence.
    """
    return _check("summarization.coverage", summary, question)


def summary_as_claims(claims: list[str]) -> str:
    """The summary as coverage reads it: its distinct claims, one per line."""
    return "\n".join(claims)


CHECKS: dict[str, tuple[str, str, str, type[Verdict]]] = {
    "summarization.alignment": ("source", "claim", ASK_SUPPORTED, Supported),
    "summarization.question_check": ("source", "question", ASK_SOURCE_YES, SaysYes),
    "summarization.coverage": ("summary", "question", ASK_ANSWERED, Answered),
}
"""Each check: the text it is judged against, what it checks, the question put, the verdict."""


def _check(tag: str, text: str, item: str) -> JudgeRequest:
    name, item_tag, ask, schema = CHECKS[tag]
    return check_request(tag, fence(name, text), name, (item_tag, item), ask, schema)


def reason_request(
    alignment: list[dict[str, Any]], coverage: list[dict[str, Any]], axes: dict[str, float]
) -> JudgeRequest:
    """A model-written reason, from the verdicts only (`reason="model"`).

    `axes` are the ones that set the score: `{"alignment", "coverage"}`, hard or soft.
    """
    claims = numbered(
        [f"{v['claim']} -> {'supported' if v['supported'] else 'NOT supported'}" for v in alignment]
    )
    questions = numbered(
        [f"{v['question']} -> {'answered' if v['answered'] else 'NOT answered'}" for v in coverage]
    )
    user = (
        f"Alignment {axes['alignment']:.2f}, coverage {axes['coverage']:.2f}.\n\n"
        f"{fence('claims', claims)}\n\n{fence('questions', questions)}\n\n{REASON_TASK}"
    )
    return JudgeRequest(
        tag="summarization.reason",
        messages=judge_chat(user),
        schema=Reason,
        max_tokens=budget(1, SUMMARY_REASON_CHARS),
    )


def combine(alignment: list[dict[str, Any]], coverage: list[dict[str, Any]]) -> dict[str, float]:
    """Axis scores: supported / claims and answered / questions, 0 when there are none.

    With every verdict's `p` known, also `alignment_soft` and `coverage_soft`, the mean `p`.
    """
    supported = sum(v["supported"] for v in alignment)
    answered = sum(v["answered"] for v in coverage)
    axes = {
        "alignment": supported / len(alignment) if alignment else 0.0,
        "coverage": answered / len(coverage) if coverage else 0.0,
    }
    soft_alignment, soft_coverage = mean_p(alignment), mean_p(coverage)
    if soft_alignment is not None and soft_coverage is not None:
        axes["alignment_soft"], axes["coverage_soft"] = soft_alignment, soft_coverage
    return axes


def scoring_axes(axes: dict[str, float], verdicts: VerdictMode) -> dict[str, float]:
    """The two axes that set the score: the hard ones, or the soft ones under their names."""
    if verdicts == "hard":
        return {"alignment": axes["alignment"], "coverage": axes["coverage"]}
    return {"alignment": axes["alignment_soft"], "coverage": axes["coverage_soft"]}


def template_reason(
    score: float,
    axes: dict[str, float],
    alignment: list[dict[str, Any]],
    coverage: list[dict[str, Any]],
    verdicts: VerdictMode = "hard",
) -> str:
    """Name the axis that set the score (both on a tie), both axis scores, and what is behind.

    `axes` are the scoring axes (`scoring_axes`); the first line says which verdicts made them.
    """
    a, c = axes["alignment"], axes["coverage"]
    limiting = ["alignment"] if a < c else ["coverage"] if c < a else ["alignment", "coverage"]
    how = "hard verdicts" if verdicts == "hard" else "soft verdicts, mean p(true)"
    lines = [
        f"Score {score:.2f} ({how}), set by {' and '.join(limiting)} "
        f"(alignment {a:.2f}, coverage {c:.2f})."
    ]
    if "alignment" in limiting:
        unsupported = [v for v in alignment if not v["supported"]]
        if not alignment:
            lines.append("The summary yields no claims to judge.")
        elif unsupported:
            lines.append(
                f"Unsupported claims ({len(unsupported)} of {len(alignment)}): "
                + "; ".join(f'"{v["claim"]}" ({v["reason"]}{_p(v)})' for v in unsupported)
            )
        else:
            lines.append(f"All {len(alignment)} claims are supported by the source.")
    if "coverage" in limiting:
        missed = [v for v in coverage if not v["answered"]]
        if not coverage:
            lines.append("The source yields no questions to cover.")
        elif missed:
            lines.append(
                f"Unanswered questions ({len(missed)} of {len(coverage)}): "
                + "; ".join(f'"{v["question"]}"{_p(v, " (", ")")}' for v in missed)
            )
        else:
            lines.append(f"All {len(coverage)} questions are answered by the summary.")
    return "\n".join(lines)


def _p(verdict: dict[str, Any], before: str = "; ", after: str = "") -> str:
    return "" if verdict.get("p") is None else f"{before}p={verdict['p']:.2f}{after}"


def empty_summary_result() -> ScoreResult:
    """A blank summary's result: score 0, every axis 0 (no claims, no answers), no judge call.

    The soft axes are 0 too (certain, not read from a judge), so `verdicts="soft"` scores it 0.
    """
    return ScoreResult(
        scorer=SCORER_ID,
        score=0.0,
        reason="The summary is empty (blank after trimming), so it states nothing: score 0.",
        preprocess_step_result={
            "alignment": [],
            "questions": [],
            "questions_not_yes": [],
            "duplicates_dropped": {"alignment": 0, "questions": 0},
        },
        analyze_step_result={"coverage": []},
        axes={"alignment": 0.0, "coverage": 0.0, "alignment_soft": 0.0, "coverage_soft": 0.0},
    )


def _texts(
    row: Fields, source: str | None, source_extractor: Callable[[Any, Any], str] | None
) -> tuple[str | None, str]:
    """The run's summary and source texts, read and checked from its fields (the one place).

    The summary: the `summary` field, else `output`: the last assistant message with text
    (plain run: the string). The source: the extractor for agent-shaped runs, else the row's
    own `source`, else the scorer's option, else the first user message of `input`.
    Normative (docs/SEMANTICS.md §1.2): only an absent summary, or one of the wrong type, is
    an input error; a blank one is a bad summary (the caller scores it 0).
    """
    input_ = row.get("input")
    output = row.get("summary", "output")
    if output is None:
        raise row.missing("summary")
    if isinstance(output, list):
        wrong = [m for m in output if not isinstance(m, dict)]
        if wrong:
            raise InputError(
                f"summary: must be a list of messages, got a list holding {type(wrong[0]).__name__}"
            )
    elif not isinstance(output, str):
        raise InputError(f"summary: must be a string or a list of messages, got {kind(output)}")
    own = row.get("source")
    if own is not None and not isinstance(own, str):
        raise InputError(f"source: must be a string, got {kind(own)}")
    if own is None and input_ is None and source is None:
        raise row.missing("source")
    summary = last_assistant_text(output)

    text: str | None
    if source_extractor is not None and is_agent_run(input_, output):
        try:
            text = source_extractor(input_, output)
        except Exception as exc:
            raise InputError(
                f"source: source_extractor raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(text, str):
            raise InputError(
                f"source: source_extractor must return a str, got {type(text).__name__}"
            )
    elif own is not None:
        text = own
    elif source is not None:
        text = source
    else:
        text = first_user_text(input_)
    if text is None or not text.strip():
        raise InputError("source: no source text (blank or missing)")
    return summary, text


def _steps(
    row: Fields,
    *,
    source: str | None,
    source_extractor: Callable[[Any, Any], str] | None,
    max_questions: int,
    scale: float,
    reason: ReasonMode,
    verdicts: VerdictMode = "hard",
    engine_name: str = "?",
) -> Steps:
    """One run through the pipeline; the runner batches its requests with other rows'."""
    summary, text = _texts(row, source, source_extractor)
    if summary is None or not summary.strip():
        return empty_summary_result()  # checked after the source: a row without one is broken

    # Step 1: the summary's claims (from the summary alone) and the source's closed questions
    # (from the source alone); neither waits for the other. A repeated one is checked once.
    listed, asked = yield [claims_request(summary), questions_request(text, max_questions)]
    assert isinstance(listed, Claims) and isinstance(asked, Questions)
    claims, claims_dropped = distinct(list(listed.claims))
    candidates, questions_dropped = distinct(list(asked.questions))

    # Step 2: each claim, and each question, checked against the source, one call each.
    checks = yield [alignment_request(text, c) for c in claims] + [
        question_check_request(text, q) for q in candidates
    ]
    supported = cast(list[Supported], checks[: len(claims)])
    says_yes = cast(list[SaysYes], checks[len(claims) :])
    alignment = [
        {"claim": c, "supported": v.supported, "reason": _supported_reason(v), **p_fields(v)}
        for c, v in zip(claims, supported, strict=True)
    ]
    questions: list[str] = []
    not_yes: list[dict[str, Any]] = []
    for q, v in zip(candidates, says_yes, strict=True):
        if v.yes:
            questions.append(q)
        else:
            not_yes.append({"question": q, **p_fields(v)})

    # Step 3: each question the source answers "yes", answered from the summary alone: from
    # what it states (its claims), not from what it asks of the judge.
    coverage: list[dict[str, Any]] = []
    if questions:
        stated = summary_as_claims(claims)
        answers = cast(list[Answered], (yield [coverage_request(stated, q) for q in questions]))
        coverage = [
            {"question": q, "answered": v.answered, "reason": _answered_reason(v), **p_fields(v)}
            for q, v in zip(questions, answers, strict=True)
        ]

    # The score is the lower axis, times the scale.
    axes = combine(alignment, coverage)
    if verdicts == "soft" and "alignment_soft" not in axes:
        step = "alignment" if mean_p(alignment) is None else "coverage"
        raise SoftVerdictError(f"summarization.{step}", engine_name)
    scoring = scoring_axes(axes, verdicts)
    score = min(scoring["alignment"], scoring["coverage"]) * scale
    if reason == "model":
        (written,) = yield [reason_request(alignment, coverage, scoring)]
        assert isinstance(written, Reason)
        why = written.reason
    else:
        why = template_reason(score, scoring, alignment, coverage, verdicts)
    return ScoreResult(
        scorer=SCORER_ID,
        score=score,
        reason=why,
        preprocess_step_result={
            "alignment": alignment,
            "questions": questions,
            "questions_not_yes": not_yes,
            "duplicates_dropped": {"alignment": claims_dropped, "questions": questions_dropped},
        },
        analyze_step_result={"coverage": coverage},
        axes=axes,
    )


def _supported_reason(verdict: Supported) -> str:
    return "the source supports it" if verdict.supported else "the source does not support it"


def _answered_reason(verdict: Answered) -> str:
    return "the summary answers it" if verdict.answered else "the summary does not answer it"
