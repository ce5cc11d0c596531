"""Soft verdicts and repeated items in both scorers, driven by the scripted engine.

The scripted judge gives p = 0.9 to a true verdict and 0.1 to a false one, through the same
attachment path as the real engines (`true_p=None` plays an engine that cannot read them).
"""

from __future__ import annotations

import pytest

from evalgpu import create_context_recall_scorer, create_summarization_scorer
from evalgpu.engines.scripted import ScriptedEngine, answer, tagged

SOURCE = (
    "The company was founded in 1995 by John Smith. It started with 10 employees and grew "
    "to 500 by 2020. The company is based in Seattle."
)
SHORT = "The company was founded in 1995 by John Smith. The company is based in Seattle."
WRONG = "The company was founded in 1996 by John Smith. The company is based in Seattle."
CONTEXT = ["Einstein was born in 1879 in Ulm.", "Einstein developed the theory of relativity."]
EINSTEIN = "Einstein was born in 1879. Einstein developed relativity. Einstein won the Nobel Prize."


# -- summarization --------------------------------------------------------------------------


def test_hard_is_the_default_and_soft_axes_sit_beside_the_hard_ones():
    result = create_summarization_scorer(ScriptedEngine()).run(input=SOURCE, output=WRONG)
    # claims: 1996 (false), Seattle (true); questions: 1995 (false), 10 to 500 (false), Seattle
    assert result.axes == pytest.approx(
        {
            "alignment": 1 / 2,
            "coverage": 1 / 3,
            "alignment_soft": (0.1 + 0.9) / 2,
            "coverage_soft": (0.1 + 0.1 + 0.9) / 3,
        }
    )
    assert result.score == pytest.approx(1 / 3)
    assert "(hard verdicts)" in result.reason


def test_soft_scores_the_lower_soft_axis_times_scale_and_says_so():
    scorer = create_summarization_scorer(ScriptedEngine(), verdicts="soft", scale=2)
    result = scorer.run(input=SOURCE, output=SHORT)
    assert result.axes["coverage_soft"] == pytest.approx((0.9 + 0.1 + 0.9) / 3)
    assert result.axes["alignment_soft"] == pytest.approx(0.9)
    assert result.score == pytest.approx(2 * (0.9 + 0.1 + 0.9) / 3)
    assert result.reason.startswith("Score 1.27 (soft verdicts, mean p(true)), set by coverage")
    assert "(alignment 0.90, coverage 0.63)" in result.reason
    assert "(p=0.10)" in result.reason  # the unanswered question, with its p


def test_soft_with_an_engine_that_gives_no_p_fails_the_row_clearly():
    engine = ScriptedEngine(true_p=None)
    hard = create_summarization_scorer(engine).run(input=SOURCE, output=SHORT)
    assert hard.error is None
    assert set(hard.axes) == {"alignment", "coverage"}  # no soft axes without p
    assert hard.preprocess_step_result["alignment"][0]["p"] is None

    (soft,) = create_summarization_scorer(engine, verdicts="soft").run_batch(
        [{"input": SOURCE, "output": SHORT}]
    )
    assert soft.score is None
    assert soft.error == (
        "row 1: SoftVerdictError: summarization.alignment: verdicts='soft' needs the judge's "
        "probability p of every verdict, and engine 'scripted' gives none (use "
        "verdicts='hard', or an engine that reads its logits: transformers or vllm)"
    )


def test_repeated_questions_are_dropped_before_coverage_and_counted():
    # The closed-question pattern of an English source allows no leading space nor lower-case
    # start; repeats that differ in case past the first word are still repeats.
    def repeats(request):
        return {
            "questions": [
                "Was it founded in 1995?",
                "Was it FOUNDED in 1995?",
                "Is it based in Seattle?",
                "Was it founded IN 1995?",
            ]
        }

    engine = ScriptedEngine(overrides={"summarization.questions": repeats})
    result = create_summarization_scorer(engine).run(input=SOURCE, output=SHORT)
    assert result.preprocess_step_result["questions"] == [
        "Was it founded in 1995?",
        "Is it based in Seattle?",
    ]
    assert result.preprocess_step_result["duplicates_dropped"] == {"alignment": 0, "questions": 2}
    checked = engine.by_tag("summarization.question_check")
    coverage = engine.by_tag("summarization.coverage")
    for requests in (checked, coverage):  # each kept question checked, then covered, once
        assert [tagged(r.messages[-1]["content"], "question") for r in requests] == [
            "Was it founded in 1995?",
            "Is it based in Seattle?",
        ]
    assert len(result.analyze_step_result["coverage"]) == 2


def test_repeated_claims_are_counted_once_in_alignment():
    def repeats(request):
        reply = answer(request)  # the rule's claims, then the first one twice more
        first = reply["claims"][0]
        reply["claims"] += [first, f" {first.upper()} "]
        return reply

    engine = ScriptedEngine(overrides={"summarization.claims": repeats})
    result = create_summarization_scorer(engine).run(input=SOURCE, output=WRONG)
    alignment = result.preprocess_step_result["alignment"]
    assert [v["supported"] for v in alignment] == [False, True]  # not [F, T, F, F]
    assert len(engine.by_tag("summarization.alignment")) == 2  # a repeat is not checked
    assert result.preprocess_step_result["duplicates_dropped"]["alignment"] == 2
    assert result.axes["alignment"] == pytest.approx(1 / 2)


# -- context recall --------------------------------------------------------------------------


def test_context_recall_soft_axis_and_score():
    hard = create_context_recall_scorer(ScriptedEngine(), context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    assert hard.axes == pytest.approx({"recall": 2 / 3, "recall_soft": (0.9 + 0.9 + 0.1) / 3})
    assert hard.score == pytest.approx(2 / 3)

    soft = create_context_recall_scorer(
        ScriptedEngine(), context=CONTEXT, verdicts="soft", scale=3
    ).run(input="q", output="a", ground_truth=EINSTEIN)
    assert soft.score == pytest.approx(3 * 1.9 / 3)
    assert soft.reason.startswith("Recall 1.90 (soft verdicts, mean p(attributed))")


def test_context_recall_soft_without_p_fails_the_row():
    scorer = create_context_recall_scorer(
        ScriptedEngine(true_p=None), context=CONTEXT, verdicts="soft"
    )
    result = scorer.run(input="q", output="a", ground_truth=EINSTEIN)
    assert result.score is None
    assert "context_recall.attribution: verdicts='soft' needs the judge's probability" in (
        result.error
    )


def test_context_recall_option_is_checked_at_construction():
    engine = ScriptedEngine()
    with pytest.raises(ValueError, match=r"^verdicts must be 'hard' or 'soft', got 'x'$"):
        create_context_recall_scorer(engine, context=CONTEXT, verdicts="x")  # type: ignore[arg-type]
    assert engine.calls == []


def test_repeated_claims_are_dropped_before_attribution_and_counted():
    def repeats(request):
        return {"claims": ["Einstein was born in 1879.", "einstein was born in 1879. "]}

    engine = ScriptedEngine(overrides={"context_recall.claims": repeats})
    result = create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    assert result.preprocess_step_result == {
        "claims": ["Einstein was born in 1879."],
        "duplicates_dropped": {"claims": 1},
    }
    (attribution,) = engine.by_tag("context_recall.attribution")  # one check: one claim
    assert tagged(attribution.messages[-1]["content"], "claim") == "Einstein was born in 1879."
    assert result.score == 1.0


def test_a_context_without_passages_is_certain_and_scores_zero_either_way():
    for verdicts in ("hard", "soft"):
        scorer = create_context_recall_scorer(
            ScriptedEngine(), context_extractor=lambda i, o: [], verdicts=verdicts
        )
        run = {
            "input": {"inputMessages": [{"role": "user", "content": "q"}]},
            "output": [{"role": "assistant", "content": "a"}],
        }
        result = scorer.run(**run, ground_truth=EINSTEIN)
        assert result.score == 0.0
        assert result.axes == {"recall": 0.0, "recall_soft": 0.0}


@pytest.mark.parametrize("true_p", [-0.1, 1.5])
def test_the_scripted_probability_is_checked(true_p):
    with pytest.raises(ValueError, match=r"^true_p must be in \[0, 1\] or None, got "):
        ScriptedEngine(true_p=true_p)
