"""Rows: one dataset row, and its fields as a scorer reads them.

Every entry point has the same rows: a file's records (`read_rows`) and a Python caller's dicts
alike become `Row`s. A scorer reads the fields it needs from a row's `Fields` (the row with
the column map of `--map` applied) and checks them itself, raising `InputError` that names
the field (`summary: missing (no 'summary' column or a null value)`); the runner adds the
row's label. Nothing here knows a scorer: which field feeds what is each scorer's own
(`evalgpu.scorers.summarization`, `evalgpu.scorers.context_recall`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evalgpu.data import RowError, read_rows, replace_surrogates
from evalgpu.results import InputError

__all__ = [
    "FIELDS",
    "IDS_NAMED",
    "Fields",
    "RepeatedIds",
    "Row",
    "RowReader",
    "file_rows",
    "kind",
    "python_rows",
    "row_id",
    "row_label",
]

FIELDS = ("id", "input", "output", "source", "summary", "ground_truth", "context")
"""Row fields; `--map FIELD=COLUMN` reads a field from another column."""

IDS_NAMED = 20
"""Repeated ids named one by one (`RepeatedIds.note`); the rest are counted in summary.json."""


@dataclass(frozen=True)
class Row:
    """One dataset row on its way to the scorers."""

    file: int
    """Index of its data file in the run's files (0 for rows from Python)."""
    number: int
    """1-based line number (JSON Lines, CSV) or element number (JSON, Parquet, Python)."""
    record: dict[str, Any] | RowError
    """The row's fields, or why it could not be read."""
    id: str | None = None
    """Its id, as records carry it (`RowReader.read` takes it once, through the column map)."""
    problem: str | None = None
    """Why it cannot be scored before any scorer reads it (unreadable, an id of a wrong type)."""
    group: str | None = None
    """What rows that share judge calls have in common (`RowReader.read`: the source, else
    the input, else the ground truth); None for a row that makes no judge calls."""
    todo: tuple[str, ...] | None = None
    """The scorers still to score it (`evalgpu.storage.OutputFolder.pending` decides); None:
    every scorer of the run."""


@dataclass(frozen=True)
class Fields:
    """A row's fields as a scorer reads them: by field name, through the column map.

    Args:
        record: the row's columns.
        mapping: field -> column (`--map`); a field not in it is read from its own column.
    """

    record: Mapping[str, Any]
    mapping: Mapping[str, str] = field(default_factory=dict)

    def column(self, name: str) -> str:
        """The column a field is read from."""
        return self.mapping.get(name, name)

    def get(self, name: str, *alternatives: str) -> Any:
        """A field's value (None when absent or null).

        `alternatives` are read in order when the field is null and not mapped: a field mapped
        to a column is read from that column alone (`summary` then `output`, say).
        """
        value = self.record.get(self.column(name))
        if value is None and name not in self.mapping:
            for other in alternatives:
                value = self.record.get(self.column(other))
                if value is not None:
                    break
        return value

    def missing(self, name: str) -> InputError:
        """The error of a field the row lacks, naming the column looked for."""
        return InputError(f"{name}: missing (no {self.column(name)!r} column or a null value)")


def file_rows(
    paths: Sequence[Path],
    *,
    limit: int | None = None,
    on_file_error: Callable[[str], None] = lambda _: None,
) -> Iterator[Row]:
    """The rows of every file in order, up to `limit` in all, read one at a time.

    A file that cannot be read, or stops partway, is reported to `on_file_error` (the message
    names it, whatever the reader raised) and the next file is read; a row that cannot be read
    is a `Row` holding a `RowError`.
    """
    n = 0
    for index, path in enumerate(paths):
        try:
            for number, record in read_rows(path):
                if limit is not None and n >= limit:
                    return
                n += 1
                yield Row(index, number, record)
        except Exception as exc:
            # OSError and ValueError say what is wrong; anything else is named by its type.
            text = str(exc)
            if not isinstance(exc, (OSError, ValueError)):
                text = f"cannot be read ({type(exc).__name__}: {text})"
            text = replace_surrogates(text)
            on_file_error(text if str(path) in text else f"{path}: {text}")


def python_rows(items: Iterable[Any]) -> Iterator[Row]:
    """Rows from a Python iterable of dicts, numbered from 1; anything else is a bad row."""
    for number, item in enumerate(items, 1):
        if isinstance(item, dict):
            yield Row(0, number, item)
        else:
            yield Row(0, number, RowError(f"a row must be a dict, got {kind(item)}"))


class RowReader:
    """Reads rows with `mapping` (field -> column) applied: their ids, groups and fields.

    Args:
        mapping: field -> column, for rows whose columns have other names.

    Raises:
        ValueError: `mapping` names a field that is not one of `FIELDS`, or no column.
    """

    def __init__(self, mapping: Mapping[str, str] | None = None) -> None:
        self.mapping = dict(mapping or {})
        for key, column in self.mapping.items():
            if key not in FIELDS:
                raise ValueError(f"map: unknown field {key!r}; the fields are {', '.join(FIELDS)}")
            if not column:
                raise ValueError(f"map: {key}= needs a column name")

    def read(self, rows: Iterable[Row]) -> Iterator[Row]:
        """The rows with what every later step reads of them taken once: `Row.id`,
        `Row.problem` (an unreadable row, an id of a wrong type) and `Row.group`."""
        for row in rows:
            ident, problem = row_id(row.record, self.mapping.get("id", "id"))
            yield replace(row, id=ident, problem=problem, group=self._group(row.record))

    def _group(self, record: dict[str, Any] | RowError) -> str | None:
        if isinstance(record, RowError):
            return None
        for key in ("source", "input", "ground_truth"):
            value = record.get(self.mapping.get(key, key))
            if value is not None:
                return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return None

    def fields(self, record: dict[str, Any]) -> Fields:
        """The row's `Fields`, the mapping applied: what a scorer reads its inputs from."""
        return Fields(record, self.mapping)


def row_label(
    row: Row, files: Sequence[str | None], noun: str = "row", *, named: bool = True
) -> str:
    """How messages name a row: `[file ]row N[ (id "x")]` (the file only when there are
    several; the id when `named` and the row has one)."""
    label = f"{noun} {row.number}"
    if len(files) > 1:
        label = f"{files[row.file]} {label}"
    if named and row.id is not None:
        label += f" (id {json.dumps(row.id, ensure_ascii=False)})"
    return label


def row_id(record: dict[str, Any] | RowError, column: str) -> tuple[str | None, str | None]:
    """The row's id (from `column`) as a string or None, and an error when of a wrong type.

    A row that could not be read has its reader's error, and its id when the row was parsed
    (lone surrogates in the id replaced, so that it can be written).
    """
    if isinstance(record, RowError):
        ident = None
        if record.record is not None:
            ident, _ = row_id(record.record, column)
        return ident, record.message
    ident = record.get(column)
    if isinstance(ident, str):
        return replace_surrogates(ident), None
    if ident is None:
        return ident, None
    if isinstance(ident, int) and not isinstance(ident, bool):
        return str(ident), None
    if isinstance(ident, float) and ident.is_integer():
        return str(int(ident)), None
    return None, f"id: must be a string or an integer, got {kind(ident)}"


def kind(value: Any) -> str:
    """How messages name a value's type: "a number", "a string", "a list", "an object"."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class RepeatedIds:
    """Spots rows whose id an earlier row of the run already had (in any of its files).

    Memory: a set of every distinct id string seen (about 60 bytes plus the id's length each;
    some 10 MB per 100K rows), so that repeats are found exactly in one pass; rows without an
    id are not tracked. Repeated rows are still scored: they are the user's rows.

    Args:
        examples: repeats kept (with where they are) for `summary.json`.
    """

    def __init__(self, examples: int = 10) -> None:
        self.seen: set[str] = set()
        self.repeated: set[str] = set()
        self.count = 0
        """Rows whose id was seen before (a row repeating an id twice counts twice)."""
        self.examples: list[dict[str, Any]] = []
        self.limit = examples

    def check(self, ident: str | None, file: str | None, row: int) -> bool:
        """Note the row's id; True the first time an id repeats (the time to name it)."""
        if ident is None:
            return False
        if ident not in self.seen:
            self.seen.add(ident)
            return False
        self.count += 1
        if ident in self.repeated:
            return False
        self.repeated.add(ident)
        if len(self.examples) < self.limit:
            self.examples.append({"id": ident, "file": file, "row": row})
        return True

    def note(self, row: Row, files: Sequence[str | None]) -> str | None:
        """Note the row's id (`check`); the line to show when it names a repeat, else None.

        The first `IDS_NAMED` repeated ids are named one by one, then one line says that the
        rest are only counted.
        """
        ident = row.id
        if not self.check(ident, files[row.file], row.number):
            return None
        named = len(self.repeated)
        if named <= IDS_NAMED:
            return (
                f"{row_label(row, files, named=False)}: id {json.dumps(ident, ensure_ascii=False)} "
                "repeats an earlier row's id (both are scored)"
            )
        if named == IDS_NAMED + 1:
            return "further repeated ids are only counted in summary.json"
        return None

    def summary(self) -> dict[str, Any]:
        """`{"count": rows repeating an id, "ids": distinct ids repeated, "examples": [...]}`."""
        return {"count": self.count, "ids": len(self.repeated), "examples": list(self.examples)}
