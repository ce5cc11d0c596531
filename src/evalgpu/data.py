"""Dataset files, read one row at a time: JSON Lines, JSON (an array), CSV and Parquet.

`read_rows(path)` yields `(row, record)` pairs, where `row` is the row's 1-based line number
(JSON Lines, CSV) or 1-based index (JSON, Parquet) and `record` is the row's dict, or a
`RowError` when the row cannot be read: a malformed line, a row that is not an object, text
that is not UTF-8 or holds a lone surrogate, nesting too deep or a number too long for Python
to decode, a row over `MAX_ROW_BYTES`. One bad row never stops the file: the next row is read
as usual. Nothing is loaded whole, so memory stays flat on any file size.

A file that cannot be read at all (no such file, not Parquet, a .json that is not an array)
raises `OSError` or `ValueError`; so does a file that breaks partway in a way that leaves the
next row's start unknown (a JSON array with a malformed element, a Parquet page that cannot be
decoded), after the rows before it were yielded.

The format is chosen by the file's extension (`FORMATS`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalgpu._json_window import JsonWindow

__all__ = [
    "FORMATS",
    "FileInfo",
    "RowError",
    "file_format",
    "inspect_file",
    "read_rows",
    "replace_surrogates",
]

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".parquet": "parquet",
}
"""File extension -> format."""

# CSV cells are strings; these columns may hold JSON (a list of passages, a list of messages,
# an `{"inputMessages": [...]}` input), decoded when the cell starts like JSON and parses.
CSV_JSON_COLUMNS = ("context", "input", "output")

MAX_ROW_BYTES = 64 * 1024 * 1024
"""The largest row read: a JSON Lines line, a JSON array element, a CSV cell. A bigger one is
that row's error (and is skipped without being held in memory), not the file's."""
# Characters read at a time from a JSON file (tests shrink it to cross element boundaries).
_BLOCK = 1 << 16
# Errors quote at most this much of an exception's message (an int's digits, a cell).
_MESSAGE_CHARS = 200
_SURROGATE = re.compile("[\ud800-\udfff]")
_BAD_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a byte not UTF-8


@dataclass(frozen=True)
class RowError:
    """A row that could not be read; `message` says why (without the row number).

    `record` is the row's object when it was parsed but cannot be used (a lone surrogate in
    it), so that its id can still name it; None otherwise.
    """

    message: str
    record: dict[str, Any] | None = None


@dataclass(frozen=True)
class FileInfo:
    """What identifies a data file's content, and how many rows it holds (None: unknown)."""

    sha256: str
    size: int
    rows: int | None


def file_format(path: str | Path) -> str:
    """The format of `path` from its extension.

    Raises:
        ValueError: the extension is not one of `FORMATS`.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(
            f"{path}: unknown file type {suffix or '(no extension)'!r}; "
            f"expected one of {', '.join(FORMATS)}"
        )
    return FORMATS[suffix]


def inspect_file(path: str | Path) -> FileInfo:
    """Hash the file's bytes (resume refuses a changed file) and count its rows on the way.

    Rows are counted for JSON Lines (non-blank lines) and Parquet (file metadata); CSV and JSON
    report None (a CSV cell may span lines; counting JSON elements means parsing them).
    """
    fmt = file_format(path)
    digest = hashlib.sha256()
    size = 0
    lines = 0
    blank = 0
    last = b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
            size += len(block)
            if fmt == "jsonl":
                lines += block.count(b"\n")
                blank += block.count(b"\n\n")  # an estimate: progress only
                last = block[-1:]
    rows: int | None = None
    if fmt == "jsonl":
        rows = lines + (last != b"\n") - blank
    elif fmt == "parquet":
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception:  # read_rows reports the broken file
            rows = None
    return FileInfo(sha256=digest.hexdigest(), size=size, rows=rows)


def read_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    """Yield `(row, record or RowError)` for every row of the file, in order.

    Blank lines of a JSON Lines file are skipped (they are not rows, but they count in the line
    numbers). A file that cannot be read at all raises `OSError` or `ValueError`.
    """
    fmt = file_format(path)
    if fmt == "jsonl":
        return _jsonl(Path(path))
    if fmt == "csv":
        return _csv(Path(path))
    if fmt == "json":
        return _json_array(Path(path))
    return _parquet(Path(path))


def _object(value: Any) -> dict[str, Any] | RowError:
    if not isinstance(value, dict):
        return RowError(f"a row must be a JSON object, got {_json_type(value)}")
    return _unicode(value)


def _unicode(record: dict[str, Any]) -> dict[str, Any] | RowError:
    """`record`, or a RowError naming the field where a string holds a lone surrogate.

    A lone surrogate (a JSON `\\ud800` escape without its pair, or a byte that is not UTF-8
    read with surrogateescape) is not a character: it cannot be written as UTF-8, and a
    judge's tokenizer cannot take it. Walked with a stack, not recursion: rows may nest deep.
    """
    stack: list[tuple[str, Any]] = [(str(key), key) for key in record]
    stack += [(str(key), value) for key, value in record.items()]
    while stack:
        field, value = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and (bad := _SURROGATE.search(value)):
                where = replace_surrogates(field)
                return RowError(
                    f"{where}: text holds a lone surrogate (\\u{ord(bad.group()):04x}), which "
                    "is not a character (bytes that are not UTF-8, or a \\u escape without "
                    "its pair)",
                    record,
                )
        elif isinstance(value, dict):
            stack += [(field, key) for key in value]
            stack += [(field, item) for item in value.values()]
        elif isinstance(value, list):
            stack += [(field, item) for item in value]
    return record


def replace_surrogates(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD, so that it can be written as UTF-8.

    For anything echoed back (ids, file names, error messages, JSON text made with
    `ensure_ascii=False`, where a surrogate can only stand inside a string).
    """
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _reason(exc: BaseException) -> str:
    """Why a value could not be decoded, in a few words."""
    if isinstance(exc, RecursionError):
        return "nested too deeply to decode"
    if isinstance(exc, MemoryError):
        return "too large to decode in memory"
    text = " ".join(str(exc).split())
    if len(text) > _MESSAGE_CHARS:
        text = text[: _MESSAGE_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, ValueError) else text


def _json_type(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), "null" if value is None else type(value).__name__)


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    with open(path, "rb") as f:
        for number, raw in enumerate(_lines(f), 1):
            if raw is None:
                yield number, RowError(f"line is longer than {MAX_ROW_BYTES:,} bytes")
                continue
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield number, RowError(f"line is not valid UTF-8 (byte {exc.start + 1})")
                continue
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                yield number, RowError(f"line is not valid JSON: {exc.msg} (column {exc.colno})")
                continue
            except Exception as exc:  # valid JSON Python cannot decode: too deep, a huge int
                yield number, RowError(f"line cannot be decoded: {_reason(exc)}")
                continue
            yield number, _object(value)


def _lines(f: io.BufferedReader) -> Iterator[bytes | None]:
    """The file's lines, each None when longer than `MAX_ROW_BYTES` (skipped, never held)."""
    limit = MAX_ROW_BYTES
    while raw := f.readline(limit + 1):
        if len(raw) > limit and not raw.endswith(b"\n"):
            while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield None
            continue
        yield raw


def _csv(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    # Long documents are normal here: lift the csv module's 128 KiB cell limit (a cell over
    # MAX_ROW_BYTES is its row's error, and the reader goes on at the next line).
    csv.field_size_limit(max(csv.field_size_limit(), MAX_ROW_BYTES))
    # surrogateescape: a bad byte becomes a lone surrogate, reported for its row only.
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ValueError(f"{path}: the CSV header cannot be read ({exc})") from exc
        if _has_bad_bytes(header):
            raise ValueError(f"{path}: the CSV header is not valid UTF-8")
        line = reader.line_num
        while True:
            start = line + 1
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield start, RowError(f"line is not valid CSV ({exc})")
                line = reader.line_num
                continue
            line = reader.line_num
            if not cells or (len(cells) == 1 and not cells[0].strip() and len(header) > 1):
                continue  # a blank line
            if len(cells) != len(header):
                yield start, RowError(f"line has {len(cells)} fields, the header has {len(header)}")
                continue
            if _has_bad_bytes(cells):
                yield start, RowError("line is not valid UTF-8")
                continue
            record: dict[str, Any] = dict(zip(header, cells, strict=True))
            for column in CSV_JSON_COLUMNS:
                record[column] = _maybe_json(record[column]) if column in record else None
                if record[column] is None:
                    del record[column]
            yield start, _unicode(record)  # a JSON cell may escape a lone surrogate


def _has_bad_bytes(cells: list[str]) -> bool:
    """Whether a cell holds a byte that is not UTF-8 (decoded with surrogateescape)."""
    return any(not cell.isascii() and _BAD_BYTE.search(cell) for cell in cells)


def _maybe_json(cell: str) -> Any:
    """The cell's JSON value when it starts like JSON and decodes; else the cell as text."""
    text = cell.strip()
    if text[:1] in ("[", "{"):
        try:
            return json.loads(text)
        except Exception:  # malformed, or too deep to decode: the cell is text
            pass
    return cell


def _json_array(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    """Stream the elements of a top-level JSON array with the C decoder, one at a time.

    An element that is valid JSON but cannot be decoded (nested too deep, a number too long,
    over `MAX_ROW_BYTES`) is skipped by a scanner that only tracks strings and brackets, and is
    that row's error. A malformed element ends the file: past it, where the next element
    starts is unknown. It is that row's error, then a `ValueError` for the file (the rows
    after it are never read, and that must not go unsaid).
    """
    decoder = json.JSONDecoder()
    # surrogateescape: a byte that is not UTF-8 fails its element (a lone surrogate), not the file.
    with open(path, encoding="utf-8-sig", errors="surrogateescape") as f:
        reader = JsonWindow(f, _BLOCK, MAX_ROW_BYTES)
        if not reader.skip_space():
            return
        if reader.peek() != "[":
            raise ValueError(f"{path}: a .json file must hold an array of rows")
        reader.pos += 1
        index = 0
        while True:
            if not reader.skip_space():
                raise ValueError(f"{path}: the JSON array is not closed")
            if reader.peek() == "]":
                return
            if index > 0:
                if reader.peek() != ",":
                    message = "element is not valid JSON: expected ',' or ']'"
                    yield index + 1, RowError(f"{message}; the rest of the file is not read")
                    raise _stopped(path, index + 1, message)
                reader.pos += 1
                reader.skip_space()
            index += 1
            try:
                value = reader.decode(decoder)
            except json.JSONDecodeError as exc:
                message = f"element is not valid JSON: {exc.msg}"
                yield index, RowError(f"{message}; the rest of the file is not read")
                raise _stopped(path, index, message) from None
            except Exception as exc:  # too deep, a huge int, too large: skip this element only
                if not reader.skip_value():
                    message = f"element cannot be decoded: {_reason(exc)}"
                    yield index, RowError(f"{message}; the file ends inside it")
                    raise _stopped(path, index, "the file ends inside it") from None
                yield index, RowError(f"element cannot be decoded: {_reason(exc)}")
                continue
            if reader.size > MAX_ROW_BYTES:  # decoded in a window grown past the cap
                yield index, RowError(f"element is longer than {MAX_ROW_BYTES:,} characters")
                continue
            yield index, _object(value)


def _stopped(path: Path, row: int, why: str) -> ValueError:
    """The file error after a JSON array's row error that ends the file (never silent)."""
    return ValueError(f"{path}: reading stopped at element {row:,} ({why}); the rest is not read")


def _parquet(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    """Rows in batches of 1,024; a batch that fails to convert is retried row by row, so
    that a cell Python cannot take (text that is not UTF-8, ...) fails its own row only."""
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from exc
    index = 0
    batches = table.iter_batches(batch_size=1024)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as exc:  # a page that cannot be read: where the next row is, is lost
            raise ValueError(
                f"{path}: rows from {index + 1:,} on cannot be read ({_reason(exc)})"
            ) from exc
        try:
            records: list[dict[str, Any] | RowError] = batch.to_pylist()
        except Exception:
            records = [_parquet_row(batch, i) for i in range(batch.num_rows)]
        for record in records:
            index += 1
            yield index, record


def _parquet_row(batch: Any, i: int) -> dict[str, Any] | RowError:
    """Row `i` of the batch, cell by cell: the first cell that cannot be read is named."""
    record: dict[str, Any] = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        try:
            record[name] = column[i].as_py()
        except Exception as exc:
            return RowError(
                f"{replace_surrogates(str(name))}: the cell cannot be read ({_reason(exc)})", record
            )
    return record
