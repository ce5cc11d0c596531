"""`chunk_spans`: how a long prefill is cut into forward passes (pure logic, no model)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from evalgpu.engines._decode import chunk_spans


@pytest.mark.parametrize(
    ("length", "rows", "budget"), [(1, 1, 1024), (1024, 1, 1024), (1025, 1, 1024), (5000, 16, 1024)]
)
def test_spans_cover_every_column_once_in_order(length: int, rows: int, budget: int) -> None:
    spans = chunk_spans(length, rows, budget)
    assert spans[0][0] == 0 and spans[-1][1] == length
    assert all(end == start for (_, end), (start, _) in pairwise(spans))
    assert all(0 < (end - start) * rows <= max(budget, rows) for start, end in spans)


def test_a_prompt_within_the_budget_is_one_pass() -> None:
    assert chunk_spans(700, 1, 1024) == [(0, 700)]
    assert chunk_spans(64, 16, 1024) == [(0, 64)]


def test_rows_share_the_budget() -> None:
    assert chunk_spans(200, 16, 1024) == [(0, 64), (64, 128), (128, 192), (192, 200)]


def test_more_rows_than_budget_still_advances_one_column_at_a_time() -> None:
    assert chunk_spans(3, 8, 4) == [(0, 1), (1, 2), (2, 3)]


def test_empty_prompt_has_no_pass() -> None:
    assert chunk_spans(0, 1, 1024) == []
