"""The transformers engine's row constraints (llguidance) on a real tokenizer, no model.

Each reply is walked token by token as the decode loop walks it: a token is produced only if
the row's bitmask allows it. The tokenizer is SmolLM2's (cheap: no weights are loaded); the
tests skip when its folder is absent.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import version
from typing import Any

import pytest
from pydantic import BaseModel

from evalgpu.engines._decode import literal_masks
from evalgpu.models import models_dir
from evalgpu.scorers.summarization import CHINESE_CLOSED, ENGLISH_CLOSED, JAPANESE_CLOSED
from evalgpu.verdicts import (
    MAX_CLAIMS,
    Answered,
    Claims,
    SaysYes,
    Supported,
    attribution_schema,
    questions_schema,
)

VOCABULARY = 49152  # SmolLM2's output layer


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    folder = models_dir() / "smollm2-135m-instruct"
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"no tokenizer in {folder}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def grammars(tokenizer: Any) -> Any:
    from evalgpu.engines._constraint import Grammars

    return Grammars(tokenizer, VOCABULARY, {tokenizer.eos_token_id})


def _allowed(grammars: Any, constraint: Any) -> Any:
    import torch

    words = grammars.bitmask(1)
    constraint.allowed(words, 0)
    bits = (words.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.bool().view(-1)[:VOCABULARY]


def produces(grammars: Any, tokenizer: Any, schema: type[BaseModel], text: str) -> bool:
    """Whether constrained decoding can produce `text` and then end the reply."""
    constraint = grammars.start(schema)
    for token in tokenizer(text, add_special_tokens=False)["input_ids"]:
        if not _allowed(grammars, constraint)[token]:
            return False
        constraint.advance(token)
    ends = _allowed(grammars, constraint).nonzero().flatten().tolist()
    return constraint.is_finished and ends == [tokenizer.eos_token_id]


def test_a_complete_reply_allows_only_the_end_token(grammars, tokenizer):
    schema = attribution_schema(3)
    reply = json.dumps({"supported": True, "passages": [1, 3]})
    assert produces(grammars, tokenizer, schema, reply)
    constraint = grammars.start(schema)
    for token in tokenizer(reply, add_special_tokens=False)["input_ids"]:
        assert not constraint.is_finished
        constraint.advance(token)
    assert constraint.is_finished
    assert _allowed(grammars, constraint).nonzero().flatten().tolist() == [tokenizer.eos_token_id]


def test_whitespace_is_at_most_one_space(grammars, tokenizer):
    compact = json.dumps({"questions": ["Who built it?"]}, separators=(",", ":"))
    assert produces(grammars, tokenizer, questions_schema(2), compact)
    assert produces(grammars, tokenizer, questions_schema(2), '{ "questions" : [ "Who?" ] }')
    # llguidance 1.7 (what every vLLM since 0.26 pins) keeps whitespace to spaces but does not
    # apply `whitespace_pattern`, so a run of spaces passes there; 1.9 holds it to one.
    double = produces(grammars, tokenizer, questions_schema(2), '{"questions":  ["Who?"]}')
    assert double is (tuple(int(x) for x in version("llguidance").split(".")[:2]) < (1, 9))
    assert not produces(grammars, tokenizer, questions_schema(2), '{"questions":\n["Who?"]}')
    assert produces(grammars, tokenizer, Supported, '{ "supported" : true }')
    assert not produces(grammars, tokenizer, Supported, '{"supported":\ntrue}')


def test_list_bounds_are_enforced(grammars, tokenizer):
    assert not produces(grammars, tokenizer, Claims, '{"claims": []}')
    assert not produces(grammars, tokenizer, questions_schema(2), '{"questions": []}')
    for n in (1, 2, 3):
        reply = json.dumps({"questions": ["Did it open?"] * n})
        assert produces(grammars, tokenizer, questions_schema(2), reply) == (n <= 2)
    for n in (MAX_CLAIMS, MAX_CLAIMS + 1):
        reply = json.dumps({"claims": ["It opened."] * n})
        assert produces(grammars, tokenizer, Claims, reply) == (n == MAX_CLAIMS)


def test_string_lengths_are_enforced(grammars, tokenizer):
    def questions(text: str) -> str:
        return json.dumps({"questions": [text]})

    assert produces(grammars, tokenizer, questions_schema(1), questions("x" * 200))
    assert not produces(grammars, tokenizer, questions_schema(1), questions("x" * 201))
    assert not produces(grammars, tokenizer, questions_schema(1), questions(""))


def test_passage_numbers_name_existing_passages(grammars, tokenizer):
    schema = attribution_schema(3)

    def reply(passages: list[int]) -> str:
        return json.dumps({"supported": True, "passages": passages})

    assert produces(grammars, tokenizer, schema, reply([1, 3]))
    assert produces(grammars, tokenizer, schema, reply([]))
    assert not produces(grammars, tokenizer, schema, reply([4]))
    assert not produces(grammars, tokenizer, schema, reply([0]))


def test_the_verdict_is_written_before_the_passages(grammars, tokenizer):
    schema = attribution_schema(3)
    assert not produces(grammars, tokenizer, schema, '{"passages": [1], "supported": true}')
    assert not produces(grammars, tokenizer, schema, '{"passages": [1]}')


@pytest.mark.parametrize(
    ("schema", "verdict"),
    [
        (Supported, "supported"),
        (SaysYes, "yes"),
        (Answered, "answered"),
        (attribution_schema(3), "supported"),
    ],
)
def test_at_a_verdict_only_the_two_literals_and_punctuation_are_allowed(
    grammars, tokenizer, schema, verdict
):
    # The condition under which the decode loop reads p(true) (`Decoder._read_p`); in a check
    # it holds right after the first key: the judge decides at its first value.
    is_true, is_false, is_other = literal_masks(tokenizer, VOCABULARY)
    constraint = grammars.start(schema)
    for token in tokenizer(f'{{"{verdict}":', add_special_tokens=False)["input_ids"]:
        constraint.advance(token)
    allowed = _allowed(grammars, constraint)
    assert (allowed & is_true).any() and (allowed & is_false).any()
    assert not (allowed & is_other).any()


@pytest.mark.parametrize(
    ("question", "closed"),
    [
        ("Is the company based in Seattle?", True),
        ("Did the company start in 1995?", True),
        ("Who founded the company?", False),
        ("What is it?", False),
        ("Is the company based in Seattle", False),
        ("Is it? Or not?", False),
    ],
)
def test_an_english_closed_question_pattern_is_enforced(grammars, tokenizer, question, closed):
    schema = questions_schema(2, ENGLISH_CLOSED)
    reply = json.dumps({"questions": [question]})
    assert produces(grammars, tokenizer, schema, reply) == closed
    assert produces(grammars, tokenizer, questions_schema(2), reply)  # no pattern, any question


def test_an_open_question_cannot_even_start(grammars, tokenizer):
    constraint = grammars.start(questions_schema(2, ENGLISH_CLOSED))
    for token in tokenizer('{"questions": ["', add_special_tokens=False)["input_ids"]:
        constraint.advance(token)
    allowed = _allowed(grammars, constraint)
    (who,) = tokenizer("Who", add_special_tokens=False)["input_ids"]
    (is_,) = tokenizer("Is", add_special_tokens=False)["input_ids"]
    assert not allowed[who]
    assert allowed[is_]


def test_the_length_bound_holds_beside_the_pattern(grammars, tokenizer):
    schema = questions_schema(1, ENGLISH_CLOSED)
    assert produces(
        grammars, tokenizer, schema, json.dumps({"questions": ["Is " + "x" * 190 + "?"]})
    )
    assert not produces(
        grammars, tokenizer, schema, json.dumps({"questions": ["Is " + "x" * 191 + "?"]})
    )


@pytest.mark.parametrize(
    ("pattern", "closed", "open_"),
    [
        (CHINESE_CLOSED, "该公司总部在西雅图吗？", "该公司总部在哪里？"),
        (JAPANESE_CLOSED, "本社はシアトルにありますか？", "本社はどこ？"),
    ],
)
def test_chinese_and_japanese_closed_question_patterns_compile_and_hold(
    grammars, tokenizer, pattern, closed, open_
):
    # (written as they are: the grammar allows no \\u escape)
    schema = questions_schema(2, pattern)
    for question, ok in ((closed, True), (open_, False)):
        reply = json.dumps({"questions": [question]}, ensure_ascii=False)
        assert produces(grammars, tokenizer, schema, reply) == ok


def test_a_token_the_mask_forbids_is_refused(grammars, tokenizer):
    constraint = grammars.start(Supported)
    (token,) = tokenizer("x", add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match=f"^token {token} rejected"):
        constraint.advance(token)


@pytest.mark.slow
def test_the_default_judge_compiles_a_schema_at_once_and_answers_validly():
    # Guards against an eager compile: outlines-core's index of `Alignment` (the former
    # list-and-judge schema) took 114 s and 7.1 GB on this 151k-token vocabulary; llguidance's
    # takes milliseconds. The bound is thousands of times the expected time, so that only a
    # return to an eager compile fails.
    import time

    folder = models_dir() / "qwen2.5-coder-1.5b-instruct"
    if not (folder / "config.json").is_file():
        pytest.skip(f"no model in {folder}")
    from evalgpu.engines.transformers import TransformersEngine
    from evalgpu.scorers.summarization import questions_request

    engine = TransformersEngine(str(folder), dtype="bfloat16", batch_size=1)
    engine.grammars()  # the vocabulary, once per engine
    started = time.monotonic()
    engine.index(questions_schema(10, ENGLISH_CLOSED))  # bounded strings, lists and a pattern
    assert time.monotonic() - started < 5.0

    source = "The Golden Gate Bridge opened in May 1937. Joseph Strauss was its chief engineer."
    (reply,) = engine.generate([questions_request(source, 2)])
    assert reply.error is None, reply.error
    assert reply.finish_reason == "stop"
    assert 1 <= len(reply.parsed.questions) <= 2
    assert reply.parsed.questions == [  # the closed-question pattern held on the real judge
        q for q in reply.parsed.questions if re.fullmatch(ENGLISH_CLOSED, q)
    ]
