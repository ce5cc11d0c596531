"""The context recall scorer against docs/SEMANTICS.md §1.3, driven by the scripted engine."""

import re

import pytest

from evalgpu import create_context_recall_scorer
from evalgpu.engines.scripted import ScriptedEngine, answer, tagged
from evalgpu.scorers.context_recall import verdict_entry
from evalgpu.verdicts import Attributed, Claims, attribution_schema

EINSTEIN = "Einstein was born in 1879. Einstein developed relativity. Einstein won the Nobel Prize."
CONTEXT = [
    "Document 1: Einstein was born on 14 March 1879 in Ulm, Germany.",
    "Document 2: Einstein developed the theory of relativity, published in 1905.",
    "Document 3: Einstein moved to the United States in 1933.",
]


def user_text(request) -> str:
    return request.messages[-1]["content"]


def seen(request) -> str:
    """Everything a judge call is shown."""
    return "\n".join(m["content"] for m in request.messages)


def agent_run(question: str, ground_truth: str | None = None) -> dict:
    run = {
        "input": {"inputMessages": [{"role": "user", "content": question}]},
        "output": [{"role": "assistant", "content": "an answer"}],
    }
    if ground_truth is not None:
        run["ground_truth"] = ground_truth
    return run


def test_reference_example_two_of_three(engine):
    result = create_context_recall_scorer(engine, context=CONTEXT).run(
        input="Tell me about Einstein", output="...", ground_truth=EINSTEIN
    )
    assert result.error is None
    assert result.score == pytest.approx(2 / 3)
    verdicts = result.analyze_step_result["verdicts"]
    assert [v["attributed"] for v in verdicts] == [True, True, False]
    assert [v["passages"] for v in verdicts] == [[1], [2], []]
    assert result.preprocess_step_result == {
        "claims": [
            "Einstein was born in 1879.",
            "Einstein developed relativity.",
            "Einstein won the Nobel Prize.",
        ],
        "duplicates_dropped": {"claims": 0},
    }
    assert [v["p"] for v in verdicts] == pytest.approx([0.9, 0.9, 0.1])
    assert result.axes == pytest.approx({"recall": 2 / 3, "recall_soft": 1.9 / 3})
    assert result.reason.startswith("Recall 0.67 (hard verdicts): 2 of 3 ground-truth claims")
    assert '"Einstein was born in 1879." (passage 1)' in result.reason
    assert 'Missing: "Einstein won the Nobel Prize."' in result.reason


def test_scale_multiplies(engine):
    scorer = create_context_recall_scorer(engine, context=CONTEXT, scale=3)
    assert scorer.run(input="q", output="a", ground_truth=EINSTEIN).score == pytest.approx(2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "context or context_extractor is required"),
        ({"context": []}, "context must not be empty, got []"),
        ({"context": CONTEXT, "scale": 0}, "scale must be > 0, got 0"),
        (
            {"context": CONTEXT, "reason": "free"},
            "reason must be 'template' or 'model', got 'free'",
        ),
    ],
)
def test_bad_options_raise_value_error_at_construction(engine, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        create_context_recall_scorer(engine, **kwargs)


@pytest.mark.parametrize("missing", [None, "", "   \n"])
def test_missing_ground_truth_scores_zero_without_a_model_call(engine, missing):
    scorer = create_context_recall_scorer(engine, context=CONTEXT)
    result = scorer.run(input="q", output="a", ground_truth=missing)
    assert result.score == 0.0 and result.error is None
    assert "no ground truth" in result.reason.lower()
    assert engine.calls == []


def test_extractor_only_for_agent_runs_else_static_context(engine):
    scorer = create_context_recall_scorer(
        engine,
        context=["Static passage about Einstein won the Nobel Prize."],
        context_extractor=lambda i, o: ["Extracted: Einstein was born in 1879."],
    )
    agent = scorer.run(**agent_run("Who?", "Einstein was born in 1879."))
    plain = scorer.run(input="Who?", output="a", ground_truth="Einstein won the Nobel Prize.")
    assert agent.score == 1.0 and plain.score == 1.0
    first, second = engine.by_tag("context_recall.attribution")
    assert "Extracted:" in first.messages[-1]["content"]
    assert "Static passage" in second.messages[-1]["content"]


def test_extractor_without_static_context_fails_plain_runs_clearly(engine):
    scorer = create_context_recall_scorer(engine, context_extractor=lambda i, o: ["x"])
    result = scorer.run(input="q", output="a", ground_truth="A fact.")
    assert result.score is None
    assert result.error.startswith("context: context_extractor applies to agent-shaped runs only")


def test_extractor_that_returns_a_non_list_fails_its_row(engine):
    scorer = create_context_recall_scorer(engine, context_extractor=lambda i, o: 42)
    results = scorer.run_batch([agent_run("q", "A fact."), {"input": "q", "ground_truth": "A."}])
    assert (
        results[0].error == "row 1: context: context_extractor returned not a list of strings (int)"
    )
    assert results[1].error.startswith("row 2: context:")


def test_a_string_context_is_one_passage(engine):
    scorer = create_context_recall_scorer(engine, context="Einstein was born in 1879 in Ulm.")
    result = scorer.run(input="q", output="a", ground_truth="Einstein was born in 1879.")
    assert result.score == 1.0
    assert "Passage 2" not in engine.by_tag("context_recall.attribution")[0].messages[-1]["content"]


def test_empty_extracted_context_scores_zero_without_attribution_call(engine):
    scorer = create_context_recall_scorer(engine, context_extractor=lambda i, o: [])
    result = scorer.run(**agent_run("q", "Einstein was born in 1879."))
    assert result.score == 0.0
    assert engine.by_tag("context_recall.attribution") == []
    assert "no passages" in result.reason


def test_an_empty_claim_list_is_an_invalid_reply():
    # A non-blank ground truth makes at least one claim: the schema takes no empty list.
    engine = ScriptedEngine(overrides={"context_recall.claims": lambda r: {"claims": []}})
    result = create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth="Hmm."
    )
    assert result.score is None
    assert result.error.startswith("context_recall.claims: reply does not match the schema")
    assert engine.by_tag("context_recall.attribution") == []


def test_one_attribution_check_per_claim(engine):
    create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    checks = engine.by_tag("context_recall.attribution")
    assert [tagged(user_text(r), "claim") for r in checks] == [
        "Einstein was born in 1879.",
        "Einstein developed relativity.",
        "Einstein won the Nobel Prize.",
    ]
    assert all(r.schema is attribution_schema(3) for r in checks)
    assert [sorted({r.tag for r in call}) for call in engine.calls] == [
        ["context_recall.claims"],
        ["context_recall.attribution"],
    ]


def test_the_attribution_check_asks_for_its_verdict_first_and_not_for_p(engine):
    create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    for request in engine.by_tag("context_recall.attribution"):
        properties = request.schema.model_json_schema()["properties"]
        assert list(properties) == ["supported", "passages"]  # the verdict first
        assert "p" not in properties
        assert issubclass(request.schema, Attributed)
        assert request.max_tokens < 64  # a verdict and a few passage numbers


def test_checks_against_one_context_share_their_prompt_up_to_the_claim(engine):
    create_context_recall_scorer(engine, context=CONTEXT).run_batch(
        [
            {"input": "q", "output": "a", "ground_truth": EINSTEIN},
            {"input": "q", "output": "a", "ground_truth": "Einstein moved in 1933."},
        ]
    )
    checks = engine.by_tag("context_recall.attribution")
    assert len(checks) == 4
    heads = {user_text(r).split("<claim>")[0] for r in checks}
    assert len(heads) == 1
    (head,) = heads
    assert head.startswith(f"Passage 1:\n<passage>\n{CONTEXT[0]}\n</passage>")
    assert all(p in head for p in CONTEXT)


@pytest.mark.parametrize(
    "reply",
    [
        # the former reply, with one verdict per claim; a verdict with a reason; no verdict
        {"verdicts": [{"claim": "c", "reason": "r", "attributed": True, "passages": [3]}]},
        {"supported": True, "passages": [1], "reason": "r"},
        {"passages": [1]},
    ],
)
def test_an_attribution_reply_out_of_its_schema_is_an_invalid_reply(reply):
    engine = ScriptedEngine(overrides={"context_recall.attribution": lambda r: reply})
    result = create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    assert result.score is None
    assert result.error.startswith("context_recall.attribution: reply does not match the schema")


def test_verdicts_follow_the_claims_in_order():
    def second_missing(request):
        if "relativity" in tagged(user_text(request), "claim"):
            return {"supported": False, "passages": []}
        return {"supported": True, "passages": [3]}

    engine = ScriptedEngine(overrides={"context_recall.attribution": second_missing})
    result = create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    verdicts = result.analyze_step_result["verdicts"]
    assert [v["claim"] for v in verdicts] == result.preprocess_step_result["claims"]
    assert [v["attributed"] for v in verdicts] == [True, False, True]
    assert [v["passages"] for v in verdicts] == [[3], [], [3]]
    assert result.score == pytest.approx(2 / 3)


def test_a_no_verdict_drops_its_citations():
    def cites_anyway(request):
        reply = answer(request)
        return {"supported": reply["supported"], "passages": [3, 1, 1]}

    engine = ScriptedEngine(overrides={"context_recall.attribution": cites_anyway})
    result = create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    verdicts = result.analyze_step_result["verdicts"]
    assert [v["attributed"] for v in verdicts] == [True, True, False]
    # a "yes" keeps its passages (sorted, once each); a "no" cites nothing
    assert [v["passages"] for v in verdicts] == [[1, 3], [1, 3], []]
    assert 'Missing: "Einstein won the Nobel Prize."' in result.reason


def test_verdict_entry_keeps_the_reference_shape():
    yes, no = (
        Attributed(supported=True, passages=[2, 1, 2]),
        Attributed(supported=False, passages=[1]),
    )
    no.p = 0.2
    assert verdict_entry("a", yes) == {
        "claim": "a",
        "attributed": True,
        "reason": "found in the passages",
        "passages": [1, 2],
        "p": None,
    }
    assert verdict_entry("b", no) == {
        "claim": "b",
        "attributed": False,
        "reason": "not found in the passages",
        "passages": [],
        "p": 0.2,
    }


def test_passage_numbers_outside_the_context_violate_the_schema():
    def bad(request):
        return {"supported": True, "passages": [9]}

    engine = ScriptedEngine(overrides={"context_recall.attribution": bad})
    result = create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    assert result.score is None
    assert result.error.startswith("context_recall.attribution: reply does not match the schema")
    schema = engine.by_tag("context_recall.attribution")[0].schema.model_json_schema()
    assert "'enum': [1, 2, 3]" in str(schema)  # what the constrained decoder could write


def test_cited_passages_exist_and_only_a_yes_cites_any(engine):
    result = create_context_recall_scorer(engine, context=CONTEXT).run(
        input="q", output="a", ground_truth=EINSTEIN
    )
    for verdict in result.analyze_step_result["verdicts"]:
        assert all(1 <= n <= len(CONTEXT) for n in verdict["passages"])
        assert bool(verdict["passages"]) == verdict["attributed"]


def test_claims_for_a_repeated_ground_truth_are_asked_once(engine):
    scorer = create_context_recall_scorer(engine, context=CONTEXT)
    runs = [
        {"input": "q", "output": "a", "ground_truth": EINSTEIN, "context": [p]} for p in CONTEXT
    ]
    results = scorer.run_batch(runs)
    assert len(engine.by_tag("context_recall.claims")) == 1
    assert len(engine.calls) == 2
    assert [round(r.score, 2) for r in results] == [0.33, 0.33, 0.0]


def test_claims_prompt_sees_only_the_ground_truth(engine):
    create_context_recall_scorer(engine, context=CONTEXT).run(
        input="QUESTION-MARKER", output="OUTPUT-MARKER", ground_truth=EINSTEIN
    )
    (claims,) = engine.by_tag("context_recall.claims")
    assert claims.schema is Claims
    text = seen(claims)
    assert EINSTEIN in text
    assert "MARKER" not in text
    for passage in CONTEXT:  # never the passages: a judge cannot list them as claims
        assert passage not in text
    assert "Document" not in text and "<passage>\n" not in text and "Passage 1" not in text


def test_model_reason(engine):
    scorer = create_context_recall_scorer(engine, context=CONTEXT, reason="model")
    result = scorer.run(input="q", output="a", ground_truth=EINSTEIN)
    assert result.reason == "The judge wrote this reason."
    assert len(engine.calls) == 3  # claims, attribution checks, the reason
    assert result.usage.calls == 1 + 3 + 1
