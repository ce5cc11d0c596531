"""Scoring datasets from Python and from the command line: `evaluate` (streaming, resumable;
the command line turns its flags into scorers and an engine and calls it) and `run_evals` (the
batch API of docs/SEMANTICS.md §1.6), both on the one `Driver`.

    from evalgpu import evaluate
    run = evaluate("outputs.jsonl", [summarization, recall], map={"summary": "model_output"},
                   out="runs/x")
    for record in run:              # records as their chunk finishes, in row order
        ...
    frame = run.to_pandas()         # with pandas installed

An `Evaluation` is one run, the one way records reach a folder: iterated, it opens the output
folder (`evalgpu.storage.OutputFolder`, configured by `folder_config` from the scorers' options
and the judge as loaded), reads the rows, hands them a chunk at a time to an executor (a
`Driver` in this process, or `run --ray`'s actors), appends each chunk's records durably as it
comes back, and writes `summary.json` at the end. Memory depends on the chunk size, not on the
number of rows; after a `kill -9`, at most the chunks in flight are lost, and a rerun scores
only what has no successful record.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from evalgpu._options import check_count
from evalgpu.data import FileInfo, RowError, file_format, inspect_file
from evalgpu.driver import CHUNK_SECONDS, ChunkSizer, Driver
from evalgpu.results import Record, ScoreResult
from evalgpu.rows import RepeatedIds, Row, RowReader, file_rows, python_rows
from evalgpu.runner import WaveStats
from evalgpu.scorers._scorer import Scorer
from evalgpu.storage import OutputFolder, check_out, folder_config, latest_records

__all__ = ["Evaluation", "Executor", "Progress", "check_run", "evaluate", "run_evals"]

_NOT_AN_ITEM = RowError("an item is a dict with an 'input' key")

DataSource = str | Path | Sequence[str | Path] | Iterable[dict[str, Any]]

Executor = Callable[["Evaluation", Iterator[list[Row]]], Iterator[tuple[int, list[Record]]]]
"""Scores a run's chunks: `(run, chunks)` -> `(rows, records)` of each chunk, in any order.

The records are `Driver.score_chunk`'s: each row by the scorers its `Row.todo` names (the
output folder's `pending` said which). The default scores each chunk here;
`evalgpu.distributed` scores them on Ray actors."""


@dataclass
class Progress:
    """Where a run stands, passed to `on_progress` after each wave and chunk."""

    rows_done: int = 0
    """Rows done so far: written by this run, or scored by a previous one."""
    rows_total: int | None = None
    """Rows in the data (after `limit`), when known."""
    rows_run: int = 0
    """Rows this run scored and wrote (successes and failures)."""
    resumed: int = 0
    """Rows skipped because a previous run scored them."""
    scored: int = 0
    failed: int = 0
    """Results scored / failed by this run."""
    output_tokens: int = 0
    calls: int = 0
    """Judge calls this run sent to its engine (counted a wave at a time, in this process)."""
    rows_in_flight: int = 0
    calls_in_flight: int = 0
    """Rows handed to the engine and not yet written, and the judge calls made since the last
    chunk was written: the work of the chunk in flight, before its records appear."""
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def calls_planned(self) -> int | None:
        """The judge calls the rows in flight should take, at this run's calls a row so far
        (None before a chunk was written)."""
        if not self.rows_run or not self.rows_in_flight:
            return None
        return max(self.calls_in_flight, round(self.calls / self.rows_run * self.rows_in_flight))


def evaluate(
    data: DataSource,
    scorers: Sequence[Scorer],
    *,
    map: Mapping[str, str] | None = None,
    out: str | Path | None = None,
    target: Callable[[Any], Any] | None = None,
    chunk_size: int | None = None,
    chunk_seconds: float = CHUNK_SECONDS,
    limit: int | None = None,
    executor: Executor | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> Evaluation:
    """Score a dataset with several scorers, streaming; results come as chunks finish.

    Rows are the command line's rows: fields `id`, `input`, `output`, `source`, `summary`,
    `ground_truth`, `context` (see `evalgpu.rows`). A row's own `source` (summarization) or
    `context` (context recall) is used for that row; a row without one falls back to the
    scorer's option.

    Args:
        data: a data file (.jsonl, .json, .csv, .parquet), a list of them, or an iterable of
            row dicts (read lazily: a generator works).
        scorers: scorer objects (`create_*_scorer`); scorers of one engine share its waves.
        map: field -> column, like `--map summary=model_output`.
        out: an output folder (`config.json`, `results.jsonl` appended a chunk at a time,
            `summary.json`, the lock); an existing folder of the same configuration is
            resumed: only what has no successful record is scored. The configuration is
            derived from the scorers' options and the judge as loaded (`folder_config`), so
            `python -m evalgpu run` with the same model and options continues the folder, and
            the other way round. Data files are hashed, so a changed file is refused; rows
            given from Python are matched by position: resume with the same rows in the same
            order. None keeps everything in memory.
        target: makes a row's output from its input when the row has no output column.
        chunk_size: rows per engine batch (and per append to `results.jsonl`), fixed; None
            (the default): chunks sized by time (`chunk_seconds`, `evalgpu.driver.ChunkSizer`).
            A chunk closes where the source changes, at twice its size regardless.
        chunk_seconds: how long a time-sized chunk aims to take: at most about that much
            work is lost to a `kill -9`, and records reach `out` at least that often.
        limit: read at most this many rows in all (None: all); rows already scored count.
        executor: scores the chunks elsewhere (`Executor`: `run --ray` passes Ray actors);
            None: in this process.
        on_progress: called with the `Progress` after each engine wave and chunk.
        on_error: called with each failed record's error message, as it happens.
        on_notice: called with what is no row's error but must not go unsaid: each data file
            that cannot be read (or stops partway), each id that repeats an earlier row's.

    Returns:
        An `Evaluation`: iterate it for the records as they are scored, or call
        `to_pandas()` / `run()`. Nothing is scored before that.

    Raises:
        ValueError: no scorers, a bad `map`, `chunk_size`, `chunk_seconds`, `limit`, data file
            name or `out` (a file), before anything is scored.
    """
    if not scorers:
        raise ValueError("scorers must name at least one scorer")
    paths = check_run(data, map, out, chunk_size, limit, chunk_seconds)
    return Evaluation(
        data,
        list(scorers),
        paths,
        dict(map or {}),
        Path(out) if out is not None else None,
        target,
        chunk_size,
        chunk_seconds,
        limit,
        executor,
        on_progress,
        on_error,
        on_notice,
    )


def check_run(
    data: DataSource,
    map: Mapping[str, str] | None,
    out: str | Path | None,
    chunk_size: int | None,
    limit: int | None,
    chunk_seconds: float = CHUNK_SECONDS,
) -> list[Path] | None:
    """Check a run's arguments before anything loads; returns the data files (None: rows).

    Raises:
        ValueError: a bad `map`, `chunk_size`, `chunk_seconds` or `limit`, a data file that is
            missing or of an unknown type, or an `out` that is a file (each message names it).
    """
    RowReader(map)
    ChunkSizer(chunk_seconds, chunk_size)  # checks both
    if limit is not None:
        check_count("limit", limit, 0)
    if out is not None:
        check_out(Path(out))
    if isinstance(data, (str, Path)):
        items: list[Any] = [data]
    elif isinstance(data, (list, tuple)) and data and all(isinstance(d, (str, Path)) for d in data):
        items = list(data)
    else:
        return None
    paths = [Path(p) for p in items]
    for path in paths:
        file_format(path)
        if not path.is_file():
            raise ValueError(f"data file not found: {path}")
    return paths


@dataclass(eq=False)
class Evaluation:
    """One run of `evaluate`: its records, produced as they are iterated (one pass).

    Each record is a dict, the same as a line of `results.jsonl`: `file`, `row`, `id`,
    `scorer`, `score`, `reason`, `axes`, `preprocessStepResult`, `analyzeStepResult`, `usage`,
    `error`, `errorKind`, `version`. Rows already done in `out` are not scored again and not
    yielded. Stopping early, `close()` it (or use it in a `with` block) to release `out`'s lock.
    The fields are `evaluate`'s arguments (`paths`: the data files, None for rows from Python),
    then what the run found.
    """

    data: DataSource
    scorers: list[Scorer]
    paths: list[Path] | None
    mapping: dict[str, str]
    out: Path | None
    target: Callable[[Any], Any] | None = None
    chunk_size: int | None = None
    chunk_seconds: float = CHUNK_SECONDS
    limit: int | None = None
    executor: Executor | None = None
    on_progress: Callable[[Progress], None] | None = None
    on_error: Callable[[str], None] | None = None
    on_notice: Callable[[str], None] | None = None
    finished: bool = field(default=False, init=False)
    """True once every row has been scored (and `summary.json` written, with `out`)."""
    summary: dict[str, Any] | None = field(default=None, init=False)
    """The aggregates (`summary.json`'s `scorers` and `tokens`), once finished."""
    progress: Progress = field(default_factory=Progress, init=False)
    """Where the run stands (rows done, resumed, scored, failed)."""
    file_errors: list[str] = field(default_factory=list, init=False)
    """Data files that could not be read (or stopped partway), one message each."""
    bad_lines: int = field(default=0, init=False)
    """Lines of `out`'s results.jsonl that did not parse (skipped), once it started."""
    repeats: RepeatedIds = field(default_factory=RepeatedIds, init=False)
    """Rows repeating an earlier row's id (counted in summary.json)."""
    engine_name: str | None = field(default=None, init=False)
    """The engine(s) that scored, for summary.json (an executor may name its own)."""
    folder: OutputFolder = field(init=False)
    """The output folder, open while the run is iterated (`done`: what is recorded)."""
    files: list[str] = field(init=False)
    """The data files as the folder's records name them (a resume keeps the first run's)."""
    records: list[Record] = field(default_factory=list, init=False)
    """Records produced so far (kept only without `out`: with it, they are on disk)."""
    _iter: Generator[Record, None, None] | None = field(default=None, init=False)

    def __iter__(self) -> Iterator[Record]:
        if self._iter is None:
            self._iter = self._each()
        return self._iter

    def close(self) -> None:
        """Stop early: the chunks already yielded stay on disk, the folder's lock is released.

        Resuming later (the same `evaluate` call, or the command line) scores the rest.
        """
        if self._iter is not None:
            self._iter.close()

    def __enter__(self) -> Evaluation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self) -> Evaluation:
        """Score whatever is left; returns self."""
        for _ in self:
            pass
        return self

    def to_pandas(self) -> Any:
        """Score whatever is left; one DataFrame row per (row, scorer).

        With `out`, the frame holds the folder's latest record of every (file, row, scorer),
        this run's and earlier runs' (`evalgpu.storage.latest_records`); without, the records
        of this evaluation.

        Raises:
            ImportError: pandas is not installed (it is not a dependency of evalgpu).
        """
        try:
            import pandas as pd  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ImportError(
                "Evaluation.to_pandas() needs pandas, which evalgpu does not install: "
                "pip install pandas"
            ) from exc
        self.run()
        found = self.records if self.out is None else latest_records(self.out)
        return pd.DataFrame.from_records(found)

    def _each(self) -> Generator[Record, None, None]:
        hashed = self.paths is not None and self.out is not None  # in memory, nothing to resume
        infos = [inspect_file(p) for p in self.paths or ()] if hashed else None
        config = folder_config(self.scorers, self.mapping, self.paths, infos)
        with OutputFolder(self.out, config) as self.folder:
            self.bad_lines = self.folder.resume()
            self.files = self.folder.files
            self.progress = Progress(rows_total=_total_rows(infos, self.limit))  # started now
            self.engine_name = ", ".join(dict.fromkeys(str(s.engine.name) for s in self.scorers))
            for records in self._chunks(self.progress):
                if self.out is None:
                    self.records.extend(records)
                yield from records
            self._finish(self.progress)
        self.finished = True

    def _chunks(self, progress: Progress) -> Iterator[list[Record]]:
        """Score what the folder lacks; yield each chunk's records once they are on disk."""
        report = self.on_progress or (lambda _: None)
        tell = self.on_notice or (lambda _: None)

        def wave(stats: WaveStats) -> None:
            progress.output_tokens += stats.output_tokens
            progress.calls += stats.requests
            progress.calls_in_flight += stats.requests
            report(progress)

        def handed(chunks: Iterator[list[Row]]) -> Iterator[list[Row]]:
            for chunk in chunks:
                progress.rows_in_flight += len(chunk)
                report(progress)
                yield chunk

        def skipped(_: Row) -> None:  # a previous run scored it
            progress.rows_done += 1
            progress.resumed += 1
            if progress.resumed % 1000 == 0:
                report(progress)

        def file_error(message: str) -> None:
            self.file_errors.append(message)
            tell(message)

        def noted(rows: Iterable[Row]) -> Iterator[Row]:
            for row in rows:
                notice = self.repeats.note(row, self.files)
                if notice is not None:
                    tell(notice)
                yield row

        driver = Driver(
            self.scorers, mapping=self.mapping, files=self.files, target=self.target, on_wave=wave
        )
        if self.paths is None:
            items = cast(Iterable[Any], self.data)
            rows: Iterator[Row] = itertools.islice(python_rows(items), self.limit)
        else:
            rows = file_rows(self.paths, limit=self.limit, on_file_error=file_error)
        sizer = ChunkSizer(self.chunk_seconds, self.chunk_size)
        todo = self.folder.pending(noted(driver.read(rows)), [s.id for s in self.scorers], skipped)
        chunks = driver.chunks(todo, size=sizer)
        since = time.monotonic()
        for n, records in (self.executor or _here(driver))(self, handed(chunks)):
            written = self.folder.append(records)  # none that the folder holds a success for
            now = time.monotonic()
            sizer.observe(n, now - since)
            since = now
            progress.rows_in_flight = max(0, progress.rows_in_flight - n)
            progress.calls_in_flight = 0
            progress.rows_run += n
            progress.rows_done += n
            for record in written:
                if record["error"] is None:
                    progress.scored += 1
                else:
                    progress.failed += 1
                    if self.on_error is not None:
                        self.on_error(record["error"])
            report(progress)
            yield written
        report(progress)

    def _finish(self, p: Progress) -> None:
        """Write `summary.json` (aggregates of every record in the folder, and this run)."""
        wall = p.elapsed
        summary = self.folder.write_summary(
            engine=self.engine_name,
            file_errors=self.file_errors,
            duplicate_ids=self.repeats.summary(),
            run={
                "wall_s": round(wall, 3),
                "rows": p.rows_run,
                "resumed_rows": p.resumed,
                "rows_per_s": round(p.rows_run / wall, 3) if wall > 0 else None,
                "output_tokens_per_s": round(p.output_tokens / wall, 3) if wall > 0 else None,
                "chunk_size": self.chunk_size,
                "chunk_seconds": self.chunk_seconds if self.chunk_size is None else None,
                "limit": self.limit,
            },
        )
        self.summary = {k: summary[k] for k in ("scorers", "tokens", "cached_share")}


def _here(driver: Driver) -> Executor:
    """The default executor: each chunk scored in this process, one after the other."""

    def score(run: Evaluation, chunks: Iterator[list[Row]]) -> Iterator[tuple[int, list[Record]]]:
        for chunk in chunks:
            yield len(chunk), driver.score_chunk(chunk)

    return score


def _total_rows(infos: Sequence[FileInfo] | None, limit: int | None) -> int | None:
    counts = [f.rows for f in infos] if infos is not None else [None]
    total = None if any(c is None for c in counts) else sum(c or 0 for c in counts)
    if limit is not None:
        return limit if total is None else min(limit, total)
    return total


def run_evals(
    data: Iterable[dict[str, Any]],
    scorers: Sequence[Any],
    target: Callable[[Any], Any] | None = None,
    on_item_complete: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Score a dataset with several scorers, batching across items and scorers.

    Items stream through the `Driver` a chunk at a time, as `evaluate` does; each item's entry
    is complete (and `on_item_complete` called) as soon as its chunk is scored.

    Args:
        data: items, dicts with `input`, optional `output` (else `target(input)` makes it) and
            optional `ground_truth` (`groundTruth` is accepted too); an item may also bring its
            own `source` (summarization) or `context` (context recall).
        scorers: scorer objects (from `create_*_scorer`).
        target: makes an item's output from its input when the item has none.
        on_item_complete: called once per item, in order, with that item's entry of `items`.

    Returns:
        `{"scores": {scorer_id: mean score or None}, "summary": {"total_items": n,
        "failed_items": k}, "items": [{"item", "output", "scorer_results": {id: result}}]}`.
        An item fails when any of its scorers (or its target) failed.
    """
    originals: dict[int, Any] = {}

    def rows() -> Iterator[Row]:
        for number, item in enumerate(data, 1):
            originals[number] = item
            yield Row(
                0, number, item if isinstance(item, dict) and "input" in item else _NOT_AN_ITEM
            )

    driver = Driver(scorers, target=target, noun="item")
    entries: list[dict[str, Any]] = []
    sizer = ChunkSizer()
    since = time.monotonic()
    for chunk in driver.chunks(driver.read(rows()), size=sizer):
        records = driver.score_chunk(chunk)
        now = time.monotonic()
        sizer.observe(len(chunk), now - since)
        since = now
        results: dict[int, dict[str, ScoreResult]] = {}
        for record in records:
            result = ScoreResult.model_validate(record)
            results.setdefault(record["row"], {})[result.scorer] = result
        for row in chunk:
            item = originals.pop(row.number)
            prepared = row.record if isinstance(row.record, dict) else {}
            output = prepared.get("output") if isinstance(item, dict) else None
            entry = {"item": item, "output": output, "scorer_results": results[row.number]}
            entries.append(entry)
            if on_item_complete is not None:
                on_item_complete(entry)
    scores: dict[str, float | None] = {}
    for scorer in scorers:
        ok = [s for e in entries if (s := e["scorer_results"][scorer.id].score) is not None]
        scores[scorer.id] = sum(ok) / len(ok) if ok else None
    failed = sum(any(r.error for r in e["scorer_results"].values()) for e in entries)
    return {
        "scores": scores,
        "summary": {"total_items": len(entries), "failed_items": failed},
        "items": entries,
    }
