"""Verdict schemas: the bounds that make a constrained reply fit its budget and keep a small
judge off the empty path, passage numbers that can only name a passage that exists, the
verdict first in every check, and `p`, which the engine attaches and the judge cannot write."""

from __future__ import annotations

import json
import re

import pytest
from outlines_core.json_schema import build_regex_from_schema  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalgpu.scorers.summarization import ENGLISH_CLOSED
from evalgpu.verdicts import (
    ENUM_PASSAGES,
    MAX_PASSAGES_CITED,
    Answered,
    Claims,
    SaysYes,
    Supported,
    Verdict,
    attach_p,
    attribution_schema,
    distinct,
    has_soft_verdicts,
    mean_p,
    questions_schema,
)

CHECKS = [Supported, SaysYes, Answered, attribution_schema(3)]


def _passages(schema: dict) -> dict:
    return schema["properties"]["passages"]


def test_passage_numbers_are_an_enum_in_the_schema_every_engine_compiles():
    passages = _passages(attribution_schema(3).model_json_schema())
    assert passages["items"]["enum"] == [1, 2, 3]
    assert passages["maxItems"] == 3
    many = _passages(attribution_schema(ENUM_PASSAGES + 1).model_json_schema())
    assert many["maxItems"] == MAX_PASSAGES_CITED


def test_the_compiled_constraint_only_matches_existing_passages():
    pattern = re.compile(
        build_regex_from_schema(json.dumps(attribution_schema(3).model_json_schema()))
    )

    def reply(numbers: str) -> str:
        return f'{{"supported":true,"passages":[{numbers}]}}'

    assert pattern.fullmatch(reply("1,3"))
    assert pattern.fullmatch(reply(""))
    assert not pattern.fullmatch(reply("4"))
    assert not pattern.fullmatch(reply("0"))


def test_out_of_range_numbers_fail_validation_with_or_without_the_enum():
    for n in (3, ENUM_PASSAGES + 1):
        schema = attribution_schema(n)
        with pytest.raises(ValidationError):
            schema.model_validate({"supported": True, "passages": [n + 1]})
        with pytest.raises(ValidationError):
            schema.model_validate({"supported": True, "passages": [0]})
        assert schema.model_validate({"supported": True, "passages": [n]}).passages == [n]


def test_attribution_schemas_are_built_once_per_count():
    assert attribution_schema(3) is attribution_schema(3)
    assert attribution_schema(3) is not attribution_schema(4)
    assert issubclass(attribution_schema(3), Verdict)


# -- lower bounds ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "reply"),
    [
        (Claims, '{"claims":[]}'),
        (questions_schema(3), '{"questions":[]}'),
        (questions_schema(3, ENGLISH_CLOSED), '{"questions":[]}'),
        # a check without its verdict
        (Supported, "{}"),
        (SaysYes, "{}"),
        (Answered, "{}"),
        (attribution_schema(3), '{"passages":[]}'),
    ],
)
def test_a_reply_shorter_than_its_step_implies_neither_decodes_nor_validates(schema, reply):
    pattern = re.compile(build_regex_from_schema(json.dumps(schema.model_json_schema())))
    assert not pattern.fullmatch(reply)  # constrained decoding cannot produce it
    with pytest.raises(ValidationError):
        schema.model_validate_json(reply)


@pytest.mark.parametrize("n", [0, -1, True, 1.5])
def test_counts_must_be_positive_integers(n):
    with pytest.raises(ValueError, match=r"^max_questions must be >= 1, got "):
        questions_schema(n)
    with pytest.raises(ValueError, match=r"^n_passages must be >= 1, got "):
        attribution_schema(n)


# -- checks: one verdict, first -------------------------------------------------------------


@pytest.mark.parametrize("schema", CHECKS)
def test_a_check_is_one_boolean_verdict_written_first(schema):
    properties = schema.model_json_schema()["properties"]
    first = next(iter(properties))
    assert properties[first]["type"] == "boolean"
    assert sum(p.get("type") == "boolean" for p in properties.values()) == 1
    assert schema.model_json_schema()["required"][0] == first
    # what a constrained decoder writes: the verdict is the first value of the reply
    pattern = build_regex_from_schema(json.dumps(schema.model_json_schema()))
    assert pattern.startswith(r'\{[ ]?"' + first + '"')


@pytest.mark.parametrize(
    ("schema", "reply", "verdict"),
    [
        (Supported, '{"supported":true}', True),
        (SaysYes, '{"yes":false}', False),
        (Answered, '{"answered":true}', True),
        (attribution_schema(3), '{"supported":true,"passages":[2]}', True),
    ],
)
def test_a_check_reply_parses_to_its_verdict(schema, reply, verdict):
    parsed = schema.model_validate_json(reply)
    assert next(v for v in parsed.model_dump().values() if isinstance(v, bool)) is verdict
    assert parsed.p is None  # until the engine attaches it


# -- closed questions ------------------------------------------------------------------------


def test_a_pattern_bounds_every_question_beside_its_length():
    schema = questions_schema(3, ENGLISH_CLOSED)
    assert schema is questions_schema(3, ENGLISH_CLOSED)  # one class per (bound, pattern)
    assert schema is not questions_schema(3)
    items = schema.model_json_schema()["properties"]["questions"]["items"]
    assert items["pattern"] == ENGLISH_CLOSED
    assert "minLength" not in items and "maxLength" not in items  # outlines would drop it
    assert re.fullmatch(ENGLISH_CLOSED, "Is " + "x" * 190 + "?")
    assert not re.fullmatch(ENGLISH_CLOSED, "Is " + "x" * 191 + "?")
    assert (
        "pattern" not in questions_schema(3).model_json_schema()["properties"]["questions"]["items"]
    )
    ok = schema.model_validate_json('{"questions":["Did the company start in 1995?"]}')
    assert ok.questions == ["Did the company start in 1995?"]
    with pytest.raises(ValidationError, match="should match pattern"):
        schema.model_validate_json('{"questions":["Is it in Seattle?","Who founded the company?"]}')
    long = "Is " + "x" * 300 + "?"
    with pytest.raises(ValidationError, match="should match pattern"):  # too long for it
        schema.model_validate({"questions": [long]})


def test_outlines_core_compiles_the_closed_question_pattern_into_json():
    # vLLM's default structured-output backend (outlines) builds its regex this way: the
    # pattern must survive beside the length bound, and what it allows must stay JSON.
    regex = re.compile(
        build_regex_from_schema(json.dumps(questions_schema(2, ENGLISH_CLOSED).model_json_schema()))
    )
    assert regex.fullmatch('{"questions":["Did the company start in 1995?"]}')
    assert not regex.fullmatch('{"questions":["Who founded the company?"]}')
    assert not regex.fullmatch('{"questions":["Is "x" open?"]}')  # an unescaped quote


# -- soft verdicts: p is the engine's, never the judge's -------------------------------------


def test_p_is_not_in_the_schema_the_engine_constrains_to():
    for schema in CHECKS:
        text = json.dumps(schema.model_json_schema())
        assert '"p"' not in text
        assert '"additionalProperties": false' in text  # so the judge cannot write it either


@pytest.mark.parametrize(
    ("schema", "reply"),
    [
        (Supported, '{"supported":true,"p":0.99}'),
        (attribution_schema(3), '{"supported":true,"passages":[1],"p":0.99}'),
    ],
)
def test_a_reply_that_writes_p_is_refused(schema, reply):
    with pytest.raises(ValidationError, match="p is read from the judge's logits"):
        schema.model_validate_json(reply)


def test_p_is_attached_to_a_check_only_when_the_counts_match():
    reply = Supported.model_validate_json('{"supported":true}')
    assert not attach_p(reply, [0.8, 0.3])  # two probabilities for one boolean: none attached
    assert reply.p is None
    assert attach_p(reply, [0.8])
    assert reply.p == 0.8
    cited = attribution_schema(3).model_validate_json('{"supported":false,"passages":[]}')
    assert attach_p(cited, [0.1]) and cited.p == 0.1  # passage numbers are no booleans


class _Item(Verdict):
    claim: str
    ok: bool


class _Items(BaseModel):
    """A test-local reply with several verdicts, as a list-and-judge step would have."""

    model_config = ConfigDict(extra="forbid")
    items: list[_Item] = Field(min_length=1, max_length=4)


def test_p_is_attached_in_text_order_and_only_when_the_counts_match():
    reply = _Items.model_validate_json(
        '{"items":[{"claim":"a","ok":true},{"claim":"b","ok":false}]}'
    )
    assert [v.p for v in reply.items] == [None, None]
    assert attach_p(reply, [0.8, 0.3])
    assert [v.p for v in reply.items] == [0.8, 0.3]
    fresh = _Items.model_validate_json(reply.model_dump_json(exclude={"items": {"__all__": {"p"}}}))
    assert not attach_p(fresh, [0.8])  # one probability for two booleans: none attached
    assert [v.p for v in fresh.items] == [None, None]


def test_which_schemas_have_soft_verdicts():
    for schema in CHECKS:
        assert has_soft_verdicts(schema)  # a check is itself a verdict
    assert has_soft_verdicts(_Items)  # verdicts inside a list
    assert not has_soft_verdicts(Claims)
    assert not has_soft_verdicts(questions_schema(3))
    assert not has_soft_verdicts(questions_schema(3, ENGLISH_CLOSED))


def test_repeats_are_dropped_after_trimming_and_case_folding():
    kept, dropped = distinct(["Who won?", " who WON? ", "Who lost?", "who won?"])
    assert (kept, dropped) == (["Who won?", "Who lost?"], 2)


def test_mean_p_is_none_when_any_p_is_missing():
    assert mean_p([{"p": 0.2}, {"p": 0.6}]) == pytest.approx(0.4)
    assert mean_p([{"p": 0.2}, {"p": None}]) is None
    assert mean_p([]) == 0.0
