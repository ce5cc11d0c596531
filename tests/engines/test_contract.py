"""The engine contract (docs/SEMANTICS.md §2): every engine in conftest.ENGINES must pass these.

One wave mixes two schemas (and two budgets), interleaved, so that an engine that batches by
schema must still put each reply back in its request's place.
"""

from __future__ import annotations

import pytest

from evalgpu.engines import Engine, JudgeReply, JudgeRequest
from evalgpu.scorers.summarization import questions_request, reason_request
from evalgpu.verdicts import Questions, Reason

BRIDGE = "The Golden Gate Bridge opened in 1937. It spans 2.7 kilometres across the strait."
TOWER = "The Eiffel Tower was finished in 1889. It is 330 metres tall."


def wave() -> list[JudgeRequest]:
    reason = reason_request(
        [{"claim": "The bridge opened in 1937.", "supported": True, "reason": "stated"}],
        [{"question": "Did the bridge open in 1937?", "answered": False, "reason": "absent"}],
        {"alignment": 1.0, "coverage": 0.0},
    )
    return [questions_request(BRIDGE, 2), reason, questions_request(TOWER, 2)]


@pytest.fixture(scope="module")
def answered(any_engine: Engine) -> tuple[list[JudgeRequest], list[JudgeReply]]:
    requests = wave()
    return requests, any_engine.generate(requests)


def test_it_is_an_engine(any_engine):
    assert isinstance(any_engine, Engine)
    assert isinstance(any_engine.name, str) and any_engine.name


def test_one_reply_per_request_in_order(answered):
    requests, replies = answered
    assert len(replies) == len(requests)
    assert all(isinstance(r, JudgeReply) for r in replies)
    assert requests[0].schema is not requests[1].schema
    for request, reply in zip(requests, replies, strict=True):
        if reply.error is None:
            assert isinstance(reply.parsed, request.schema)
        else:
            assert reply.parsed is None and isinstance(reply.error, str)
    # The two schemas come back where they were asked, not grouped.
    kinds = [type(r.parsed) for r in replies if r.parsed is not None]
    expected = [q.schema for q, r in zip(requests, replies, strict=True) if r.parsed is not None]
    assert kinds == expected
    assert all(issubclass(k, (Questions, Reason)) for k in kinds)


def test_replies_carry_counts_and_a_finish_reason(answered):
    _, replies = answered
    for reply in replies:
        assert isinstance(reply.text, str)
        for count in (reply.prompt_tokens, reply.output_tokens, reply.cached_tokens):
            assert isinstance(count, int) and count >= 0
        assert reply.prompt_tokens > 0 and reply.output_tokens > 0
        assert isinstance(reply.finish_reason, str) and reply.finish_reason
        if reply.finish_reason == "length":
            assert reply.error is not None


def test_an_empty_wave_gets_no_replies(any_engine):
    assert any_engine.generate([]) == []
