"""Verdict schemas: the bounds that make a constrained reply fit its budget and keep a small
judge off the empty path, passage numbers that can only name a passage that exists, and `p`,
which the engine attaches and the judge cannot write."""

from __future__ import annotations

import json
import re

import pytest
from outlines_core.json_schema import build_regex_from_schema  # type: ignore[import-untyped]
from pydantic import ValidationError

from evalgpu.verdicts import (
    ENUM_PASSAGES,
    Alignment,
    Claims,
    attach_p,
    attribution_schema,
    coverage_schema,
    distinct,
    has_soft_verdicts,
    mean_p,
    questions_schema,
)


def _passages(schema: dict) -> dict:
    verdict = next(d for name, d in schema["$defs"].items() if "Verdict" in name)
    return verdict["properties"]["passages"]


def test_passage_numbers_are_an_enum_in_the_schema_every_engine_compiles():
    passages = _passages(attribution_schema(3, 1).model_json_schema())
    assert passages["items"]["enum"] == [1, 2, 3]
    assert passages["maxItems"] == 3


def test_the_compiled_constraint_only_matches_existing_passages():
    pattern = re.compile(
        build_regex_from_schema(json.dumps(attribution_schema(3, 1).model_json_schema()))
    )

    def reply(numbers: str) -> str:
        verdict = f'{{"claim":"c","reason":"r","attributed":true,"passages":[{numbers}]}}'
        return f'{{"verdicts":[{verdict}]}}'

    assert pattern.fullmatch(reply("1,3"))
    assert not pattern.fullmatch(reply("4"))
    assert not pattern.fullmatch(reply("0"))


def test_out_of_range_numbers_fail_validation_with_or_without_the_enum():
    for n in (3, ENUM_PASSAGES + 1):
        schema = attribution_schema(n, 1)
        bad = {"verdicts": [{"claim": "c", "reason": "r", "attributed": True, "passages": [n + 1]}]}
        with pytest.raises(ValidationError):
            schema.model_validate(bad)
        good = {"verdicts": [{"claim": "c", "reason": "r", "attributed": True, "passages": [n]}]}
        assert schema.model_validate(good).verdicts[0].passages == [n]


# -- lower bounds ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "reply"),
    [
        (Alignment, '{"alignment":[]}'),
        (Claims, '{"claims":[]}'),
        (questions_schema(3), '{"questions":[]}'),
        (coverage_schema(2), '{"coverage":[{"question":"q","reason":"r","answered":true}]}'),
        (attribution_schema(3, 2), '{"verdicts":[]}'),
    ],
)
def test_a_reply_shorter_than_its_step_implies_neither_decodes_nor_validates(schema, reply):
    pattern = re.compile(build_regex_from_schema(json.dumps(schema.model_json_schema())))
    assert not pattern.fullmatch(reply)  # constrained decoding cannot produce it
    with pytest.raises(ValidationError):
        schema.model_validate_json(reply)


def test_coverage_takes_exactly_one_verdict_per_question():
    pattern = re.compile(
        build_regex_from_schema(json.dumps(coverage_schema(2).model_json_schema()))
    )
    verdict = '{"question":"q","reason":"r","answered":true}'
    assert pattern.fullmatch(f'{{"coverage":[{verdict},{verdict}]}}')
    assert not pattern.fullmatch(f'{{"coverage":[{verdict},{verdict},{verdict}]}}')


@pytest.mark.parametrize("n", [0, -1, True, 1.5])
def test_counts_must_be_positive_integers(n):
    with pytest.raises(ValueError, match=r"^n_questions must be >= 1, got "):
        coverage_schema(n)


# -- soft verdicts: p is the engine's, never the judge's -------------------------------------


def test_p_is_not_in_the_schema_the_engine_constrains_to():
    for schema in (Alignment, coverage_schema(2), attribution_schema(2, 1)):
        text = json.dumps(schema.model_json_schema())
        assert '"p"' not in text
        assert '"additionalProperties": false' in text  # so the judge cannot write it either


def test_a_reply_that_writes_p_is_refused():
    reply = '{"alignment":[{"claim":"c","reason":"r","supported":true,"p":0.99}]}'
    with pytest.raises(ValidationError, match="p is read from the judge's logits"):
        Alignment.model_validate_json(reply)


def test_p_is_attached_in_text_order_and_only_when_the_counts_match():
    reply = Alignment.model_validate_json(
        '{"alignment":[{"claim":"a","reason":"r","supported":true},'
        '{"claim":"b","reason":"r","supported":false}]}'
    )
    assert [v.p for v in reply.alignment] == [None, None]
    assert attach_p(reply, [0.8, 0.3])
    assert [v.p for v in reply.alignment] == [0.8, 0.3]
    fresh = Alignment.model_validate_json(
        reply.model_dump_json(exclude={"alignment": {"__all__": {"p"}}})
    )
    assert not attach_p(fresh, [0.8])  # one probability for two booleans: none attached
    assert [v.p for v in fresh.alignment] == [None, None]


def test_which_schemas_have_soft_verdicts():
    assert has_soft_verdicts(Alignment)
    assert has_soft_verdicts(coverage_schema(3))
    assert has_soft_verdicts(attribution_schema(2, 2))
    assert not has_soft_verdicts(Claims)
    assert not has_soft_verdicts(questions_schema(3))


def test_repeats_are_dropped_after_trimming_and_case_folding():
    kept, dropped = distinct(["Who won?", " who WON? ", "Who lost?", "who won?"])
    assert (kept, dropped) == (["Who won?", "Who lost?"], 2)


def test_mean_p_is_none_when_any_p_is_missing():
    assert mean_p([{"p": 0.2}, {"p": 0.6}]) == pytest.approx(0.4)
    assert mean_p([{"p": 0.2}, {"p": None}]) is None
    assert mean_p([]) == 0.0
