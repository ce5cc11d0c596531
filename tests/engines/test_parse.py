"""The shared reply parser's soft-verdict helpers: which token commits to which literal, and
where the literals of a reply start."""

from __future__ import annotations

import pytest

from evalgpu.engines._parse import literal_class, literal_starts, soft_probability


@pytest.mark.parametrize(
    ("token", "kind"),
    [
        ("true", "true"),
        (" true", "true"),
        ("t", "true"),
        (" tr", "true"),
        ('":true', "true"),  # key end, colon and literal in one token
        ("true}", "true"),
        ("false,", "false"),
        (" fa", "false"),
        (" ", "lead"),
        ('":', "lead"),
        ("True", "other"),  # JSON literals are lower case
        ("the", "other"),
        ("truth", "other"),
        ('"t', "other"),  # a quote before a letter opens a string
        ("1", "other"),
        ("\u0120true", "true"),  # raw byte-level BPE piece of " true"
        ("\u2581false", "false"),  # raw SentencePiece piece of " false"
    ],
)
def test_literal_class(token, kind):
    assert literal_class(token) == kind


def test_literals_are_found_outside_strings_only():
    pieces = ['{"a":"the t', 'rue \\"f\\" fact",', '"b":', " false", ',"c":[tr', "ue]}"]
    assert literal_starts(pieces) == [(3, False), (4, True)]
    assert literal_starts(['{"b":', "\u0120true", "}"]) == [(1, True)]


def test_soft_probability_renormalises_over_the_two_literals():
    assert soft_probability(0.3, 0.1) == pytest.approx(0.75)
    assert soft_probability(0.0, 0.0) is None
