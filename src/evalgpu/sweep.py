"""A sweep: scorers run into an output folder, resumably; the one way records reach a folder.

A sweep opens the folder for what scores (`evalgpu.storage.OutputFolder`, configured by
`folder_config` from the scorers' options and the judge as loaded), reads the rows, hands them
a chunk at a time to an executor (a `Driver` in this process, or `run --ray`'s actors), appends
each chunk's records durably as it comes back, and keeps the progress. Memory depends on the
chunk size, not on the number of rows; after a `kill -9`, at most the chunks in flight are lost,
and a rerun scores only what has no successful record. `evalgpu.evaluate` drives it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu.data import FileInfo, inspect_file
from evalgpu.driver import Driver
from evalgpu.results import Record
from evalgpu.rows import RepeatedIds, Row, file_rows, python_rows
from evalgpu.runner import WaveStats
from evalgpu.scorers._scorer import Scorer
from evalgpu.storage import OutputFolder, folder_config

__all__ = ["Executor", "Progress", "Sweep"]

Executor = Callable[["Sweep", Iterator[list[Row]]], Iterator[tuple[int, list[Record]]]]
"""Scores a sweep's chunks: `(sweep, chunks)` -> `(rows, records)` of each chunk, in any order.

The records are `Driver.score_chunk`'s, but for the (row, scorer) that `sweep.folder.done`
holds. The default scores each chunk here; `evalgpu.distributed` scores them on Ray actors."""


@dataclass
class Progress:
    """Where a sweep stands, passed to `on_progress` after each wave and chunk."""

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
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Sweep:
    """An output folder opened for `scorers`: configured, locked, resumed, its progress kept.

    Use it as a context manager (it holds the folder's lock): `run` scores the rows into it,
    `finish` writes `summary.json`.

    Args:
        out: the output folder (created; an existing one is resumed); None: a run whose
            records are kept in memory only.
        scorers: the scorers, in the order of their records for a row; the folder's
            configuration is derived from them (`folder_config`).
        mapping: field -> column.
        paths: the data files (hashed into the configuration), or None for rows from Python.
        limit: rows read in all (None: all).

    Raises:
        ConfigError: the folder holds another configuration's results, or another run is
            writing to it.
        OSError: a data file or the folder cannot be read or written.
    """

    def __init__(
        self,
        out: Path | None,
        scorers: Sequence[Scorer],
        *,
        mapping: Mapping[str, str] | None = None,
        paths: Sequence[Path] | None = None,
        limit: int | None = None,
    ) -> None:
        self.scorers = list(scorers)
        self.mapping = dict(mapping or {})
        self.paths, self.limit = paths, limit
        infos = [inspect_file(p) for p in paths] if paths is not None else None
        self.folder = OutputFolder(out, folder_config(self.scorers, self.mapping, paths, infos))
        try:
            self.bad_lines = self.folder.resume()
            """Complete lines of results.jsonl that did not parse (skipped)."""
        except BaseException:
            self.folder.close()
            raise
        self.config = self.folder.config
        self.ids: list[str] = self.config["scorer_ids"]
        # The folder's own paths: the records already written name their files by them.
        self.files = self.folder.files
        self.progress = Progress(rows_total=_total_rows(infos, limit))
        self.file_errors: list[str] = []
        """Files that could not be read (or stopped partway), one message each."""
        self.repeats = RepeatedIds()
        """Rows repeating an earlier row's id (counted in summary.json)."""
        self.engine_name: str | None = ", ".join(
            dict.fromkeys(str(s.engine.name) for s in self.scorers)
        )
        """The engine(s) that scored, for summary.json (an executor may name its own)."""

    def close(self) -> None:
        """Release the folder (safe to call twice)."""
        self.folder.close()

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(
        self,
        items: Iterable[Any] = (),
        *,
        chunk_size: int = 256,
        target: Callable[[Any], Any] | None = None,
        executor: Executor | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> Iterator[list[Record]]:
        """Score what the folder lacks; yield each chunk's records once they are on disk.

        Args:
            items: the rows, when the sweep has no `paths` (dicts from Python, read lazily).
            chunk_size: rows a chunk holds (`Driver.chunks`: cut where the source changes).
            target: makes a row's output when it has none (see `Driver`).
            executor: scores the chunks (`Executor`); None: here, one `Runner.run` a chunk.
            on_progress: called after each engine wave and each chunk.
            on_error: called with each failed record's error message, as it happens.
            on_notice: called with each data file that cannot be read (or stops partway) and
                each id that repeats an earlier row's (`RepeatedIds.note`); both are counted
                in summary.json.
        """
        progress = self.progress
        report = on_progress or _ignore
        tell = on_notice or _ignore

        def wave(stats: WaveStats) -> None:
            progress.output_tokens += stats.output_tokens
            report(progress)

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
                notice = self.repeats.note(driver.reader.id(row)[0], row, self.files)
                if notice is not None:
                    tell(notice)
                yield row

        driver = Driver(
            self.scorers, mapping=self.mapping, files=self.files, target=target, on_wave=wave
        )
        if self.paths is None:
            rows: Iterator[Row] = itertools.islice(python_rows(items), self.limit)
        else:
            rows = file_rows(self.paths, limit=self.limit, on_file_error=file_error)
        chunks = driver.chunks(
            noted(rows), chunk_size=chunk_size, done=self.folder.done, on_skip=skipped
        )
        for n, records in (executor or _here(driver))(self, chunks):
            written = self.folder.append(records)  # none that the folder holds a success for
            progress.rows_run += n
            progress.rows_done += n
            for record in written:
                if record["error"] is None:
                    progress.scored += 1
                else:
                    progress.failed += 1
                    if on_error is not None:
                        on_error(record["error"])
            report(progress)
            yield written
        report(progress)

    def finish(self, *, chunk_size: int | None = None) -> dict[str, Any]:
        """Write `summary.json` (aggregates of every record in the folder, and this run);
        return it."""
        p = self.progress
        wall = p.elapsed
        return self.folder.write_summary(
            engine=self.engine_name,
            file_errors=self.file_errors,
            duplicate_ids=self.repeats.summary(),
            run={
                "wall_s": round(wall, 3),
                "rows": p.rows_run,
                "resumed_rows": p.resumed,
                "rows_per_s": round(p.rows_run / wall, 3) if wall > 0 else None,
                "output_tokens_per_s": round(p.output_tokens / wall, 3) if wall > 0 else None,
                "chunk_size": chunk_size,
                "limit": self.limit,
            },
        )


def _here(driver: Driver) -> Executor:
    """The default executor: each chunk scored in this process, one after the other."""

    def score(sweep: Sweep, chunks: Iterator[list[Row]]) -> Iterator[tuple[int, list[Record]]]:
        for chunk in chunks:
            yield len(chunk), driver.score_chunk(chunk, sweep.folder.done)

    return score


def _ignore(_: object) -> None:
    pass


def _total_rows(infos: Sequence[FileInfo] | None, limit: int | None) -> int | None:
    counts = [f.rows for f in infos] if infos is not None else [None]
    total = None if any(c is None for c in counts) else sum(c or 0 for c in counts)
    if limit is not None:
        return limit if total is None else min(limit, total)
    return total
