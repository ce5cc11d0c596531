"""The rows still to score, as chunks for engine replicas (`run --ray`, `evalgpu.distributed`).

`read_chunks` reads the run's files with evalgpu's own readers (the row numbers, field mapping
and bad-row records of a local run), passes over rows that the output folder already has a
success for, checks ids for repeats in read order, and cuts the rest into chunks of about
`chunk_size` rows, only where the source changes: a source's summaries then go to one replica,
which asks its questions once. Nothing here needs Ray.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalgpu.data import RowError
from evalgpu.ledger import Ledger
from evalgpu.rows import RepeatedIds, Row, RowReader, file_rows
from evalgpu.settings import RunSettings

__all__ = ["Chunk", "ReadNotes", "read_chunks"]

SKIPPED_PER_CHUNK = 10_000
"""Rows already scored are counted, not sent: an empty chunk reports every this many."""


@dataclass
class ReadNotes:
    """What the read met on the way to a chunk, passed through its replica to the driver."""

    skipped: int = 0
    """Rows passed over because every scorer already has a success for them."""
    file_errors: list[str] = field(default_factory=list)
    """Data files that could not be read, or stopped partway (each message names the file)."""
    notices: list[str] = field(default_factory=list)
    """Rows repeating an earlier row's id, named as a local run names them."""
    repeats: RepeatedIds | None = None
    """On the last chunk only: the run's repeated ids (for summary.json)."""


@dataclass
class Chunk:
    """One unit of work for a replica: rows to score, and what the read met on the way."""

    rows: list[Row] = field(default_factory=list)
    done: set[tuple[int, int, str]] = field(default_factory=set)
    """(file, row, scorer id) of these rows that already have a success (not scored again)."""
    notes: ReadNotes = field(default_factory=ReadNotes)


def _group(record: dict[str, Any] | RowError, mapping: dict[str, str]) -> str | None:
    """What rows that share judge calls have in common: the source (else the ground truth)."""
    if isinstance(record, RowError):
        return None
    for key in ("source", "input", "ground_truth"):
        value = record.get(mapping.get(key, key))
        if value is not None:
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return None


def read_chunks(
    settings: RunSettings, files: list[str], ledger: Ledger, ids: Sequence[str]
) -> Iterator[Chunk]:
    """The rows still to score, in file order, as chunks (what the read task yields).

    A chunk closes once it holds `chunk_size` rows and the next row has another source, so
    that a source's summaries (FRANK has 4-5 an article) go to one replica and its questions
    are asked once; at twice `chunk_size` it closes regardless, which bounds memory. Ids are
    checked for repeats here, in read order, as a local run does (rows already scored too);
    the last chunk carries the count.

    Args:
        settings: the run.
        files: file names as records carry them (the folder's).
        ledger: what is done (a snapshot taken when the run starts).
        ids: the scorers' ids (the folder's `scorer_ids`).
    """
    chunk = Chunk()
    reader = RowReader(settings.mapping)
    repeats = RepeatedIds()
    last: str | None = None
    errors: list[str] = []
    for row in file_rows(settings.data, limit=settings.limit, on_file_error=errors.append):
        notes = chunk.notes
        notes.file_errors.extend(errors)
        errors.clear()
        notice = repeats.note(reader.id(row)[0], row, files)
        if notice is not None:
            notes.notices.append(notice)
        done = {(row.file, row.number, i) for i in ids if ledger.done(row.file, row.number, i)}
        if len(done) == len(ids):
            notes.skipped += 1
            if notes.skipped >= SKIPPED_PER_CHUNK and not chunk.rows:
                yield chunk
                chunk = Chunk()
            continue
        key = _group(row.record, dict(settings.mapping))
        size = len(chunk.rows)
        # A row without a source (an unreadable one) makes no judge calls: no cut there.
        cut = size >= settings.chunk_size and key is not None and key != last
        if cut or size >= 2 * settings.chunk_size:
            yield chunk
            chunk = Chunk()
        chunk.rows.append(row)
        chunk.done |= done
        last = key if key is not None else last
    chunk.notes.file_errors.extend(errors)
    chunk.notes.repeats = repeats
    yield chunk
