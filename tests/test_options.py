"""`check_count` and `check_scale`: the one message for an option out of range, naming it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from evalgpu._options import check_count, check_scale


@pytest.mark.parametrize(("value", "least"), [(1, 1), (10**12, 1), (0, 0), (-2, -5), (3, 3)])
def test_a_count_of_at_least_the_least_passes(value: int, least: int) -> None:
    assert check_count("n", value, least) is None


def test_a_count_is_at_least_one_unless_told_otherwise() -> None:
    check_count("threads", 1)
    with pytest.raises(ValueError, match=r"^threads must be >= 1, got 0$"):
        check_count("threads", 0)
    check_count("limit", 0, least=0)
    with pytest.raises(ValueError, match=r"^limit must be >= 0, got -1$"):
        check_count("limit", -1, least=0)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (-3, "-3"), (2.0, "2.0"), ("4", "'4'"), (None, "None"), ([2], r"\[2\]")],
)
def test_a_count_that_is_no_int_of_at_least_one_names_the_option_and_the_value(
    value: Any, shown: str
) -> None:
    with pytest.raises(ValueError, match=rf"^max_questions must be >= 1, got {shown}$"):
        check_count("max_questions", value)


@pytest.mark.parametrize("value", [True, False])
def test_a_bool_is_no_count_though_python_calls_it_an_int(value: bool) -> None:
    assert isinstance(value, int)  # what the check must see past
    with pytest.raises(ValueError, match=rf"^batch_size must be >= 0, got {value}$"):
        check_count("batch_size", value, least=0)


@pytest.mark.parametrize("scale", [1, 1.0, 100, 0.25, 1e-9, 1e300])
def test_a_finite_scale_above_zero_passes(scale: float) -> None:
    assert check_scale(scale) is None


@pytest.mark.parametrize(
    ("scale", "shown"),
    [
        (0, "0"),
        (0.0, "0.0"),
        (-1.5, "-1.5"),
        (math.nan, "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        ("2", "'2'"),
        (None, "None"),
        (True, "True"),  # a bool is no scale, as it is no count
    ],
)
def test_a_scale_that_is_no_finite_number_above_zero_is_refused_with_its_value(
    scale: Any, shown: str
) -> None:
    with pytest.raises(ValueError, match=rf"^scale must be > 0, got {shown}$"):
        check_scale(scale)
