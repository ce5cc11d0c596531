"""Summarization scorer: alignment of the summary's claims with the source, coverage of the
source's yes-questions answered from the summary alone; the score is the lower of the two.

Read top-down, this is the reference pipeline (docs/SEMANTICS.md §1.2):
prompts, the factory, the three requests, the combination and the reason, and `_steps`, which
runs one summary through them.

Beyond the reference:

- Soft verdicts. Every verdict carries `p`, the judge's probability of `true` (None when the
  engine cannot read it). `axes` holds `alignment_soft` and `coverage_soft`, the mean `p` of
  each list, beside the hard axes (absent when any `p` is missing). `verdicts="soft"` scores
  `min(alignment_soft, coverage_soft) * scale`: a small judge that answers `true` almost
  always still ranks summaries by how sure it is.
- Duplicates are judged once. A claim or question identical to an earlier one after trimming
  and case folding is dropped: questions before the coverage call, claims from the alignment
  list before its axis is computed (the judge wrote them in one reply, so judged once means
  counted once). `preprocessStepResult["duplicates_dropped"]` says how many:
  `{"alignment": n, "questions": m}`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from evalgpu.engines.base import JudgeRequest
from evalgpu.messages import first_user_text, is_agent_run, last_assistant_text
from evalgpu.prompting import fence, judge_chat, numbered
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.scorers._scorer import Scorer, callable_name, digest, resolve_engine
from evalgpu.verdicts import (
    CLAIM_CHARS,
    MAX_CLAIMS,
    REASON_CHARS,
    SUMMARY_REASON_CHARS,
    VERDICT_MODES,
    Alignment,
    Coverage,
    CoverageVerdict,
    Questions,
    Reason,
    SoftVerdictError,
    VerdictMode,
    budget,
    coverage_schema,
    distinct,
    mean_p,
    questions_schema,
)

__all__ = ["create_summarization_scorer"]

SCORER_ID = "summarization-scorer"

# Prompts. Every request starts with the same system message; alignment and questions then
# both continue with the source, so the engine's prefix cache serves a row's second call (and
# every other summary of that source) from the first. Task wording comes after the texts.

ALIGNMENT_TASK = f"""\
Task: list the atomic claims that the summary makes, at most {MAX_CLAIMS}, the most important \
first. Each claim is one self-contained fact, written in the language of the summary. Judge each \
claim against the source alone:
- supported is true only when the source states the claim or directly implies it;
- numbers, dates, names and quantities must match the source exactly: an approximation of a \
precise fact ("about 500" for "512", "the 1990s" for "1995") is not support;
- a detail that the source does not give is not supported, even if it is true in the world.
Give a short reason that points at what the source says, then the verdict."""

QUESTIONS_TASK = """\
Task: write at most {n} closed-ended questions about the source, the most important first. \
Each question asks about one fact, is answered "yes" by the source, and is written in the \
language of the source. Ask about the facts a good summary must keep: who, what, when, where, \
how much."""

COVERAGE_TASK = """\
Task: answer each question using only the summary. answered is true only when the summary \
itself says "yes" to the question; it is false when the summary does not mention the fact or \
says something else. Answer every question, in the order given, copying each question; give a \
short reason that points at the summary's words, then the verdict."""

REASON_TASK = """\
Task: explain this summarization score in two or three sentences for the person who wrote the \
summary. Name the axis that set the score (alignment: claims supported by the source; \
coverage: source questions answered by the summary), give both axis scores, and name the \
unsupported claims or unanswered questions behind it."""

ReasonMode = Literal["template", "model"]


def create_summarization_scorer(
    model: Any = None,
    *,
    source: str | None = None,
    source_extractor: Callable[[Any, Any], str] | None = None,
    max_questions: int = 10,
    scale: float = 1.0,
    reason: ReasonMode = "template",
    verdicts: VerdictMode = "hard",
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
            of true; needs an engine that reads its logits, else each row is an error).

    Returns:
        A `Scorer` with id "summarization-scorer".

    Raises:
        ValueError: an option is out of range (before any model is loaded).
    """
    if not isinstance(max_questions, int) or max_questions < 1:
        raise ValueError(f"max_questions must be >= 1, got {max_questions!r}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    if reason not in ("template", "model"):
        raise ValueError(f"reason must be 'template' or 'model', got {reason!r}")
    if verdicts not in VERDICT_MODES:
        raise ValueError(f"verdicts must be 'hard' or 'soft', got {verdicts!r}")
    if source_extractor is not None and not callable(source_extractor):
        raise ValueError("source_extractor must be callable")
    engine = resolve_engine(model)
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
    return Scorer(
        SCORER_ID,
        engine,
        steps,
        per_run_fields=frozenset({"source"}),
        fallbacks=frozenset({"source"} if source is not None else ()),
        options=options,
    )


def alignment_request(source: str, summary: str) -> JudgeRequest:
    """Claims of the summary, each judged against the source."""
    user = f"{fence('source', source)}\n\n{fence('summary', summary)}\n\n{ALIGNMENT_TASK}"
    return JudgeRequest(
        tag="summarization.alignment",
        messages=judge_chat(user),
        schema=Alignment,
        max_tokens=budget(MAX_CLAIMS, CLAIM_CHARS + REASON_CHARS),
    )


def questions_request(source: str, max_questions: int) -> JudgeRequest:
    """Yes-questions drawn from the source alone: the summary is not in this prompt."""
    user = f"{fence('source', source)}\n\n{QUESTIONS_TASK.format(n=max_questions)}"
    return JudgeRequest(
        tag="summarization.questions",
        messages=judge_chat(user),
        schema=questions_schema(max_questions),
        max_tokens=budget(max_questions, CLAIM_CHARS),
    )


def coverage_request(summary: str, questions: list[str]) -> JudgeRequest:
    """The questions answered from the summary alone: the source is not in this prompt.

    Its schema takes exactly one verdict per question (`coverage_schema(len(questions))`).
    """
    # Questions before the summary: the coverage prompts of one source's summaries then share
    # a prefix, which engines with prefix caching compute once.
    listed = fence("questions", numbered(questions))
    user = f"{listed}\n\n{fence('summary', summary)}\n\n{COVERAGE_TASK}"
    return JudgeRequest(
        tag="summarization.coverage",
        messages=judge_chat(user),
        schema=coverage_schema(len(questions)),
        max_tokens=budget(len(questions), CLAIM_CHARS + REASON_CHARS),
    )


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


def match_coverage(questions: list[str], verdicts: list[CoverageVerdict]) -> list[dict[str, Any]]:
    """One coverage entry per question, matched by position.

    The schema takes exactly one verdict per question, so the counts match; were they to
    differ (an engine that returns an unvalidated reply), a missing verdict counts as not
    answered and extra verdicts are ignored (docs/SEMANTICS.md §1.2). Each entry carries the
    question as it was asked, not the judge's copy of it.
    """
    entries = []
    for i, question in enumerate(questions):
        if i < len(verdicts):
            v = verdicts[i]
            entries.append(
                {"question": question, "answered": v.answered, "reason": v.reason, "p": v.p}
            )
        else:
            entries.append(
                {
                    "question": question,
                    "answered": False,
                    "reason": "no verdict was returned",
                    "p": None,
                }
            )
    return entries


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
            "duplicates_dropped": {"alignment": 0, "questions": 0},
        },
        analyze_step_result={"coverage": []},
        axes={"alignment": 0.0, "coverage": 0.0, "alignment_soft": 0.0, "coverage_soft": 0.0},
    )


def _steps(
    input: Any,
    output: Any,
    ground_truth: Any,
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
    # The summary: the last assistant message with text (plain run: the output string).
    # Normative (docs/SEMANTICS.md §1.2): a blank summary is a bad summary, scored 0 without
    # a judge call; only an absent summary, or one of the wrong type, is an input error.
    if output is None:
        raise InputError("summary: missing (the output is None)")
    if isinstance(output, list):
        wrong = [m for m in output if not isinstance(m, dict)]
        if wrong:
            raise InputError(
                f"summary: must be a list of messages, got a list holding {type(wrong[0]).__name__}"
            )
    elif not isinstance(output, str):
        raise InputError(
            f"summary: must be a string or a list of messages, got {type(output).__name__}"
        )
    summary = last_assistant_text(output)

    # The source: the extractor for agent-shaped runs, else the option, else the first user
    # message. (`source` is this run's own when the run brought one: see `Scorer.steps`.)
    text: str | None
    if source_extractor is not None and is_agent_run(input, output):
        try:
            text = source_extractor(input, output)
        except Exception as exc:
            raise InputError(
                f"source: source_extractor raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(text, str):
            raise InputError(
                f"source: source_extractor must return a str, got {type(text).__name__}"
            )
    elif source is not None:
        text = source
    else:
        text = first_user_text(input)
    if text is None or not text.strip():
        raise InputError("source: no source text (blank or missing)")
    if summary is None or not summary.strip():
        return empty_summary_result()  # checked after the source: a row without one is broken

    # Step 1: alignment and questions. Both see the source; neither waits for the other.
    judged, asked = yield [alignment_request(text, summary), questions_request(text, max_questions)]
    assert isinstance(judged, Alignment) and isinstance(asked, Questions)
    # A repeated claim or question is judged once (see the module docstring).
    claims, claims_dropped = distinct(judged.alignment, key=lambda v: v.claim)
    alignment = [
        {"claim": v.claim, "supported": v.supported, "reason": v.reason, "p": v.p} for v in claims
    ]
    questions, questions_dropped = distinct(list(asked.questions))

    # Step 2: coverage, from the summary alone (no call when the source gave no questions).
    coverage: list[dict[str, Any]] = []
    if questions:
        (answers,) = yield [coverage_request(summary, questions)]
        assert isinstance(answers, Coverage)
        coverage = match_coverage(questions, answers.coverage)

    # Step 3: the score is the lower axis, times the scale.
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
            "duplicates_dropped": {"alignment": claims_dropped, "questions": questions_dropped},
        },
        analyze_step_result={"coverage": coverage},
        axes=axes,
    )
