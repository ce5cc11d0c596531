"""Verdict schemas: the bounds that make a constrained reply fit its budget, and passage
numbers that can only name a passage that exists."""

from __future__ import annotations

import json
import re

import pytest
from outlines_core.json_schema import build_regex_from_schema  # type: ignore[import-untyped]
from pydantic import ValidationError

from evalgpu.verdicts import ENUM_PASSAGES, attribution_schema


def _passages(schema: dict) -> dict:
    verdict = next(d for name, d in schema["$defs"].items() if "Verdict" in name)
    return verdict["properties"]["passages"]


def test_passage_numbers_are_an_enum_in_the_schema_every_engine_compiles():
    passages = _passages(attribution_schema(3).model_json_schema())
    assert passages["items"]["enum"] == [1, 2, 3]
    assert passages["maxItems"] == 3


def test_the_compiled_constraint_only_matches_existing_passages():
    pattern = re.compile(
        build_regex_from_schema(json.dumps(attribution_schema(3).model_json_schema()))
    )

    def reply(numbers: str) -> str:
        verdict = f'{{"claim":"c","reason":"r","attributed":true,"passages":[{numbers}]}}'
        return f'{{"verdicts":[{verdict}]}}'

    assert pattern.fullmatch(reply("1,3"))
    assert not pattern.fullmatch(reply("4"))
    assert not pattern.fullmatch(reply("0"))


def test_out_of_range_numbers_fail_validation_with_or_without_the_enum():
    for n in (3, ENUM_PASSAGES + 1):
        schema = attribution_schema(n)
        bad = {"verdicts": [{"claim": "c", "reason": "r", "attributed": True, "passages": [n + 1]}]}
        with pytest.raises(ValidationError):
            schema.model_validate(bad)
        good = {"verdicts": [{"claim": "c", "reason": "r", "attributed": True, "passages": [n]}]}
        assert schema.model_validate(good).verdicts[0].passages == [n]
