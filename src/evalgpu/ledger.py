"""What is done: the latest outcome of every (file, row, scorer) of a stream of records.

An output folder keeps one to answer "is this row done?" (`evalgpu.storage.OutputFolder.done`);
the aggregates keep their own to count each (row, scorer) once (`evalgpu.aggregate`).
"""

from __future__ import annotations

from evalgpu.results import ERROR_KINDS, Record

__all__ = ["FAILED", "NONE", "SCORED", "Ledger", "failure_state", "outcome"]

NONE, FAILED, SCORED = 0, 1, 2
"""A (file, row, scorer)'s latest outcome in a `Ledger` (FAILED: with no error kind)."""
_KIND_STATE: dict[str, int] = {kind: 3 + i for i, kind in enumerate(ERROR_KINDS)}
_FAILED_STATES = (FAILED, *_KIND_STATE.values())


def failure_state(kind: object) -> int:
    """The `Ledger` state of a failure of `kind` (an `ErrorKind`; anything else: FAILED)."""
    return _KIND_STATE.get(str(kind), FAILED)


def outcome(record: Record) -> int:
    """A record's outcome: SCORED (a score and no error), else its `failure_state`."""
    score = record.get("score")
    if record.get("error") is None and isinstance(score, (int, float)):
        return SCORED
    return failure_state(record.get("errorKind"))


class Ledger:
    """What is done: the latest outcome of every (file, row, scorer), a byte each.

    The byte is NONE, SCORED, or a failure with its error kind (`failure_state`; a record
    written before kinds existed is FAILED). A (row, scorer) may have several records:
    failures retried by a resumed run, then a success. A success stays; a failure counts only
    while no success follows it.

    Args:
        files: the data file names that records carry in `file`, in order.
    """

    def __init__(self, files: list[str]) -> None:
        self.files = {name: i for i, name in enumerate(files)}
        self._state: dict[tuple[int, str], bytearray] = {}

    def file_index(self, record: Record) -> int:
        """The index of a record's file (-1: not a file of this folder)."""
        if len(self.files) <= 1:
            return 0
        return self.files.get(str(record.get("file")), -1)

    def add(self, record: Record) -> int | None:
        """Mark a record's outcome (`outcome`); returns the state before it.

        None: the record names no row of these files (another file, no row number), and
        nothing is marked.
        """
        file, row = self.file_index(record), record.get("row")
        if file < 0 or not isinstance(row, int) or row < 0:
            return None
        return self.mark(file, row, str(record.get("scorer")), outcome(record))

    def state(self, file: int, row: int, scorer: str) -> int:
        states = self._state.get((file, scorer))
        return states[row] if states is not None and row < len(states) else NONE

    def done(self, file: int, row: int, scorer: str) -> bool:
        """True when (file, row, scorer) already has a successful record."""
        return self.state(file, row, scorer) == SCORED

    def mark(self, file: int, row: int, scorer: str, outcome: int) -> int:
        """Record an outcome (SCORED or a `failure_state`); returns the state before it.

        A success is never undone by a later failure.
        """
        states = self._state.setdefault((file, scorer), bytearray())
        if row >= len(states):
            states.extend(bytes(max(row + 1 - len(states), len(states) // 2)))
        before = states[row]
        if outcome == SCORED or before != SCORED:
            states[row] = outcome
        return before

    def counts(self, scorer: str) -> tuple[int, int]:
        """(scored, failed) for a scorer: rows whose latest outcome is a score / an error."""
        scored = failed = 0
        for (_, s), states in self._state.items():
            if s == scorer:
                scored += states.count(SCORED)
                failed += sum(states.count(state) for state in _FAILED_STATES)
        return scored, failed

    def error_kinds(self, scorer: str) -> dict[str, int]:
        """Failed rows of a scorer by error kind (every kind, 0 included; "unknown" only for
        records that carry none)."""
        found: dict[str, int] = {kind: 0 for kind in ERROR_KINDS}
        unknown = 0
        for (_, s), states in self._state.items():
            if s == scorer:
                for kind, state in _KIND_STATE.items():
                    found[kind] += states.count(state)
                unknown += states.count(FAILED)
        if unknown:
            found["unknown"] = unknown
        return found
