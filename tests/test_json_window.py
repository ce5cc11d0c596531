"""`JsonWindow`: elements decoded across window refills, skipped without decoding when Python
cannot decode them, and refused (`TooLarge`) when they outgrow the window's cap."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from evalgpu._json_window import JsonWindow, TooLarge

DECODER = json.JSONDecoder()
BLOCKS = [1, 2, 3, 5, 8, 1 << 16]

DEEP = "[" * 5000 + "]" * 5000  # valid JSON, nested past Python's recursion limit
HUGE_INT = "7" * 5000  # valid JSON, over Python's 4,300-digit limit for int("...")


def window(text: str, block: int, max_chars: int = 1_000_000) -> JsonWindow:
    return JsonWindow(io.StringIO(text), block, max_chars)


def decode_all(w: JsonWindow) -> list[Any]:
    """Every whitespace-separated value of the window's file, decoded."""
    values = []
    while w.skip_space():
        values.append(w.decode(DECODER))
    return values


ELEMENTS = [
    {"id": "a", "summary": "Cats purr.", "n": 1.5e10, "deep": [[{"k": None}]]},
    [1, -2.25, "x", True, False, None],
    'a string with "quotes", \\backslashes\\ and ] } brackets',
    "Ünïcode ✓ 日本語",
    1234567890,
    True,
    False,
    None,
]


@pytest.mark.parametrize("block", BLOCKS)
def test_elements_split_across_refills_decode_whole(block: int) -> None:
    text = "\n  ".join(json.dumps(e, ensure_ascii=False) for e in ELEMENTS) + "\n"
    assert decode_all(window(text, block)) == ELEMENTS


@pytest.mark.parametrize("block", [1, 2, 3, 4])
def test_a_number_cut_by_the_window_is_read_to_its_end(block: int) -> None:
    # "12" decodes on its own: the window must read on to know that the number goes on.
    assert decode_all(window("12345678 9", block)) == [12345678, 9]
    assert decode_all(window("12345678", block)) == [12345678]  # and at the end of the file


@pytest.mark.parametrize("block", [1, 2, 3, 4, 5])
@pytest.mark.parametrize(("text", "value"), [("1.5e10", 1.5e10), ("-2.25E-3", -2.25e-3)])
def test_a_number_cut_after_its_point_or_its_exponent_is_read_to_its_end(
    block: int, text: str, value: float
) -> None:
    # The decoder stops before a bare "." or "e": the value looked whole a character short.
    assert decode_all(window(f"{text} 7", block)) == [value, 7]


@pytest.mark.parametrize("block", [1, 3])
def test_the_size_of_each_element_is_its_characters(block: int) -> None:
    w = window('  {"a": [1, 2]}   "xyz"  42', block)
    sizes = []
    while w.skip_space():
        w.decode(DECODER)
        sizes.append(w.size)
    assert sizes == [len('{"a": [1, 2]}'), len('"xyz"'), len("42")]


def test_skip_space_moves_past_whitespace_across_refills_and_says_when_the_file_ends() -> None:
    w = window(" \t\r\n" * 10 + "x", 3)
    assert w.skip_space() and w.peek() == "x"
    assert not window("", 4).skip_space()
    assert not window(" \n\t " * 20, 2).skip_space()


def test_the_window_reads_only_what_the_element_at_hand_needs() -> None:
    big = '"' + "x" * 100_000 + '"'
    f = io.StringIO('{"id": 1} ' + big)
    w = JsonWindow(f, 16, 1_000_000)
    assert w.skip_space() and w.decode(DECODER) == {"id": 1}
    assert f.tell() == 16 and len(w.text) == 16  # the big element is not read yet
    assert w.skip_space() and w.decode(DECODER) == "x" * 100_000


@pytest.mark.parametrize("text", ['{"id": "a"', "[1, 2,", '"no end', "tru", '{"a" 1}'])
def test_a_malformed_element_is_a_json_decode_error(text: str) -> None:
    w = window(text, 2)
    assert w.skip_space()
    with pytest.raises(json.JSONDecodeError):
        w.decode(DECODER)


def test_an_element_longer_than_the_cap_is_too_large() -> None:
    w = window('"' + "x" * 5000 + '" 1', 8, max_chars=1000)
    assert w.skip_space()
    with pytest.raises(TooLarge, match=r"^longer than 1,000 characters, or malformed past that$"):
        w.decode(DECODER)
    assert issubclass(TooLarge, ValueError)


def test_a_malformed_element_past_the_cap_is_too_large_before_the_file_ends() -> None:
    f = io.StringIO("{" + '"k": 1 ' * 1000 + "}")
    w = JsonWindow(f, 4, 100)
    assert w.skip_space()
    with pytest.raises(TooLarge):
        w.decode(DECODER)
    assert f.tell() < 1000  # refused without reading on to the end


def test_an_element_that_decodes_in_a_window_grown_past_the_cap_says_its_size() -> None:
    # The window doubles as it grows, so a value a little over the cap can still decode whole:
    # its size lets the caller refuse it (the data reader does).
    element = json.dumps(list(range(6)))  # 18 characters
    w = window(element, 4, max_chars=16)
    assert w.skip_space() and w.decode(DECODER) == list(range(6))
    assert w.size == len(element) > w.max_chars


@pytest.mark.parametrize("block", [7, 1 << 16])
@pytest.mark.parametrize(("element", "error"), [(DEEP, RecursionError), (HUGE_INT, ValueError)])
def test_an_element_python_cannot_decode_is_skipped_and_the_next_one_decodes(
    block: int, element: str, error: type[Exception]
) -> None:
    w = window(f'{element} {{"id": "next"}}', block)
    assert w.skip_space()
    with pytest.raises(error) as caught:
        w.decode(DECODER)
    assert not isinstance(caught.value, json.JSONDecodeError)
    assert w.peek() == element[0]  # pos stays at the element's start
    assert w.skip_value()
    assert w.skip_space() and w.decode(DECODER) == {"id": "next"}
    assert not w.skip_space()


TRICKY = [
    '{"a": "]]\\"[[{", "b": [["\\\\"], {"c": "}"}]}',  # brackets and escapes inside strings
    '"a \\"quoted\\" string with ] and }"',
    '"ends in a backslash \\\\"',
    "[" * 300 + '"\\u005d"' + "]" * 300,  # an escaped "]" deep inside
    "[]",
    "{}",
    '""',
]


@pytest.mark.parametrize("block", [1, 2, 3, 4, 5, 7, 1 << 16])
@pytest.mark.parametrize("element", TRICKY)
def test_skip_value_moves_exactly_past_a_value_whatever_the_window(
    block: int, element: str
) -> None:
    w = window(f"{element} , 12", block)
    assert w.skip_space()
    assert w.skip_value()
    assert w.skip_space() and w.peek() == ","
    w.pos += 1
    assert w.skip_space() and w.decode(DECODER) == 12


@pytest.mark.parametrize("block", [1, 3, 1 << 16])
def test_skip_value_moves_past_a_bare_number_or_literal_to_what_follows(block: int) -> None:
    for scalar in (HUGE_INT, "true", "-1.5e300"):
        for after in (",", "]", "}", " "):
            w = window(f"{scalar}{after}x", block)
            assert w.skip_space() and w.skip_value()
            assert w.peek() == after
    w = window(HUGE_INT, 5)  # a number at the end of the file
    assert w.skip_space() and w.skip_value()
    assert not w.skip_space()


@pytest.mark.parametrize("text", ['[1, [2, "]', '{"a": "\\"', '"no end', "[" * 5000])
@pytest.mark.parametrize("block", [1, 4, 1 << 16])
def test_skip_value_says_when_the_file_ends_inside_the_value(text: str, block: int) -> None:
    w = window(text, block)
    assert w.skip_space()
    assert w.skip_value() is False
