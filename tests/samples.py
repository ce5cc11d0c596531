"""The sample rows the tests share, and helpers to write them and read an output folder.

The texts are small and made up (never rows of `benchmarks/data/`); what the scripted engine
makes of them (`evalgpu.engines.scripted`): `GOOD` is faithful to `SOURCE` and to `COMPANY`,
and covers all of `SOURCE` but only part of `COMPANY`; two of `EINSTEIN`'s three claims are
in `PASSAGES`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COMPANY = (
    "The company was founded in 1995 by John Smith. It started with 10 employees and grew to "
    "500 by 2020. The company is based in Seattle."
)
SOURCE = "The company was founded in 1995 by John Smith. The company is based in Seattle."
GOOD = "John Smith founded the company in 1995. It is based in Seattle."
EINSTEIN = "Einstein was born in 1879. He developed relativity. He won the Nobel Prize."
PASSAGES = [
    "Albert Einstein was born on 14 March 1879 in Ulm.",
    "Einstein developed the theory of relativity.",
]


def summary_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    """Rows r<start>... of `COMPANY` summarized by `GOOD` (the judge's replies repeat)."""
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


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    """Rows as JSON Lines (a string is written as the line itself); returns `path`."""
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows
        ),
        encoding="utf-8",
    )
    return path


def records(out: Path, *, killed: bool = False) -> list[dict[str, Any]]:
    """Every record of an output folder's results.jsonl, read as strict UTF-8.

    `killed`: the writer was killed and nothing has resumed the folder since, so its last line
    may be torn (the next run cuts it): only the lines a newline ends are read.
    """
    text = (out / "results.jsonl").read_text(encoding="utf-8")
    if killed:
        text = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in text.splitlines()]


def successes(out: Path, *, killed: bool = False) -> dict[tuple[Any, int, str], dict[str, Any]]:
    """The folder's successful records by (file, row, scorer); asserts none is there twice."""
    found: dict[tuple[Any, int, str], dict[str, Any]] = {}
    for r in records(out, killed=killed):
        if r["error"] is None:
            key = (r["file"], r["row"], r["scorer"])
            assert key not in found, f"duplicate successful record for {key}"
            found[key] = r
    return found


def read_summary(out: Path) -> dict[str, Any]:
    """The folder's summary.json."""
    loaded: dict[str, Any] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return loaded


def run_argv(data: Path, out: Path, *flags: str) -> list[str]:
    """`python -m evalgpu run` of `data` by the summarization scorer into `out`, for a
    subprocess (the entry point itself, a `kill -9`)."""
    command = [sys.executable, "-m", "evalgpu", "run", str(data), "--scorer", "summarization"]
    return [*command, "--out", str(out), *flags]
