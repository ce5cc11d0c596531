"""Score both example files with one judge, loaded once: the Python API in a few lines.

`scripts/demo` runs this; the command line does the same in two runs (README.md), each of which
loads the judge. Each output folder is the one `python -m evalgpu run` writes and resumes, so
`python -m evalgpu report runs/example-summarization` reads it, and running this again (or the
command line's run of the same file into the same folder) scores only what is not yet scored.
Run it from the repository's root:

    .venv/bin/python examples/score_examples.py
"""

import sys
import time

import evalgpu
from evalgpu.scorers.context_recall import row_context_scorer  # each row brings its passages

ONE_CHUNK = 100
"""Rows per chunk here, more than an example file holds: each file is one batch of judge waves.

By default a run sizes its chunks by time (about a minute each, starting with one row), so that a
long file writes records early and a kill loses little. A file of a few rows gains nothing from
that and loses batching: on a 2-core CPU the six summaries took 76-79 s in one chunk against
104-119 s in time-sized ones (docs/DECISIONS.md, 2026-12-07). A long file keeps the default.
"""

JOBS = [
    ("summarization.jsonl", evalgpu.create_summarization_scorer, "runs/example-summarization"),
    ("context_recall.jsonl", row_context_scorer, "runs/example-context-recall"),
]


def progress_lines(every: float = 10.0):  # type: ignore[no-untyped-def]
    """An `on_progress` hook that prints where the run stands at most every `every` seconds."""
    last = [0.0]

    def show(p):  # type: ignore[no-untyped-def]
        if time.monotonic() - last[0] >= every:
            last[0] = time.monotonic()
            print(f"  {p.rows_done}/{p.rows_total} rows after {p.elapsed:.0f} s", file=sys.stderr)

    return show


def main() -> None:
    judge = evalgpu.load_engine()  # the default judge, with the best backend this machine has
    for name, create_scorer, out in JOBS:
        print(f"scoring examples/{name} into {out}", file=sys.stderr)
        run = evalgpu.evaluate(
            f"examples/{name}",
            [create_scorer(judge)],
            out=out,
            chunk_size=ONE_CHUNK,
            on_progress=progress_lines(),
        ).run()
        done = run.progress
        print(
            f"  {done.scored} scored, {done.failed} failed, {done.resumed} already done, "
            f"in {done.elapsed:.0f} s",
            file=sys.stderr,
        )


if __name__ == "__main__":  # vLLM starts its engine processes by spawn: they import this file
    main()
