"""What is done: the latest outcome of each (file, row, scorer), a byte each."""

from __future__ import annotations

from evalgpu.ledger import FAILED, NONE, SCORED, Ledger, failure_state, outcome


def test_the_ledger_keeps_the_latest_outcome_and_never_undoes_a_success() -> None:
    ledger = Ledger(["a.jsonl", "b.jsonl"])
    assert ledger.file_index({"file": "b.jsonl"}) == 1 and ledger.file_index({"file": "c"}) == -1
    ledger.mark(0, 5, "s", failure_state("engine"))
    ledger.mark(0, 6, "s", failure_state(None))  # a record from before error kinds
    assert not ledger.done(0, 5, "s") and ledger.counts("s") == (0, 2)
    assert ledger.error_kinds("s") == {
        "input": 0,
        "too_long": 0,
        "invalid_reply": 0,
        "engine": 1,
        "unknown": 1,
    }
    ledger.mark(0, 5, "s", SCORED)
    ledger.mark(0, 5, "s", failure_state("input"))
    assert ledger.done(0, 5, "s") and ledger.counts("s") == (1, 1)
    assert not ledger.done(1, 5, "s")


def test_a_record_is_marked_by_its_outcome_and_one_of_another_file_is_not() -> None:
    ledger = Ledger(["a.jsonl", "b.jsonl"])
    scored = {"file": "b.jsonl", "row": 3, "scorer": "s", "score": 0.5, "error": None}
    assert outcome(scored) == SCORED
    assert outcome({**scored, "error": "boom"}) == FAILED
    assert outcome({**scored, "score": None, "errorKind": "engine"}) == failure_state("engine")
    assert ledger.add(scored) == NONE and ledger.done(1, 3, "s")
    assert ledger.add({**scored, "error": "boom"}) == SCORED and ledger.done(1, 3, "s")
    assert ledger.add({**scored, "file": "c.jsonl"}) is None
    assert ledger.add({**scored, "row": None}) is None
    assert ledger.counts("s") == (1, 0)
