"""Streaming readers: row numbers, formats, and bad rows reported one at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalgpu import create_summarization_scorer, data, evaluate
from evalgpu.data import RowError, file_format, inspect_file, read_rows
from evalgpu.engines.scripted import ScriptedEngine
from samples import COMPANY, GOOD, read_summary, records, successes, summary_rows, write_jsonl

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
    got: list[tuple[int, object]] = []
    with pytest.raises(ValueError, match=r"reading stopped at element 3 \(element is not valid"):
        got += read_rows(path)  # the row error, then the file's (the rest is not read)
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


# Hostile input: every row that cannot be read or decoded is its own error; reading goes on.

DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = "7" * 100_000  # over Python's 4,300-digit limit for int("...")
GOOD_ROW = {"id": "good", "summary": "fine"}


def test_jsonl_hostile_lines_fail_their_row_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "MAX_ROW_BYTES", 300_000)
    path = tmp_path / "d.jsonl"
    good = json.dumps(GOOD_ROW).encode()
    lines = [
        DEEP.encode(),
        b'{"id": "n", "summary": ' + HUGE_INT.encode() + b"}",
        b'{"id": "s", "summary": "half a pair \\ud83d"}',
        b'{"id": "k", "\\udc80": 1}',
        b'{"id": "\\ud800", "summary": "x"}',
        b'{"id": "inf", "summary": 1e999999}',  # decodes: a float, judged by the field's check
        b'{"id": "long", "summary": "' + b"x" * 400_000 + b'"}',
        b"[1, 2]",
        b"not json",
        b'{"id": "\xc3"}',
    ]
    path.write_bytes(b"".join(line + b"\n" + good + b"\n" for line in lines))
    got = rows(path)
    assert len(got) == 2 * len(lines)
    assert all(record == GOOD_ROW for _, record in got[1::2])  # every good row, after each bad one
    bad = dict(got[0::2])
    assert bad[1] == RowError("line cannot be decoded: nested too deeply to decode")
    assert isinstance(bad[3], RowError)
    assert bad[3].message.startswith("line cannot be decoded: Exceeds the limit (4300 digits)")
    assert bad[5].message.startswith("summary: text holds a lone surrogate (\\ud83d)")
    assert bad[5].record == {"id": "s", "summary": "half a pair \ud83d"}  # its id can name it
    assert bad[7].message.startswith("\ufffd: text holds a lone surrogate (\\udc80)")
    assert bad[9].message.startswith("id: text holds a lone surrogate (\\ud800)")
    assert bad[11] == {"id": "inf", "summary": float("inf")}
    assert bad[13] == RowError("line is longer than 300,000 bytes")
    assert bad[15] == RowError("a row must be a JSON object, got an array")
    assert isinstance(bad[17], RowError) and bad[17].message.startswith("line is not valid JSON")
    assert bad[19] == RowError("line is not valid UTF-8 (byte 9)")


@pytest.mark.parametrize("block", [7, 1 << 16])
def test_json_array_elements_that_cannot_be_decoded_are_skipped_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(data, "_BLOCK", block)
    monkeypatch.setattr(data, "MAX_ROW_BYTES", 300_000)
    good = json.dumps(GOOD_ROW)
    # Brackets and escaped quotes inside strings must not fool the scanner that skips.
    tricky = '{"a": "]]\\"[[{", "b": ' + "[" * 5000 + '"\\\\"' + "]" * 5000 + "}"
    elements = [
        DEEP,
        HUGE_INT,
        tricky,
        '{"id": "s", "summary": "\\udfff"}',
        '{"id": "long", "summary": "' + "x" * 400_000 + '"}',
        '"text"',
    ]
    path = tmp_path / "d.json"
    path.write_text("[" + ",\n".join(f"{e}, {good}" for e in elements) + "]", encoding="utf-8")
    got = rows(path)
    assert [n for n, _ in got] == list(range(1, 2 * len(elements) + 1))
    assert all(record == GOOD_ROW for _, record in got[1::2])
    bad = [record for _, record in got[0::2]]
    assert all(isinstance(b, RowError) for b in bad)
    messages = [b.message for b in bad if isinstance(b, RowError)]
    assert messages[0] == "element cannot be decoded: nested too deeply to decode"
    assert messages[1].startswith("element cannot be decoded: Exceeds the limit (4300 digits)")
    assert messages[2] == "element cannot be decoded: nested too deeply to decode"
    assert messages[3].startswith("summary: text holds a lone surrogate (\\udfff)")
    # Refused when the window outgrows the cap, or once decoded in a window grown past it.
    assert "longer than 300,000 characters" in messages[4]
    assert messages[5] == "a row must be a JSON object, got a string"


def test_json_array_bytes_that_are_not_utf8_fail_their_element(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_bytes(b'[{"id": "a", "summary": "\xff"}, {"id": "b"}]')
    got = rows(path)
    assert isinstance(got[0][1], RowError) and got[0][1].message.startswith(
        "summary: text holds a lone surrogate (\\udcff)"
    )
    assert got[1] == (2, {"id": "b"})


def test_json_array_ending_inside_an_element_is_that_rows_error(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('[{"id": "a"}, ' + "[" * 5000)
    got: list[tuple[int, object]] = []
    with pytest.raises(ValueError, match=r"stopped at element 2 \(the file ends inside it\)"):
        got += read_rows(path)
    assert got == [
        (1, {"id": "a"}),
        (
            2,
            RowError(
                "element cannot be decoded: nested too deeply to decode; the file ends inside it"
            ),
        ),
    ]


def test_csv_hostile_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import csv

    path = tmp_path / "d.csv"
    path.write_text(
        "id,summary,context\n"
        f'a,ok,"{"[" * 5000 + "]" * 5000}"\n'  # a JSON-looking cell too deep to decode: text
        'b,ok,"[""\\ud800""]"\n'  # a JSON cell escaping a lone surrogate
        f"c,{'x' * 30_000},y\n"  # a cell over the limit
        "d,ok,z\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(data, "MAX_ROW_BYTES", 20_000)
    limit = csv.field_size_limit(20_000)
    try:
        got = rows(path)
    finally:
        csv.field_size_limit(limit)
    assert got[0] == (2, {"id": "a", "summary": "ok", "context": "[" * 5000 + "]" * 5000})
    assert got[1][0] == 3 and isinstance(got[1][1], RowError)
    assert got[1][1].message.startswith("context: text holds a lone surrogate (\\ud800)")
    assert got[2] == (4, RowError("line is not valid CSV (field larger than field limit (20000))"))
    assert got[3] == (5, {"id": "d", "summary": "ok", "context": "z"})


def _invalid_utf8_strings(values: list[bytes]) -> pa.Array:
    """A string column holding bytes that are not UTF-8 (as a careless writer leaves them)."""
    import struct

    offsets = [0]
    for v in values:
        offsets.append(offsets[-1] + len(v))
    buffers = [
        None,
        pa.py_buffer(struct.pack(f"<{len(offsets)}i", *offsets)),
        pa.py_buffer(b"".join(values)),
    ]
    return pa.Array.from_buffers(pa.string(), len(values), buffers)


def test_parquet_a_cell_that_cannot_be_read_fails_its_row_only(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    table = pa.table(
        {"id": ["a", "b", "c"], "summary": _invalid_utf8_strings([b"ok", b"\xff\xfe", b"fine"])}
    )
    pq.write_table(table, path)
    got = rows(path)
    assert got[0] == (1, {"id": "a", "summary": "ok"})
    assert got[1][0] == 2 and isinstance(got[1][1], RowError)
    assert got[1][1].message.startswith("summary: the cell cannot be read ('utf-8' codec")
    assert got[1][1].record == {"id": "b"}  # read before the bad cell: the id names the row
    assert got[2] == (3, {"id": "c", "summary": "fine"})


def test_parquet_that_breaks_partway_is_a_file_error_after_its_good_rows(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    table = pa.table({"id": [f"r{i}" for i in range(3000)], "summary": ["s" * 50] * 3000})
    pq.write_table(table, path, row_group_size=1024, compression="none")
    raw = bytearray(path.read_bytes())
    middle = raw.index(b"r2000")  # a data page of the second row group, not the footer
    raw[middle - 200 : middle + 200] = b"\xff" * 400
    path.write_bytes(bytes(raw))
    seen = []
    with pytest.raises(ValueError, match=r"rows from [\d,]+ on cannot be read") as caught:
        for row, _ in read_rows(path):
            seen.append(row)
    assert str(path) in str(caught.value)
    assert seen[:1024] == list(range(1, 1025))


# Through a run: each format's rows scored, hostile rows and unreadable files


def test_every_format_scores_the_same_with_its_own_row_numbers(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "source": COMPANY, "summary": GOOD},
        {"id": "b", "source": COMPANY, "summary": "The company was founded in 1990."},
    ]
    write_jsonl(tmp_path / "d.jsonl", [rows[0], "", rows[1]])  # a blank line: line numbers 1, 3
    (tmp_path / "d.json").write_text(json.dumps(rows))
    with open(tmp_path / "d.csv", "w", encoding="utf-8", newline="") as f:
        f.write("id,source,summary\n")
        for r in rows:
            f.write(f'{r["id"]},"{r["source"]}","{r["summary"]}"\n')
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    expected_rows = {"jsonl": [1, 3], "json": [1, 2], "csv": [2, 3], "parquet": [1, 2]}
    scores = {}
    for fmt, numbers in expected_rows.items():
        scorer = create_summarization_scorer(ScriptedEngine())
        got = evaluate(tmp_path / f"d.{fmt}", [scorer], out=tmp_path / f"out-{fmt}").run()
        assert [r["row"] for r in records(tmp_path / f"out-{fmt}")] == numbers
        assert [r["id"] for r in records(tmp_path / f"out-{fmt}")] == ["a", "b"]
        assert got.summary is not None
        scores[fmt] = [r["score"] for r in records(tmp_path / f"out-{fmt}")]
    assert len({tuple(s) for s in scores.values()}) == 1
    assert scores["jsonl"][0] > scores["jsonl"][1]


def _hostile_files(tmp_path: Path) -> dict[str, tuple[Path, dict[int, str]]]:
    """Each format's file: good rows (id "g<row>") around hostile ones; the bad rows' numbers
    with what their error must say."""
    good = {"source": COMPANY, "summary": GOOD}
    files: dict[str, tuple[Path, dict[int, str]]] = {}

    lines = [
        DEEP,
        '{"id": "n", "summary": ' + HUGE_INT + "}",
        '{"id": "s", "source": "x", "summary": "half a pair \\ud83d"}',
        '{"id": "inf", "source": "x", "summary": 1e999999}',
        '"a string"',
        "not json",
    ]
    body = b""
    for i, line in enumerate(lines):
        body += line.encode() + b"\n"
        body += json.dumps({"id": f"g{2 * i + 2}", **good}).encode() + b"\n"
    body += b'{"id": "\xff"}\n' + json.dumps({"id": "g14", **good}).encode() + b"\n"
    (tmp_path / "h.jsonl").write_bytes(body)
    files["jsonl"] = (
        tmp_path / "h.jsonl",
        {
            1: "row 1: line cannot be decoded: nested too deeply to decode",
            3: "row 3: line cannot be decoded: Exceeds the limit (4300 digits)",
            5: 'row 5 (id "s"): summary: text holds a lone surrogate (\\ud83d)',
            7: 'row 7 (id "inf"): summary: must be a string or a list of messages, got a number',
            9: "row 9: a row must be a JSON object, got a string",
            11: "row 11: line is not valid JSON",
            13: "row 13: line is not valid UTF-8",
        },
    )

    elements = [DEEP, HUGE_INT, '{"id": "s", "source": "x", "summary": "\\udfff"}', "null"]
    text = ", ".join(
        f"{e}, {json.dumps({'id': f'g{2 * i + 2}', **good})}" for i, e in enumerate(elements)
    )
    (tmp_path / "h.json").write_text(f"[{text}]", encoding="utf-8")
    files["json"] = (
        tmp_path / "h.json",
        {
            1: "row 1: element cannot be decoded: nested too deeply to decode",
            3: "row 3: element cannot be decoded: Exceeds the limit (4300 digits)",
            5: 'row 5 (id "s"): summary: text holds a lone surrogate (\\udfff)',
            7: "row 7: a row must be a JSON object, got null",
        },
    )

    (tmp_path / "h.csv").write_bytes(
        b"id,source,summary,context\n"
        + f'g2,"{COMPANY}","{GOOD}","{"[" * 5000}"\n'.encode()  # a deep JSON-like cell is text
        + b'b,x,"\xff\xfe",\n'
        + b'c,x,y,"[""\\ud800""]"\n'
        + b"d,too,many,fields,here\n"
        + f'g6,"{COMPANY}","{GOOD}",\n'.encode()
    )
    files["csv"] = (
        tmp_path / "h.csv",
        {
            3: "row 3: line is not valid UTF-8",
            4: 'row 4 (id "c"): context: text holds a lone surrogate (\\ud800)',
            5: "row 5: line has 5 fields, the header has 4",
        },
    )

    summaries = _invalid_utf8_strings([GOOD.encode(), b"\xff\xfe", GOOD.encode()])
    table = pa.table({"id": ["g1", "b", "g3"], "source": [COMPANY] * 3, "summary": summaries})
    pq.write_table(table, tmp_path / "h.parquet")
    files["parquet"] = (
        tmp_path / "h.parquet",
        {2: "row 2 (id \"b\"): summary: the cell cannot be read ('utf-8' codec"},
    )
    return files


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_hostile_rows_are_their_own_errors_in_every_format(tmp_path: Path, fmt: str) -> None:
    path, bad = _hostile_files(tmp_path)[fmt]
    out = tmp_path / "out"
    errors: list[str] = []
    scorers = [create_summarization_scorer(ScriptedEngine())]
    evaluate(path, scorers, out=out, on_error=errors.append).run()
    raw = (out / "results.jsonl").read_bytes()
    got = [json.loads(line) for line in raw.decode("utf-8").splitlines()]  # strict UTF-8
    for record in got:
        if record["row"] in bad:
            message = bad[record["row"]]
            assert record["error"].startswith(message), record["error"]
            assert record["errorKind"] == "input" and record["score"] is None
            assert record["error"] in errors  # told as it happened
        else:
            assert record["error"] is None and record["id"] == f"g{record['row']}", record
    assert {r["row"] for r in got} >= set(bad)
    assert sum(r["error"] is None for r in got) >= 2
    summary = read_summary(out)
    assert summary["scorers"]["summarization-scorer"]["errors"]["input"] == len(bad)
    assert summary["file_errors"] == {"count": 0, "messages": []}


def test_a_file_that_cannot_be_read_is_named_counted_and_the_run_goes_on(tmp_path: Path) -> None:
    many_bad = write_jsonl(tmp_path / "a.jsonl", ["{bad"] * 25)
    not_array = tmp_path / "b.json"
    not_array.write_text('{"id": "x"}')
    not_parquet = tmp_path / "c.parquet"
    not_parquet.write_bytes(b"PAR1 but not really")
    good = write_jsonl(tmp_path / "d.jsonl", summary_rows(2))
    broken = tmp_path / "e.json"  # a malformed element: where the next one starts is unknown
    broken.write_text(f'[{json.dumps(summary_rows(1)[0])}, {{"id": "c" "x"}}, {{"id": "d"}}]')
    out = tmp_path / "out"
    files = [many_bad, not_array, not_parquet, good, broken]
    notices: list[str] = []
    scorers = [create_summarization_scorer(ScriptedEngine())]
    run = evaluate(files, scorers, out=out, on_notice=notices.append).run()
    assert len(successes(out)) == 3
    assert len(run.file_errors) == 3 and set(run.file_errors) <= set(notices)  # each told
    told = "\n".join(notices)
    assert f"{not_array}: a .json file must hold an array of rows" in told
    assert f"{not_parquet}: not a readable Parquet file" in told
    assert f"{broken}: reading stopped at element 2 (element is not valid JSON" in told
    summary = read_summary(out)
    assert summary["file_errors"]["count"] == 3
    assert [m.split(":")[0] for m in summary["file_errors"]["messages"]] == [
        str(not_array),
        str(not_parquet),
        str(broken),
    ]
    (row_error,) = [r for r in records(out) if r["file"] == str(broken) and r["error"]]
    assert row_error["row"] == 2 and "the rest of the file is not read" in row_error["error"]
