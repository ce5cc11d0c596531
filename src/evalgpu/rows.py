"""Rows: one dataset row, and which of its fields feeds which argument of a scorer's steps.

Every entry point has the same rows: a file's records (`read_rows`) and a Python caller's dicts
alike become `Row`s, and `RowReader` turns a row into a scorer's steps. It reads the row's
fields (through a column map like `--map`), checks their types, and raises `InputError` that
names the field when the row cannot be scored as it is (`summary: missing (no 'summary'
column or a null value)`); the runner adds the row's label. Mapping, kept explicit:

- summarization: `steps(input=row input or source, output=summary or output, source=source)`;
  an agent-shaped row (`input.inputMessages`, `output` messages) passes input and output as
  they are, and its source is the first user message unless the row has a `source`;
- context recall: `steps(input=question, output=output, ground_truth, context=context)`; a row
  without `context` uses the scorer's own context option when it has one, else (agent-shaped
  rows) its finished tool calls' results as the passages. No (or a blank) ground truth is
  scored 0 without a model call (docs/SEMANTICS.md §1.3), not an error.

The scorers' texts (source, summary) are worked out once, in the scorer's steps; nothing here
repeats that (the context-length check reads them back from the requests: `evalgpu.fit`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalgpu.data import RowError, read_rows, replace_surrogates
from evalgpu.messages import extract_tool_results, is_agent_run
from evalgpu.results import InputError, Steps
from evalgpu.scorers._scorer import Scorer

__all__ = [
    "FIELDS",
    "IDS_NAMED",
    "RepeatedIds",
    "Row",
    "RowReader",
    "file_rows",
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
            yield Row(0, number, RowError(f"a row must be a dict, got {_kind(item)}"))


class RowReader:
    """Builds one row's steps for a scorer, with `mapping` (field -> column) applied.

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

    def id(self, row: Row) -> tuple[str | None, str | None]:
        """The row's id (its mapped `id` column) and an error when it is of a wrong type."""
        return row_id(row.record, self.mapping.get("id", "id"))

    def _get(self, record: dict[str, Any], key: str) -> Any:
        return record.get(self.mapping.get(key, key))

    def _missing(self, key: str) -> str:
        column = self.mapping.get(key, key)
        return f"{key}: missing (no {column!r} column or a null value)"

    def steps(self, scorer: Scorer, record: dict[str, Any]) -> Steps:
        """The row's steps for `scorer`.

        Raises:
            InputError: a field is missing, blank or of a wrong type (the message names it).
        """
        if scorer.id == "summarization-scorer":
            return self._summarization(scorer, record)
        if scorer.id == "context-recall-scorer":
            return self._context_recall(scorer, record)
        truth = self._get(record, "ground_truth")
        return scorer.steps(self._get(record, "input"), self._get(record, "output"), truth)

    def _summarization(self, scorer: Scorer, record: dict[str, Any]) -> Steps:
        input_ = self._get(record, "input")
        source = self._get(record, "source")
        summary = self._get(record, "summary")
        if summary is None and "summary" not in self.mapping:
            summary = self._get(record, "output")
        if summary is None:
            raise InputError(self._missing("summary"))
        if not isinstance(summary, (str, list)):
            raise InputError(
                f"summary: must be a string or a list of messages, got {_kind(summary)}"
            )
        if source is not None and not isinstance(source, str):
            raise InputError(f"source: must be a string, got {_kind(source)}")
        if source is None and input_ is None and "source" not in scorer.fallbacks:
            raise InputError(self._missing("source"))
        per_run = {"source": source} if source is not None else {}
        return scorer.steps(input_ if input_ is not None else source, summary, None, **per_run)

    def _context_recall(self, scorer: Scorer, record: dict[str, Any]) -> Steps:
        input_ = self._get(record, "input")
        output = self._get(record, "output")
        truth = self._get(record, "ground_truth")
        if truth is None and "ground_truth" not in self.mapping:
            truth = record.get("groundTruth")
        context = self._get(record, "context")
        if truth is None or (isinstance(truth, str) and not truth.strip()):
            # Normative (docs/SEMANTICS.md §1.3): no ground truth scores 0 without a model call.
            return scorer.steps(input_, output, truth)
        if context is None and "context" in scorer.fallbacks:
            return scorer.steps(input_, output, truth)  # the scorer's own context option
        if context is None and is_agent_run(input_, output):
            # An agent-shaped row without a context column: its tool results are the context.
            results = extract_tool_results(output)
            if results:
                context = [
                    r["result"] if isinstance(r["result"], str) else json.dumps(r["result"])
                    for r in results
                ]
        if context is None:
            raise InputError(self._missing("context"))
        if isinstance(context, str):
            context = [context]
        if not isinstance(context, list):
            raise InputError(
                f"context: must be a list of strings or a string, got {_kind(context)}"
            )
        wrong = [p for p in context if not isinstance(p, str)]
        if wrong:
            raise InputError(
                f"context: must be a list of strings, got a list holding {_kind(wrong[0])}"
            )
        if not any(p.strip() for p in context):
            raise InputError("context: blank (no passage has text)")
        return scorer.steps(
            input_ if input_ is not None else "",
            output if output is not None else "",
            truth,
            context=context,
        )


def row_label(row: Row, files: Sequence[str | None], ident: str | None, noun: str = "row") -> str:
    """How messages name a row: `[file ]row N[ (id "x")]` (the file only when there are several)."""
    label = f"{noun} {row.number}"
    if len(files) > 1:
        label = f"{files[row.file]} {label}"
    if ident is not None:
        label += f" (id {json.dumps(ident, ensure_ascii=False)})"
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
    return None, f"id: must be a string or an integer, got {_kind(ident)}"


def _kind(value: Any) -> str:
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

    def note(self, ident: str | None, row: Row, files: Sequence[str | None]) -> str | None:
        """Note the row's id (`check`); the line to show when it names a repeat, else None.

        The first `IDS_NAMED` repeated ids are named one by one, then one line says that the
        rest are only counted.
        """
        if not self.check(ident, files[row.file], row.number):
            return None
        named = len(self.repeated)
        if named <= IDS_NAMED:
            return (
                f"{row_label(row, files, None)}: id {json.dumps(ident, ensure_ascii=False)} "
                "repeats an earlier row's id (both are scored)"
            )
        if named == IDS_NAMED + 1:
            return "further repeated ids are only counted in summary.json"
        return None

    def summary(self) -> dict[str, Any]:
        """`{"count": rows repeating an id, "ids": distinct ids repeated, "examples": [...]}`."""
        return {"count": self.count, "ids": len(self.repeated), "examples": list(self.examples)}
