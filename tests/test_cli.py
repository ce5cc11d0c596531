"""`python -m evalgpu`: the real entry point with a scripted engine injected by `--backend`.

In-process tests call `cli.main(argv)`; the entry-point and kill -9 tests start
`python -m evalgpu` in a subprocess with `tests/` on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalgpu import cli, create_summarization_scorer, evaluate
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.sweep import Sweep

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SCRIPTED = ["--backend", "scripted"]
RUN = ["run", "{data}", "--scorer", "summarization", "--out", "{out}"]
"""A valid run of the usage-error cases, before the flag each case gets wrong."""

COMPANY = (
    "The company was founded in 1995 by John Smith. It started with 10 employees and grew to "
    "500 by 2020. The company is based in Seattle."
)
GOOD = "John Smith founded the company in 1995. It is based in Seattle."
EINSTEIN = "Einstein was born in 1879. He developed relativity. He won the Nobel Prize."
PASSAGES = [
    "Albert Einstein was born on 14 March 1879 in Ulm.",
    "Einstein developed the theory of relativity.",
]


def run_cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows
        ),
        encoding="utf-8",
    )
    return path


def records(out: Path) -> list[dict[str, Any]]:
    text = (out / "results.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def successes(out: Path) -> dict[tuple[Any, int, str], dict[str, Any]]:
    found: dict[tuple[Any, int, str], dict[str, Any]] = {}
    for r in records(out):
        if r["error"] is None:
            key = (r["file"], r["row"], r["scorer"])
            assert key not in found, f"duplicate successful record for {key}"
            found[key] = r
    return found


def summary_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "source": COMPANY, "summary": GOOD} for i in range(start, start + n)]


def distinct_rows(n: int) -> list[dict[str, Any]]:
    """Rows whose judge calls all differ (the runner's reply cache would answer repeats)."""
    return [
        {
            "id": f"r{i}",
            "source": f"Shop {i} opened in {1900 + i % 100}. It sells {i} kinds of tea.",
            "summary": f"Shop {i} opened in {1900 + i % 100}.",
        }
        for i in range(n)
    ]


# Help and usage errors


@pytest.mark.parametrize("command", [[], ["run"], ["report"], ["models"]])
def test_help_has_examples(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code, out, _ = run_cli(capsys, *command, "--help")
    assert code == 0
    assert "usage: python -m evalgpu" in out
    if command:
        assert "examples:" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*RUN, "--bogus"], "unrecognized arguments: --bogus"),
        (
            ["run", "{data}", "--scorer", "bleu", "--out", "{out}"],
            "argument --scorer: invalid choice: 'bleu'",
        ),
        (["run", "{data}", "--out", "{out}"], "the following arguments are required: --scorer"),
        (
            ["run", "missing.jsonl", "--scorer", "summarization", "--out", "{out}"],
            "data file not found: missing.jsonl",
        ),
        (
            ["run", "notes.txt", "--scorer", "summarization", "--out", "{out}"],
            "notes.txt: unknown file type '.txt'",
        ),
        ([*RUN, "--map", "summary"], "--map takes FIELD=COLUMN, got 'summary'"),
        ([*RUN, "--map", "answer=x"], "map: unknown field 'answer'"),
        ([*RUN, "--scale", "0"], "scale must be > 0, got 0.0"),
        ([*RUN, "--max-questions", "0"], "max_questions must be >= 1, got 0"),
        ([*RUN, "--chunk-size", "x"], "argument --chunk-size: invalid int value: 'x'"),
        (
            [*RUN, "--backend", "tpu"],
            "backend must be auto, vllm, transformers, scripted or module:factory, got 'tpu'",
        ),
        (
            ["run", "{data}", "--scorer", "summarization", "--out", "{data}"],
            "out: {data} is a file, not a folder",
        ),
        (
            ["run", "{data}", "--scorer", "summarization", "--out", "{data}/sub"],
            "out: {data}/sub lies under {data}, a file, not a folder",
        ),
        ([*RUN, "--compute", "fp8"], "argument --compute: invalid choice: 'fp8'"),
        ([*RUN, "--threads", "0"], "threads must be >= 1, got 0"),
        ([*RUN, "--batch-size", "0"], "batch_size must be >= 1, got 0"),
        (
            [*RUN, "--threads", "2", *SCRIPTED],
            "threads is an option of the transformers engine, not of backend 'scripted'",
        ),
        (
            [*RUN, "--compute", "int8", "--batch-size", "4", *SCRIPTED],
            "compute and batch_size are options of the transformers engine, not of backend "
            "'scripted'",
        ),
        (
            [*RUN, "--compute", "int8", "--threads", "1", "--batch-size", "4", *SCRIPTED],
            "compute, threads and batch_size are options of the transformers engine, not of "
            "backend 'scripted'",
        ),
        (["report", "{out}"], "is not an evalgpu output folder (no config.json)"),
        (["models", "fly"], "argument list|pull: invalid choice: 'fly'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(1))
    (tmp_path / "notes.txt").write_text("x")
    os.chdir(tmp_path)
    argv = [a.format(data=data, out=tmp_path / "out") for a in args]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert message.format(data=data) in err
    assert err.startswith("python -m evalgpu")


# Formats and mapping


def test_every_format_scores_the_same_with_its_own_row_numbers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
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
        out = tmp_path / f"out-{fmt}"
        code, _, _ = run_cli(
            capsys,
            "run",
            tmp_path / f"d.{fmt}",
            "--scorer",
            "summarization",
            "--out",
            out,
            *SCRIPTED,
        )
        assert code == 0
        got = records(out)
        assert [r["row"] for r in got] == numbers
        assert [r["id"] for r in got] == ["a", "b"]
        scores[fmt] = [r["score"] for r in got]
    assert len({tuple(s) for s in scores.values()}) == 1
    assert scores["jsonl"][0] > scores["jsonl"][1]


def test_map_renames_columns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {
                "key": 7,
                "doc": COMPANY,
                "model_output": GOOD,
                "question": "Q?",
                "reference": EINSTEIN,
                "passages": PASSAGES,
            }
        ],
    )
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys,
        "run",
        data,
        "--scorer",
        "summarization",
        "--scorer",
        "context-recall",
        "--out",
        out,
        "--map",
        "id=key",
        "--map",
        "source=doc",
        "--map",
        "summary=model_output",
        "--map",
        "ground_truth=reference",
        "--map",
        "context=passages",
        *SCRIPTED,
    )
    assert code == 0, err
    got = records(out)
    assert [(r["id"], r["scorer"], r["error"]) for r in got] == [
        ("7", "summarization-scorer", None),
        ("7", "context-recall-scorer", None),
    ]
    assert got[1]["score"] == pytest.approx(2 / 3)
    config = json.loads((out / "config.json").read_text())
    assert config["map"]["summary"] == "model_output"


def test_a_mapped_column_that_is_missing_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"source": COMPANY, "summary": GOOD}])
    out = tmp_path / "out"
    code, _, _ = run_cli(
        capsys,
        "run",
        data,
        "--scorer",
        "summarization",
        "--out",
        out,
        "--map",
        "summary=model_output",
        *SCRIPTED,
    )
    assert code == 1
    assert records(out)[0]["error"] == (
        "row 1: summary: missing (no 'model_output' column or a null value)"
    )


def test_example_files_score(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for name, scorer in [("summarization", "summarization"), ("context_recall", "context-recall")]:
        out = tmp_path / name
        code, stdout, err = run_cli(
            capsys,
            "run",
            ROOT / "examples" / f"{name}.jsonl",
            "--scorer",
            scorer,
            "--out",
            out,
            *SCRIPTED,
        )
        assert code == 0, err
        got = records(out)
        assert all(r["error"] is None for r in got), got
        assert len(got) >= 5
        assert "Lowest scores" in stdout
    einstein = next(r for r in records(tmp_path / "context_recall") if r["id"] == "einstein")
    assert einstein["score"] == pytest.approx(2 / 3)
    founded = next(r for r in records(tmp_path / "summarization") if r["id"] == "founded-good")
    assert founded["axes"]["alignment"] == 1.0


def test_agent_shaped_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    agent = {
        "id": "agent",
        "input": {"inputMessages": [{"id": "1", "role": "user", "content": COMPANY}]},
        "output": [
            {"id": "2", "role": "assistant", "content": [{"type": "text", "text": GOOD}]},
            {"id": "3", "role": "assistant", "content": "  "},
        ],
    }
    tools = {
        "id": "tools",
        "input": {"inputMessages": [{"id": "1", "role": "user", "content": "Who was Einstein?"}]},
        "output": [
            {
                "id": "2",
                "role": "assistant",
                "content": {
                    "parts": [
                        {
                            "type": "tool-invocation",
                            "toolInvocation": {
                                "state": "result",
                                "toolCallId": "c1",
                                "toolName": "search",
                                "args": {},
                                "result": PASSAGES[0],
                            },
                        }
                    ]
                },
            },
            {"id": "3", "role": "assistant", "content": "He was born in 1879."},
        ],
        "ground_truth": "Einstein was born in 1879. He won the Nobel Prize.",
    }
    data = write_jsonl(tmp_path / "d.jsonl", [agent, tools])
    out = tmp_path / "out"
    code, _, _ = run_cli(capsys, "run", data, "--scorer", "summarization", "--out", out, *SCRIPTED)
    assert code == 0
    first = records(out)[0]
    assert first["error"] is None and first["axes"]["alignment"] == 1.0
    out2 = tmp_path / "out2"
    code, _, _ = run_cli(
        capsys, "run", data, "--scorer", "context-recall", "--out", out2, "--limit", "5", *SCRIPTED
    )
    assert code == 0
    by_id = {r["id"]: r for r in records(out2)}
    assert by_id["tools"]["score"] == pytest.approx(0.5)  # the tool result is the context
    assert by_id["agent"]["score"] == 0.0  # no ground truth: 0, normatively, without a call
    assert "No ground truth" in by_id["agent"]["reason"]


# Bad input


BAD_ROWS = [
    ("{not json", "row 1: line is not valid JSON: "),
    ({"id": "s1", "source": COMPANY}, 'row 2 (id "s1"): summary: missing'),
    ({"id": "s2", "source": COMPANY, "summary": 42.5}, 'row 3 (id "s2"): summary: must be'),
    (
        {"id": "s3", "source": COMPANY, "summary": 42},
        'row 4 (id "s3"): summary: must be a string or a list of messages, got a number',
    ),
    (
        {"id": "s4", "source": ["x"], "summary": GOOD},
        'row 5 (id "s4"): source: must be a string, got a list',
    ),
    ({"id": "s5", "summary": GOOD}, 'row 6 (id "s5"): source: missing'),
    ({"id": "s6", "source": "  ", "summary": GOOD}, 'row 7 (id "s6"): source: '),
    (
        {"id": {"x": 1}, "source": COMPANY, "summary": GOOD},
        "row 8: id: must be a string or an integer, got an object",
    ),
    ("[1, 2]", "row 9: a row must be a JSON object, got an array"),
]


def test_each_bad_row_becomes_an_error_record_and_the_run_goes_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [r for r, _ in BAD_ROWS] + [{"id": "ok", "source": COMPANY, "summary": GOOD}],
    )
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", out, *SCRIPTED
    )
    assert code == 0  # the run finished; one row was scored
    got = records(out)
    assert len(got) == len(BAD_ROWS) + 1
    for record, (_, message) in zip(got, BAD_ROWS, strict=False):
        assert record["score"] is None
        assert record["error"].startswith(message), record["error"]
        assert message in err  # echoed on stderr as it happened
    assert got[-1]["error"] is None and got[-1]["id"] == "ok"
    last = err.strip().splitlines()[-1]
    assert ": 1 scored, 9 failed (see" in last


def test_a_blank_summary_scores_0_and_counts_in_the_mean(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "good", "source": COMPANY, "summary": GOOD},
            {"id": "blank", "source": COMPANY, "summary": " \n "},
            {"id": "none", "source": COMPANY, "output": [{"role": "assistant", "content": ""}]},
        ],
    )
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", out, *SCRIPTED
    )
    assert code == 0, err
    good, blank, none = records(out)
    for r in (blank, none):
        assert r["error"] is None and r["score"] == 0.0 and r["usage"]["calls"] == 0
        assert r["reason"].startswith("The summary is empty")
    summary = json.loads((out / "summary.json").read_text())["scorers"]["summarization-scorer"]
    assert (summary["scored"], summary["failed"]) == (3, 0)
    assert summary["mean"] == pytest.approx(good["score"] / 3)


CONTEXT_ROWS = [
    ({"id": "c1", "ground_truth": EINSTEIN}, 'row 1 (id "c1"): context: missing'),
    (
        {"id": "c2", "ground_truth": EINSTEIN, "context": 5},
        'row 2 (id "c2"): context: must be a list of strings or a string, got a number',
    ),
    (
        {"id": "c3", "ground_truth": EINSTEIN, "context": ["a", 2]},
        'row 3 (id "c3"): context: must be a list of strings, got a list holding a number',
    ),
    ({"id": "c4", "ground_truth": EINSTEIN, "context": []}, 'row 4 (id "c4"): context: blank'),
    ({"id": "c5", "ground_truth": EINSTEIN, "context": " "}, 'row 5 (id "c5"): context: blank'),
    (
        {"id": "c6", "ground_truth": 7, "context": PASSAGES},
        'row 6 (id "c6"): ground_truth: must be a string, got int',
    ),
]


def test_context_recall_bad_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = [r for r, _ in CONTEXT_ROWS] + [
        {"id": "blank-truth", "ground_truth": " ", "context": PASSAGES},
        {"id": "ok", "ground_truth": EINSTEIN, "context": PASSAGES},
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "out"
    code, _, _ = run_cli(capsys, "run", data, "--scorer", "context-recall", "--out", out, *SCRIPTED)
    assert code == 0
    got = records(out)
    for record, (_, message) in zip(got, CONTEXT_ROWS, strict=False):
        assert record["error"].startswith(message), record["error"]
    blank, ok = got[-2], got[-1]
    assert blank["error"] is None and blank["score"] == 0.0 and blank["usage"]["calls"] == 0
    assert ok["score"] == pytest.approx(2 / 3)


def test_a_source_longer_than_the_judge_context_is_refused_with_sizes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    long_source = "The company sells boats. " * 800  # 20,000 characters: 5,000 "tokens"
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "long", "source": long_source, "summary": "The company sells boats."},
            {"id": "ok", "source": COMPANY, "summary": GOOD},
        ],
    )
    out = tmp_path / "out"
    code, _, _ = run_cli(
        capsys,
        "run",
        data,
        "--scorer",
        "summarization",
        "--out",
        out,
        "--backend",
        "cli_engines:limited",
    )
    assert code == 0
    long, ok = records(out)
    assert long["error"].startswith(
        'row 1 (id "long"): source: 5,000 tokens, too long for the judge model\'s context of '
        "4,096 tokens (summarization.questions needs "
    )
    assert long["usage"]["calls"] == 0
    assert ok["error"] is None


def test_each_failure_carries_its_kind_and_summary_counts_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "ok", "source": COMPANY, "summary": GOOD},
            {"id": "input", "source": COMPANY},
            {"id": "long", "source": "The company sells boats. " * 800, "summary": GOOD},
            {"id": "invalid", "source": COMPANY + " GARBLE", "summary": GOOD},
            {"id": "engine", "source": COMPANY + " EXPLODE", "summary": GOOD},
            "{not json",
        ],
    )
    out = tmp_path / "out"
    argv = ["run", data, "--scorer", "summarization", "--out", out, "--chunk-size", "1"]
    code, stdout, err = run_cli(capsys, *argv, "--backend", "cli_engines:troubled")
    assert code == 0, err
    kinds = [(r["id"], r["errorKind"]) for r in records(out)]
    assert kinds == [
        ("ok", None),
        ("input", "input"),
        ("long", "too_long"),
        ("invalid", "invalid_reply"),
        ("engine", "engine"),
        (None, "input"),
    ]
    summary = json.loads((out / "summary.json").read_text())["scorers"]["summarization-scorer"]
    assert summary["errors"] == {"input": 2, "too_long": 1, "invalid_reply": 1, "engine": 1}
    assert (
        "Failed rows, summarization-scorer (2 input, 1 too_long, 1 invalid_reply, 1 engine):"
        in stdout
    )
    assert '  [too_long] row 3 (id "long"): source: ' in stdout


# Hostile input: one row's problem, in every format

DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = "7" * 100_000


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

    import struct

    summaries = [GOOD.encode(), b"\xff\xfe", GOOD.encode()]
    offsets = [0]
    for v in summaries:
        offsets.append(offsets[-1] + len(v))
    invalid = pa.Array.from_buffers(
        pa.string(),
        3,
        [None, pa.py_buffer(struct.pack("<4i", *offsets)), pa.py_buffer(b"".join(summaries))],
    )
    table = pa.table({"id": ["g1", "b", "g3"], "source": [COMPANY] * 3, "summary": invalid})
    pq.write_table(table, tmp_path / "h.parquet")
    files["parquet"] = (
        tmp_path / "h.parquet",
        {2: "row 2 (id \"b\"): summary: the cell cannot be read ('utf-8' codec"},
    )
    return files


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_hostile_rows_are_their_own_errors_in_every_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fmt: str
) -> None:
    path, bad = _hostile_files(tmp_path)[fmt]
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "run", path, "--scorer", "summarization", "--out", out, *SCRIPTED
    )
    assert code == 0, err
    raw = (out / "results.jsonl").read_bytes()
    got = [json.loads(line) for line in raw.decode("utf-8").splitlines()]  # strict UTF-8
    for record in got:
        if record["row"] in bad:
            message = bad[record["row"]]
            assert record["error"].startswith(message), record["error"]
            assert record["errorKind"] == "input" and record["score"] is None
            assert message in err  # named in the progress output as it happened
        else:
            assert record["error"] is None and record["id"] == f"g{record['row']}", record
    assert {r["row"] for r in got} >= set(bad)
    assert sum(r["error"] is None for r in got) >= 2
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["scorers"]["summarization-scorer"]["errors"]["input"] == len(bad)
    assert summary["file_errors"] == {"count": 0, "messages": []}


def test_a_file_that_cannot_be_read_is_named_counted_and_the_run_goes_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    many_bad = write_jsonl(tmp_path / "a.jsonl", ["{bad"] * (cli.ERRORS_SHOWN + 5))
    not_array = tmp_path / "b.json"
    not_array.write_text('{"id": "x"}')
    not_parquet = tmp_path / "c.parquet"
    not_parquet.write_bytes(b"PAR1 but not really")
    good = write_jsonl(tmp_path / "d.jsonl", summary_rows(2))
    broken = tmp_path / "e.json"  # a malformed element: where the next one starts is unknown
    broken.write_text(f'[{json.dumps(summary_rows(1)[0])}, {{"id": "c" "x"}}, {{"id": "d"}}]')
    out = tmp_path / "out"
    files = [many_bad, not_array, not_parquet, good, broken]
    code, _, err = run_cli(
        capsys, "run", *files, "--scorer", "summarization", "--out", out, *SCRIPTED
    )
    assert code == 0, err
    assert len(successes(out)) == 3
    # Named even after the row errors shown were capped.
    assert "further errors are only in results.jsonl" in err
    assert f"{not_array}: a .json file must hold an array of rows" in err
    assert f"{not_parquet}: not a readable Parquet file" in err
    assert f"{broken}: reading stopped at element 2 (element is not valid JSON" in err
    assert "; 3 unreadable file(s)" in err.strip().splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["file_errors"]["count"] == 3
    assert [m.split(":")[0] for m in summary["file_errors"]["messages"]] == [
        str(not_array),
        str(not_parquet),
        str(broken),
    ]
    (row_error,) = [r for r in records(out) if r["file"] == str(broken) and r["error"]]
    assert row_error["row"] == 2 and "the rest of the file is not read" in row_error["error"]


def test_an_exception_while_preparing_a_row_fails_that_row_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from evalgpu.rows import RowReader

    steps = RowReader.steps

    def fragile(self: RowReader, scorer: Any, record: dict[str, Any]) -> Any:
        if record.get("id") == "r1":
            raise RecursionError("maximum recursion depth exceeded")
        return steps(self, scorer, record)

    monkeypatch.setattr(RowReader, "steps", fragile)
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(3))
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", out, *SCRIPTED
    )
    assert code == 0, err
    got = records(out)
    assert got[1]["error"] == ('row 2 (id "r1"): RecursionError: maximum recursion depth exceeded')
    assert got[1]["errorKind"] == "input"
    assert got[0]["error"] is None and got[2]["error"] is None


def test_text_that_cannot_be_written_as_utf8_is_replaced_in_records(tmp_path: Path) -> None:
    from evalgpu.engines.scripted import ScriptedEngine

    class Garbled(ScriptedEngine):  # an engine whose error message holds a lone surrogate
        def generate(self, requests: Any) -> Any:
            raise RuntimeError("the device said \udc80")

    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(1))
    errors: list[str] = []
    scorers = [create_summarization_scorer(Garbled())]
    evaluate(data, scorers, out=tmp_path / "out", on_error=errors.append).run()
    (record,) = records(tmp_path / "out")  # reads the file as strict UTF-8
    assert record["error"].endswith("RuntimeError: the device said \ufffd")
    assert record["errorKind"] == "engine"
    assert errors == [record["error"]]  # what is echoed is the written, replaced text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["scorers"]["summarization-scorer"]["failures"][0]["error"] == record["error"]


def test_repeated_ids_are_counted_named_once_and_still_scored(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [*summary_rows(3), summary_rows(1)[0]])  # r0 again
    b = write_jsonl(
        tmp_path / "b.jsonl",
        [summary_rows(1, start=1)[0], summary_rows(1)[0], {"source": COMPANY, "summary": GOOD}],
    )  # r1 and r0 again (r0 a third time), and a row without an id
    out = tmp_path / "out"
    argv = ["run", a, b, "--scorer", "summarization", "--out", out, *SCRIPTED]
    code, _, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert len(successes(out)) == 7  # every row is scored
    assert err.count('id "r0" repeats') == 1 and err.count('id "r1" repeats') == 1
    assert f'{a} row 4: id "r0" repeats an earlier row\'s id' in err
    assert "; 3 rows repeating an id (scored; see summary.json)" in err.strip().splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["duplicate_ids"] == {
        "count": 3,
        "ids": 2,
        "examples": [
            {"id": "r0", "file": str(a), "row": 4},
            {"id": "r1", "file": str(b), "row": 1},
        ],
    }
    # A resumed run reads every row again: the same count, each id named again once.
    code, _, err = run_cli(capsys, *argv)
    assert code == 0 and err.count('id "r0" repeats') == 1
    assert json.loads((out / "summary.json").read_text())["duplicate_ids"]["count"] == 3


def test_only_the_first_repeated_ids_are_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from evalgpu.rows import IDS_NAMED

    rows = summary_rows(IDS_NAMED + 5)
    data = write_jsonl(tmp_path / "d.jsonl", rows + rows)
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", out, *SCRIPTED
    )
    assert code == 0
    assert err.count("repeats an earlier row's id") == IDS_NAMED
    assert "further repeated ids are only counted in summary.json" in err
    summary = json.loads((out / "summary.json").read_text())["duplicate_ids"]
    assert (summary["count"], summary["ids"], len(summary["examples"])) == (
        IDS_NAMED + 5,
        IDS_NAMED + 5,
        10,
    )


def test_exit_1_when_no_row_could_be_scored(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", ["{bad", {"source": COMPANY}])
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", tmp_path / "o", *SCRIPTED
    )
    assert code == 1
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            ': 0 scored, 2 failed (see "error" in '
            f"{tmp_path / 'o' / 'results.jsonl'}); no row could be scored"
        )
    )
    empty = write_jsonl(tmp_path / "e.jsonl", [])
    code, _, err = run_cli(
        capsys, "run", empty, "--scorer", "summarization", "--out", tmp_path / "e", *SCRIPTED
    )
    assert code == 1 and "no row could be scored" in err


def test_a_broken_engine_fails_rows_not_the_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(3))
    out = tmp_path / "out"
    argv = [
        "run",
        data,
        "--scorer",
        "summarization",
        "--out",
        out,
        "--backend",
        "cli_engines:flaky",
    ]
    monkeypatch.setenv("EVALGPU_TEST_BROKEN", "1")
    code, _, _ = run_cli(capsys, *argv)
    assert code == 1
    got = records(out)
    assert len(got) == 3
    assert all(
        "engine 'scripted' failed: RuntimeError: the device fell over" in r["error"] for r in got
    )
    # A later run with a working judge retries the failures: each row ends scored once.
    monkeypatch.delenv("EVALGPU_TEST_BROKEN")
    code, _, _ = run_cli(capsys, *argv)
    assert code == 0
    assert len(successes(out)) == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scorers"]["summarization-scorer"]["scored"] == 3
    assert summary["scorers"]["summarization-scorer"]["failed"] == 0


def test_an_engine_that_does_not_load_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(1))
    code, _, err = run_cli(
        capsys,
        "run",
        data,
        "--scorer",
        "summarization",
        "--out",
        tmp_path / "o",
        "--backend",
        "nowhere:engine",
    )
    assert code == 1
    assert "cannot load the judge: ValueError: backend 'nowhere:engine'" in err


# Resume, config changes, torn lines, crashes


def test_resume_scores_only_what_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(10))
    out = tmp_path / "out"
    base = ["run", data, "--scorer", "summarization", "--out", out, "--chunk-size", "3", *SCRIPTED]
    code, _, err = run_cli(capsys, *base, "--limit", "4")
    assert code == 0 and len(records(out)) == 4
    code, _, err = run_cli(capsys, *base)
    assert code == 0
    assert "6 rows in" in err and "(4 already done)" in err
    assert len(records(out)) == 10
    assert sorted(k[1] for k in successes(out)) == list(range(1, 11))
    code, _, err = run_cli(capsys, *base)
    assert code == 0 and "0 rows in" in err and len(records(out)) == 10


def test_engine_options_reach_the_transformers_engine_and_are_not_configuration(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evalgpu.engines
    from evalgpu.engines.scripted import ScriptedEngine

    loaded: list[tuple[Any, str, dict[str, Any]]] = []

    def load_engine(model: Any = None, backend: str = "auto", **options: Any) -> Any:
        loaded.append((model, backend, options))
        return ScriptedEngine()

    monkeypatch.setattr(evalgpu.engines, "load_engine", load_engine)
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(2))
    out = tmp_path / "out"
    base = ["run", data, "--scorer", "summarization", "--out", out]
    assert run_cli(capsys, *base, "--limit", "1")[0] == 0
    # Resumed with engine options: the same configuration ("auto" with them picks the
    # transformers engine: tests/engines/test_load_engine.py).
    assert (
        run_cli(capsys, *base, "--compute", "int8", "--threads", "2", "--batch-size", "4")[0] == 0
    )
    assert loaded == [
        (None, "auto", {}),
        (None, "auto", {"compute": "int8", "threads": 2, "batch_size": 4}),
    ]
    assert len(successes(out)) == 2


def test_a_config_change_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(2))
    out = tmp_path / "out"
    base = ["run", data, "--scorer", "summarization", "--out", out, *SCRIPTED]
    assert run_cli(capsys, *base)[0] == 0
    code, _, err = run_cli(capsys, *base, "--scale", "2")
    assert code == 2
    assert f"output folder {out} holds results of another configuration (options: " in err
    assert "use a new output folder, or delete" in err
    code, _, err = run_cli(capsys, *base, "--scorer", "context-recall")
    assert code == 2 and "scorer_ids: " in err
    write_jsonl(data, summary_rows(3))
    code, _, err = run_cli(capsys, *base)
    assert code == 2 and "data file 1 (" in err and "has other content" in err
    # What does not change scores is not configuration.
    write_jsonl(data, summary_rows(2))
    assert run_cli(capsys, *base, "--chunk-size", "1", "--limit", "1", "--progress", "off")[0] == 0
    assert len(records(out)) == 2


def _two_of_three_rows_as_written_before(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, **earlier: Any
) -> tuple[list[str], Path, dict[str, Any]]:
    """A folder with 2 of 3 rows scored, its config.json rewritten with `earlier`'s keys (and
    another hash); the run's arguments, the folder and the config as it was written."""
    data, out = write_jsonl(tmp_path / "d.jsonl", summary_rows(3)), tmp_path / "out"
    base = [a.format(data=data, out=out) for a in [*RUN, *SCRIPTED]]
    assert run_cli(capsys, *base, "--limit", "2")[0] == 0
    now = json.loads((out / "config.json").read_text())
    changed = {**now, **earlier, "hash": "0123456789abcdef"}
    (out / "config.json").write_text(json.dumps(changed))
    return base, out, now


def test_a_folder_of_the_earlier_configuration_shape_is_resumed_or_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # As version 1 wrote it: the judge as asked for ("auto", no model), shared options.
    base, out, now = _two_of_three_rows_as_written_before(
        capsys,
        tmp_path,
        version=1,
        scorers=["summarization"],
        backend="auto",
        options={"max_questions": 10, "scale": 1.0},
    )
    code, _, err = run_cli(capsys, *base, "--max-questions", "3")
    assert code == 2 and "(options: summarization-scorer max_questions: 10 -> 3)" in err
    code, _, err = run_cli(capsys, *base)
    assert code == 0 and "1 row in" in err and "(2 already done)" in err
    assert json.loads((out / "config.json").read_text())["hash"] == now["hash"]
    assert len(successes(out)) == 3


def test_a_folder_of_the_earlier_judge_pipeline_is_refused_not_mixed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base, out, _ = _two_of_three_rows_as_written_before(capsys, tmp_path, result_version=1)
    code, _, err = run_cli(capsys, *base)
    assert code == 2
    assert "results of judge pipeline version 1, this one scores version 2" in err
    assert len(records(out)) == 2  # nothing appended


def test_a_folder_in_use_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(1))
    out = tmp_path / "out"
    with Sweep(out, [create_summarization_scorer(ScriptedEngine())], paths=[data]):
        code, _, err = run_cli(
            capsys, "run", data, "--scorer", "summarization", "--out", out, *SCRIPTED
        )
    assert code == 2 and "another evalgpu run is writing to" in err


def test_a_torn_last_line_is_ignored_and_cut(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(5))
    out = tmp_path / "out"
    base = ["run", data, "--scorer", "summarization", "--out", out, *SCRIPTED]
    assert run_cli(capsys, *base)[0] == 0
    text = (out / "results.jsonl").read_text()
    lines = text.splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[:3]) + lines[3][:40])  # a crash mid-write
    code, out_text, err = run_cli(capsys, "report", out)
    assert code == 0 and "summarization-scorer" in out_text  # report reads around it
    code, _, err = run_cli(capsys, *base)
    assert code == 0 and "2 rows in" in err
    got = records(out)  # every line parses: the torn tail was cut before appending
    assert sorted(r["row"] for r in got) == [1, 2, 3, 4, 5]


def test_several_files_are_named_in_records_and_labels(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", summary_rows(2))
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": "bad", "source": COMPANY}, *summary_rows(1)])
    out = tmp_path / "out"
    code, _, _ = run_cli(capsys, "run", a, b, "--scorer", "summarization", "--out", out, *SCRIPTED)
    assert code == 0
    got = records(out)
    assert [(Path(r["file"]).name, r["row"]) for r in got] == [
        ("a.jsonl", 1),
        ("a.jsonl", 2),
        ("b.jsonl", 1),
        ("b.jsonl", 2),
    ]
    assert got[2]["error"].startswith(f'{b} row 1 (id "bad"): summary: missing')
    code, _, err = run_cli(
        capsys, "run", a, b, "--scorer", "summarization", "--out", out, *SCRIPTED
    )
    assert "1 row in" in err and len(successes(out)) == 3


def test_several_files_resume_whatever_their_paths_are_called(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jsonl(tmp_path / "a.jsonl", summary_rows(2))
    write_jsonl(tmp_path / "b.jsonl", summary_rows(2))
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    base = ["--scorer", "summarization", "--out", out, *SCRIPTED]
    assert run_cli(capsys, "run", "a.jsonl", "b.jsonl", *base, "--limit", "3")[0] == 0
    code, _, err = run_cli(capsys, "run", tmp_path / "a.jsonl", tmp_path / "b.jsonl", *base)
    assert code == 0 and "1 row in" in err and "(3 already done)" in err
    assert {r["file"] for r in records(out)} == {"a.jsonl", "b.jsonl"}  # the folder's names


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def test_the_entry_point_in_a_subprocess(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(3))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalgpu",
            "run",
            str(data),
            "--scorer",
            "summarization",
            "--out",
            str(tmp_path / "out"),
            *SCRIPTED,
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("python -m evalgpu run: 3 rows in")
    assert len(successes(tmp_path / "out")) == 3


def test_kill_9_at_a_random_moment_then_resume(tmp_path: Path) -> None:
    rows = 2000
    data = write_jsonl(tmp_path / "d.jsonl", distinct_rows(rows))
    out = tmp_path / "out"
    argv = [
        sys.executable,
        "-m",
        "evalgpu",
        "run",
        str(data),
        "--scorer",
        "summarization",
        "--out",
        str(out),
        "--chunk-size",
        "40",
        "--backend",
        "cli_engines:slow",
    ]
    env = {**_env(), "EVALGPU_TEST_SLEEP": "0.03"}  # about 5 s of judging in all
    rng = random.Random()
    for _ in range(3):  # three kills at random moments, each after the previous one's restart
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (out / "results.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(successes(out)) < rows  # the kills came before the end
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    scored = successes(out)  # asserts no duplicate successful (row, scorer)
    assert sorted(k[1] for k in scored) == list(range(1, rows + 1))
    assert all(r["error"] is None for r in records(out))


# models and progress


def test_models_list_and_pull(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from evalgpu import models

    code, out, _ = run_cli(capsys, "models", "list")
    assert code == 0
    assert models.DEFAULT_MODEL + "*" in out
    assert models.SMALL_MODEL + " " in out  # the small embedded model, not the default
    pulled: list[str] = []

    def fake_pull(name: str) -> Path:
        pulled.append(name)
        if name != models.DEFAULT_MODEL:
            raise ValueError(f"only the default model can be pulled, got {name!r}")
        return tmp_path / name

    monkeypatch.setattr(models, "pull", fake_pull)
    code, out, _ = run_cli(capsys, "models", "pull")
    assert code == 0 and out.strip() == str(tmp_path / models.DEFAULT_MODEL)
    code, _, err = run_cli(capsys, "models", "pull", "qwen3-8b")
    assert code == 2 and "only the default model can be pulled" in err
    assert pulled == [models.DEFAULT_MODEL, "qwen3-8b"]


def test_progress_lines_and_bar() -> None:
    from evalgpu.sweep import Progress

    p = Progress(rows_done=50, rows_total=200, rows_run=40, output_tokens=4000, failed=2)
    p.started -= 10
    line = cli._status(p)
    assert line.startswith("50/200 rows, 4.0 rows/s, 400 output tok/s, ETA 0:37")
    assert line.endswith(", 2 errors")
    assert cli._bar(p).startswith("[######..................]  25% 50/200 rows")


@pytest.mark.slow
def test_end_to_end_on_the_default_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "good", "source": COMPANY, "summary": GOOD},
            {
                "id": "wrong",
                "source": COMPANY,
                "summary": "The company was founded in 2001 in Boston.",
            },
        ],
    )
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", out, "--max-questions", "3"
    )
    assert code == 0, err
    got = records(out)
    assert [r["row"] for r in got] == [1, 2]
    for r in got:
        assert (r["score"] is None) != (r["error"] is None)
        assert r["usage"]["calls"] >= 1
    assert any(r["error"] is None for r in got)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tokens"]["output_tokens"] > 0


def test_run_states_the_verdict_mode_it_defaults_to(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "source": COMPANY, "summary": GOOD}])
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", tmp_path / "a", *SCRIPTED
    )
    assert code == 0, err
    assert "evalgpu: hard verdicts (the reference's default; --verdicts soft for the other)" in err
    soft = ["run", data, "--scorer", "summarization", "--out", tmp_path / "b", "--verdicts", "soft"]
    code, _, err = run_cli(capsys, *soft, *SCRIPTED)
    assert code == 0, err
    assert "verdicts (" not in err  # asked for: nothing to state
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["options"]["summarization-scorer"]["verdicts"] == "soft"
