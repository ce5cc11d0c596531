"""Streaming readers: row numbers, formats, and bad rows reported one at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalgpu import data
from evalgpu.data import RowError, file_format, inspect_file, read_rows

ROWS = [
    {"id": "a", "source": "One. Two.", "summary": "One.", "context": ["p1", "p2"]},
    {"id": "b", "source": "Ünïcode ✓", "summary": "x", "context": "single"},
]


def rows(path: Path) -> list[tuple[int, object]]:
    return list(read_rows(path))


def test_format_by_extension() -> None:
    assert file_format("x.JSONL") == "jsonl"
    assert file_format("x.ndjson") == "jsonl"
    assert file_format("a/b.parquet") == "parquet"
    with pytest.raises(ValueError, match=r"x\.txt: unknown file type '\.txt'; expected one of"):
        file_format("x.txt")


def test_jsonl_line_numbers_skip_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps(ROWS[0]) + "\n\n   \n" + json.dumps(ROWS[1], ensure_ascii=False) + "\n"
    )
    assert rows(path) == [(1, ROWS[0]), (4, ROWS[1])]


def test_jsonl_bad_lines_are_row_errors_and_reading_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(
        b'{"id": "a"}\n'
        b'{"id": "b",\n'
        b"[1, 2]\n"
        b'{"id": "\xff"}\n'
        b'{"id": "e"}'  # no final newline: still a row
    )
    got = rows(path)
    assert got[0] == (1, {"id": "a"})
    assert got[1][0] == 2 and isinstance(got[1][1], RowError)
    assert got[1][1].message.startswith("line is not valid JSON: ")
    assert got[2] == (3, RowError("a row must be a JSON object, got an array"))
    assert got[3] == (4, RowError("line is not valid UTF-8 (byte 9)"))
    assert got[4] == (5, {"id": "e"})


def test_jsonl_bom(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a"}\n')
    assert rows(path) == [(1, {"id": "a"})]


def test_csv_rows_are_numbered_by_line_with_json_cells(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(
        "id,summary,context\n"
        'a,"two\nlines","[""p1"", ""p2""]"\n'
        "\n"
        "b,plain,just text\n"
        "c,too,many,fields\n"
        'd,x,"[not json"\n',
        encoding="utf-8",
    )
    got = rows(path)
    assert got[0] == (2, {"id": "a", "summary": "two\nlines", "context": ["p1", "p2"]})
    assert got[1] == (5, {"id": "b", "summary": "plain", "context": "just text"})
    assert got[2] == (6, RowError("line has 4 fields, the header has 3"))
    assert got[3] == (7, {"id": "d", "summary": "x", "context": "[not json"})


def test_csv_cells_may_be_long(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    long = "word " * 100_000
    path.write_text(f'id,source\na,"{long}"\n', encoding="utf-8")
    assert rows(path) == [(2, {"id": "a", "source": long})]


def test_csv_bad_bytes_fail_their_row_only(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_bytes(b"id,summary\na,ok\nb,\xff\xfe\nc,fine\n")
    assert rows(path) == [
        (2, {"id": "a", "summary": "ok"}),
        (3, RowError("line is not valid UTF-8")),
        (4, {"id": "c", "summary": "fine"}),
    ]


@pytest.mark.parametrize("block", [3, 7, 64, 1 << 16])
def test_json_array_streams_across_read_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(data, "_BLOCK", block)
    path = tmp_path / "d.json"
    items = [*ROWS, {"id": 12345678, "n": 1.5e10, "t": True}, *ROWS]
    path.write_text(json.dumps(items, ensure_ascii=False, indent=1), encoding="utf-8")
    assert rows(path) == list(enumerate(items, 1))


def test_json_array_non_object_and_malformed_elements(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('[{"id": "a"}, 7, {"id": "c" "x"}, {"id": "d"}]')
    got = rows(path)
    assert got[0] == (1, {"id": "a"})
    assert got[1] == (2, RowError("a row must be a JSON object, got a number"))
    assert got[2][0] == 3 and isinstance(got[2][1], RowError)
    assert "the rest of the file is not read" in got[2][1].message
    assert len(got) == 3


def test_json_must_be_an_array(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('{"id": "a"}')
    with pytest.raises(ValueError, match="must hold an array of rows"):
        rows(path)
    path.write_text("  []  ")
    assert rows(path) == []


def test_parquet_in_batches(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    table = pa.table({"id": [f"r{i}" for i in range(2500)], "summary": ["s"] * 2500})
    pq.write_table(table, path, row_group_size=1000)
    got = rows(path)
    assert len(got) == 2500
    assert got[0] == (1, {"id": "r0", "summary": "s"})
    assert got[-1] == (2500, {"id": "r2499", "summary": "s"})
    assert inspect_file(path).rows == 2500


def test_inspect_counts_jsonl_rows_and_hashes(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": 3}')
    info = inspect_file(path)
    assert info.rows == 3 and info.size == path.stat().st_size and len(info.sha256) == 64
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": 4}')
    assert inspect_file(path).sha256 != info.sha256


def test_reading_is_lazy(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(10_000)))
    it = read_rows(path)
    assert next(it) == (1, {"i": 0})
