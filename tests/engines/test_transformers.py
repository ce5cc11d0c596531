"""The transformers engine: its pure request adapter (no model), then slow end-to-end runs of
both scorers on the real default model on CPU."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from evalgpu import create_context_recall_scorer, create_summarization_scorer
from evalgpu.engines import Engine, JudgeReply, JudgeRequest
from evalgpu.engines.transformers import (
    TransformersEngine,
    chat_for,
    plan_batches,
    read_output,
)
from evalgpu.prompting import judge_chat
from evalgpu.scorers.summarization import questions_request
from evalgpu.verdicts import Reason, questions_schema

# -- the pure adapter --------------------------------------------------------------------


def test_chat_is_kept_when_the_template_has_a_system_role():
    chat = judge_chat("judge this")
    assert chat_for(chat, system_role=True) == chat


def test_system_text_is_folded_into_the_user_turn_otherwise():
    chat = [{"role": "system", "content": "Be strict."}, {"role": "user", "content": "Judge."}]
    assert chat_for(chat, system_role=False) == [
        {"role": "user", "content": "Be strict.\n\nJudge."}
    ]
    assert chat[1]["content"] == "Judge."  # the request's messages are not modified
    assert chat_for(chat[:1], system_role=False) == [{"role": "user", "content": "Be strict."}]


def _request(schema, max_tokens: int) -> JudgeRequest:
    return JudgeRequest("t", judge_chat("x"), schema, max_tokens)


def test_batches_hold_one_schema_and_budget_sorted_by_length():
    q2, q3 = questions_schema(2), questions_schema(3)
    requests = [
        _request(q2, 100),
        _request(q3, 100),
        _request(q2, 100),
        _request(q2, 200),
        _request(q2, 100),
        _request(q3, 100),
    ]
    lengths = [50, 10, 30, 5, 40, 20]
    batches = plan_batches(requests, lengths, batch_size=2)
    assert sorted(i for b in batches for i in b) == list(range(6))
    for batch in batches:
        assert len({(requests[i].schema, requests[i].max_tokens) for i in batch}) == 1
        assert len(batch) <= 2
    assert [2, 4] in batches and [0] in batches  # q2/100 sorted by length: 2 (30), 4 (40), 0 (50)
    assert [1, 5] in batches and [3] in batches


def test_output_is_read_up_to_the_end_token():
    eos = {2}
    assert read_output([10, 11, 2, 2, 2], eos, max_new_tokens=8) == (2, 3, "stop")
    assert read_output([10, 11, 12, 13], eos, max_new_tokens=4) == (4, 4, "length")
    assert read_output([10, 2], {2, 7}, max_new_tokens=2) == (1, 2, "stop")
    assert read_output([10], eos, max_new_tokens=4) == (1, 1, "stop")


def test_options_are_checked_before_loading_anything():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        TransformersEngine("/nowhere", batch_size=0)


# -- the real default model on CPU --------------------------------------------------------

SOURCE = (
    "The Golden Gate Bridge in San Francisco opened to traffic on May 27, 1937. "
    "Its main span is 1,280 metres long. Joseph Strauss was the chief engineer."
)
SUMMARY = "The Golden Gate Bridge opened in 1937. Joseph Strauss was its chief engineer."
PASSAGES = [
    "The Golden Gate Bridge opened in 1937 and links San Francisco to Marin County.",
    "Joseph Strauss led the engineering of the bridge.",
]
ANSWER = "The Golden Gate Bridge opened in 1937. Its chief engineer was Joseph Strauss."


class Recording:
    """Wraps an engine and keeps every request it was given."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.requests: list[JudgeRequest] = []

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        self.requests += requests
        return self.engine.generate(requests)


@pytest.fixture(scope="module")
def engine() -> Engine:
    from evalgpu.engines import load_engine

    return load_engine(None, backend="transformers")


def _text(request: JudgeRequest) -> str:
    return "\n".join(m["content"] for m in request.messages)


@pytest.mark.slow
def test_summarization_end_to_end(engine):
    recording = Recording(engine)
    scorer = create_summarization_scorer(recording, max_questions=3, scale=2.0)
    results = scorer.run_batch(
        [
            {"input": SOURCE, "output": SUMMARY},
            {"input": SOURCE, "output": "The bridge opened in 1950 and is 3 km long."},
        ]
    )
    for result in results:
        assert result.error is None, result.error
        assert 0.0 <= result.score <= 2.0
        assert result.usage.prompt_tokens > 0 and result.usage.output_tokens > 0
        assert result.preprocess_step_result["questions"], "the source yields questions"
    # Source-blindness on the real prompts: coverage never sees the source, questions never
    # the summary.
    tags = {r.tag for r in recording.requests}
    assert {"summarization.alignment", "summarization.questions", "summarization.coverage"} <= tags
    for request in recording.requests:
        if request.tag == "summarization.coverage":
            assert "Joseph Strauss was the chief engineer" not in _text(request)
            assert "1,280 metres" not in _text(request)
        if request.tag == "summarization.questions":
            assert SUMMARY not in _text(request)
            assert "1950" not in _text(request)


@pytest.mark.slow
def test_context_recall_end_to_end(engine):
    scorer = create_context_recall_scorer(engine, context=PASSAGES)
    result = scorer.run(input="Who built the Golden Gate Bridge?", output="x", ground_truth=ANSWER)
    assert result.error is None, result.error
    assert 0.0 <= result.score <= 1.0
    assert result.usage.prompt_tokens > 0 and result.usage.output_tokens > 0


@pytest.mark.slow
def test_a_reply_cut_by_max_tokens_is_reported_as_length(engine):
    request = questions_request(SOURCE, 2)
    cut = JudgeRequest(request.tag, request.messages, request.schema, max_tokens=4)
    (reply,) = engine.generate([cut])
    assert reply.finish_reason == "length"
    assert reply.output_tokens == 4
    assert reply.parsed is None and reply.error == "reply cut at max_tokens=4"


@pytest.mark.slow
def test_a_prompt_over_the_context_length_is_an_error_reply(engine):
    long = JudgeRequest("summarization.reason", judge_chat("word " * 9000), Reason, 50)
    fine = questions_request(SOURCE, 2)
    replies = engine.generate([long, fine])
    assert replies[0].finish_reason == "error"
    assert "exceeds max_model_len=8192" in replies[0].error
    assert replies[1].finish_reason in ("stop", "length")


@pytest.mark.slow
def test_it_counts_tokens_for_the_context_length_check(engine):
    assert engine.count_tokens("") == 0
    assert 0 < engine.count_tokens("The Golden Gate Bridge opened in 1937.") < 20
    assert engine.max_model_len == 8192
