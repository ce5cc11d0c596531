"""The driver: rows in, a chunk at a time, one `Runner.run` per engine, records out.

Every entry point scores through a `Driver`: `evaluate` (and so the command line), `run_evals`
and the Ray replicas. The data flow reads one way:

    file (`evalgpu.data`) -> row, read once (`evalgpu.rows`) -> still to score (the output
    folder, `evalgpu.storage`) -> chunks and steps (here) -> judge calls (`evalgpu.scorers`)
    -> waves (`Runner`) -> engine -> records (here) -> the output folder -> report

`read` takes what every step reads of a row once (`RowReader.read`: its id, why it cannot be
scored, its source); `chunks` cuts the rows to score into chunks (a source's rows together);
`score_chunk` scores one and writes nothing, so a chunk can be scored in another process. Which
rows and scorers are still to score is the output folder's to say (`Row.todo`, set by
`evalgpu.storage.OutputFolder.pending`), not the driver's. A record is one `results.jsonl` line
(`results.make_record`), the same dict for every entry point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evalgpu._options import check_count
from evalgpu.data import RowError
from evalgpu.results import ErrorKind, InputError, Record, ScoreResult, Steps, make_record
from evalgpu.rows import Row, RowReader, row_label
from evalgpu.runner import Runner, WaveStats
from evalgpu.scorers._scorer import Scorer

__all__ = ["CHUNK_ROWS", "CHUNK_SECONDS", "ChunkSizer", "Driver"]

CHUNK_SECONDS = 60.0
"""How long a time-sized chunk aims to take (`--chunk-seconds`): what a `kill -9` can lose."""

CHUNK_ROWS = (1, 2048)
"""Rows of a run's first time-sized chunk, and the most a later one is sized to (memory)."""


@dataclass
class ChunkSizer:
    """How many rows the next chunk takes: `fixed`, or as many as take about `seconds`.

    Time-sized (`fixed` None), a run starts with one row (`CHUNK_ROWS`), so that the first
    records are written within a chunk's time whatever the machine; each chunk then takes as
    many rows as the run's rate so far scores in `seconds`, at most four times the last size
    (one fast chunk does not make the next one huge) and `CHUNK_ROWS[1]` in all. On a GPU that
    grows to hundreds or thousands of rows, which batch across rows as a fixed size would; on a
    CPU, a few.
    """

    seconds: float = CHUNK_SECONDS
    fixed: int | None = None
    rows: int = field(init=False)
    """The next chunk's rows."""
    _scored: int = field(default=0, init=False)
    _spent: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"chunk_seconds must be > 0, got {self.seconds!r}")
        if self.fixed is not None:
            check_count("chunk_size", self.fixed)
        self.rows = self.fixed if self.fixed is not None else CHUNK_ROWS[0]

    def observe(self, rows: int, seconds: float) -> None:
        """A chunk of `rows` took `seconds` (from the previous chunk's end to this one's)."""
        if self.fixed is not None or rows <= 0:
            return
        self._scored += rows
        self._spent += max(seconds, 1e-6)
        fits = int(self._scored / self._spent * self.seconds)
        self.rows = max(CHUNK_ROWS[0], min(fits, 4 * self.rows, CHUNK_ROWS[1]))


class Driver:
    """Scores rows with several scorers, a chunk at a time, one `Runner.run` per engine.

    Scorers that share an engine share its waves: every ready judge call of every row and
    scorer of a chunk goes to that engine in one `generate()`.

    Args:
        scorers: the scorers, in the order of their records for a row.
        mapping: field -> column, for rows whose columns have other names (like `--map`).
        files: the names records carry in `file`, by `Row.file` (None for rows from Python).
        target: makes a row's output from its input when the row has none (an agent, a
            summariser); it runs once per row, not per scorer, and only for rows still to score.
        noun: what labels call a row in error messages ("row 17", "item 3").
        on_wave: called with each wave's `WaveStats` (progress lines, benchmarks).

    Raises:
        ValueError: two scorers with one id, or a bad `mapping`.
    """

    def __init__(
        self,
        scorers: Sequence[Scorer],
        *,
        mapping: Mapping[str, str] | None = None,
        files: Sequence[str | None] = (None,),
        target: Callable[[Any], Any] | None = None,
        noun: str = "row",
        on_wave: Callable[[WaveStats], None] | None = None,
    ) -> None:
        ids = [s.id for s in scorers]
        if len(set(ids)) != len(ids):
            raise ValueError(f"scorers must have distinct ids, got {ids}")
        self.scorers = list(scorers)
        self.reader = RowReader(mapping)
        self.files = list(files)
        self.target = target
        self.noun = noun
        self._runners: dict[int, Runner] = {}
        for scorer in self.scorers:
            key = id(scorer.engine)
            if key not in self._runners:
                self._runners[key] = Runner(scorer.engine, on_wave=on_wave)

    def failed(self, row: Row, scorer: str, error: str, kind: ErrorKind) -> Record:
        """The error record of (row, scorer): `error` prefixed with the row's label."""
        result = ScoreResult(
            scorer=scorer,
            error=f"{row_label(row, self.files, self.noun)}: {error}",
            error_kind=kind,
        )
        return make_record(self._base(row, scorer), result)

    def _base(self, row: Row, scorer: str) -> Record:
        return {"row": row.number, "id": row.id, "file": self.files[row.file], "scorer": scorer}

    def read(self, rows: Iterable[Row]) -> Iterator[Row]:
        """The rows as read through the column map, their id and source taken once
        (`RowReader.read`): what `chunks` and `score_chunk` take."""
        return self.reader.read(rows)

    def prepare(self, row: Row) -> Row:
        """`row`, with its output made by `target` when there is one and the row has none."""
        record = row.record
        column = self.reader.mapping.get("output", "output")
        if self.target is None or isinstance(record, RowError) or column in record:
            return row
        try:
            output = self.target(record.get(self.reader.mapping.get("input", "input")))
        except Exception as exc:  # the caller's agent may raise anything: this row fails
            problem = f"target raised {type(exc).__name__}: {exc}"
            return replace(row, record=RowError(problem), problem=problem)
        return replace(row, record={**record, column: output})

    def score_chunk(self, rows: Sequence[Row]) -> list[Record]:
        """Score one chunk of read, prepared rows; return their records, in row then scorer
        order.

        Writes nothing. A row is scored by the scorers of its `Row.todo` (None: all). A row
        that cannot be scored gets an error record naming it; the other rows are scored. An
        engine that breaks its contract (`Runner.run` raises: too few replies) fails the rows
        it was judging in this chunk, not the run; a rerun retries them.
        """
        records: list[Record] = []
        jobs: dict[int, list[tuple[int, str, Steps, str]]] = {k: [] for k in self._runners}
        for row in rows:
            label = row_label(row, self.files, self.noun)  # `[file ]row N[ (id "x")]`
            fields = self.reader.fields(row.record) if isinstance(row.record, dict) else None
            for scorer in self.scorers:
                if row.todo is not None and scorer.id not in row.todo:
                    continue
                problem = row.problem
                kind: ErrorKind = "input"
                if problem is None:
                    assert fields is not None
                    try:
                        steps = scorer.steps(fields)
                    except InputError as exc:
                        problem, kind = str(exc), exc.kind
                    except Exception as exc:  # hostile values (nesting too deep, ...): one row's
                        problem = f"{type(exc).__name__}: {exc}"
                if problem is not None:
                    records.append(self.failed(row, scorer.id, problem, kind))
                    continue
                jobs[id(scorer.engine)].append((len(records), scorer.id, steps, label))
                records.append(self._base(row, scorer.id))
        for key, group in jobs.items():
            if not group:
                continue
            try:
                results = self._runners[key].run(
                    [(scorer_id, steps) for _, scorer_id, steps, _ in group],
                    [label for *_, label in group],
                )
            except Exception as exc:  # an engine that breaks its contract: its rows fail
                error = f"{type(exc).__name__}: {exc}"
                results = [
                    ScoreResult(scorer=sid, error=f"{label}: {error}", error_kind="engine")
                    for _, sid, _, label in group
                ]
            for (slot, *_), result in zip(group, results, strict=True):
                records[slot] = make_record(records[slot], result)
        return records

    def chunks(self, rows: Iterable[Row], *, size: ChunkSizer | int) -> Iterator[list[Row]]:
        """The (read) rows, prepared, a chunk at a time.

        Rows are read as the chunks need them, so memory depends on the chunk size, not on the
        number of rows. A chunk's size is `size`'s rows when the chunk starts (a `ChunkSizer`
        the caller tells how long each chunk took, or an int: fixed). A chunk closes once
        it holds that many rows and the next row has another source (`Row.group`), so
        that a source's summaries (FRANK has 4-5 an article) share one chunk: its questions
        are asked once and its prefix computed once. At twice the size it closes regardless,
        which bounds memory.
        """
        sizer = size if isinstance(size, ChunkSizer) else ChunkSizer(fixed=size)
        chunk: list[Row] = []
        rows_wanted = sizer.rows
        last: str | None = None
        for row in rows:
            key = row.group
            # A row without a source (an unreadable one) makes no judge calls: no cut there.
            cut = len(chunk) >= rows_wanted and key is not None and key != last
            if cut or len(chunk) >= 2 * rows_wanted:
                yield chunk
                chunk = []
                rows_wanted = sizer.rows
            chunk.append(self.prepare(row))
            last = key if key is not None else last
        if chunk:
            yield chunk
