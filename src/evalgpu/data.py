"""Dataset files, read one row at a time: JSON Lines, JSON (an array), CSV and Parquet.

`read_rows(path)` yields `(row, record)` pairs, where `row` is the row's 1-based line number
(JSON Lines, CSV) or 1-based index (JSON, Parquet) and `record` is the row's dict, or a
`RowError` when the row cannot be read (a malformed line, a row that is not an object, text
that is not UTF-8). One bad row never stops the file: the next row is read as usual. Nothing is
loaded whole, so memory stays flat on any file size.

The format is chosen by the file's extension (`FORMATS`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FORMATS",
    "FileInfo",
    "RowError",
    "file_format",
    "inspect_file",
    "read_rows",
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

# A JSON array element bigger than this is refused rather than buffered without end (a
# malformed element is only detected once the parser gives up, possibly at the end of the file).
MAX_JSON_ELEMENT = 64 * 1024 * 1024
# Characters read at a time from a JSON file (tests shrink it to cross element boundaries).
_BLOCK = 1 << 16


@dataclass(frozen=True)
class RowError:
    """A row that could not be read; `message` says why (without the row number)."""

    message: str


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
    if isinstance(value, dict):
        return value
    return RowError(f"a row must be a JSON object, got {_json_type(value)}")


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
        for number, raw in enumerate(f, 1):
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
            yield number, _object(value)


def _csv(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    # Long documents are normal here: lift the csv module's 128 KiB cell limit.
    csv.field_size_limit(max(csv.field_size_limit(), MAX_JSON_ELEMENT))
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
            yield start, record


def _has_bad_bytes(cells: list[str]) -> bool:
    return any("\udc80" <= ch <= "\udcff" for cell in cells for ch in cell)


def _maybe_json(cell: str) -> Any:
    text = cell.strip()
    if text[:1] in ("[", "{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return cell


def _json_array(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    """Stream the elements of a top-level JSON array with the C decoder, one at a time.

    A malformed element ends the file: past it, where the next element starts is unknown.
    """
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8-sig") as f:
        reader = _Buffer(f)
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
                    yield (
                        index + 1,
                        RowError(
                            "element is not valid JSON: expected ',' or ']'; the rest of the file "
                            "is not read"
                        ),
                    )
                    return
                reader.pos += 1
                reader.skip_space()
            index += 1
            try:
                value = reader.decode(decoder)
            except json.JSONDecodeError as exc:
                yield (
                    index,
                    RowError(
                        f"element is not valid JSON: {exc.msg}; the rest of the file is not read"
                    ),
                )
                return
            yield index, _object(value)


class _Buffer:
    """A text window over a file for `JSONDecoder.raw_decode`, refilled as elements need."""

    def __init__(self, f: io.TextIOBase) -> None:
        self.f = f
        self.text = ""
        self.pos = 0
        self.eof = False

    def _fill(self, size: int) -> bool:
        if self.eof:
            return False
        block = self.f.read(size)
        if not block:
            self.eof = True
            return False
        self.text = self.text[self.pos :] + block
        self.pos = 0
        return True

    def skip_space(self) -> bool:
        """Move past whitespace; False at the end of the file."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.text):
                return True
            if not self._fill(_BLOCK):
                return False

    def peek(self) -> str:
        return self.text[self.pos]

    def decode(self, decoder: json.JSONDecoder) -> Any:
        size = _BLOCK
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError:
                # Maybe only cut by the window: read more and try again, up to the cap.
                if len(self.text) - self.pos > MAX_JSON_ELEMENT or not self._fill(size):
                    raise
                size *= 2
                continue
            if end == len(self.text) and not self.eof and self._fill(size):
                continue  # a number or literal may go on past the window
            self.pos = end
            return value


def _parquet(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from exc
    index = 0
    for batch in table.iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            index += 1
            yield index, record
