"""A sweep: a resumable run into an output folder, for the command line and for Python.

A sweep opens the folder (`evalgpu.storage`: lock, configuration, what is already done), streams
rows through a `Driver` a chunk at a time, appends each chunk's records durably before the next
chunk is read, keeps the aggregates (`evalgpu.report.Aggregator`) and the progress, and writes
`summary.json` at the end. Memory depends on the chunk size, not on the number of rows. Running
again with the same folder and configuration scores only what has no successful record; after
a `kill -9`, at most the chunk in flight is lost.

The command line opens a sweep from its `RunSettings` (`open_sweep`) and calls `run`;
`evalgpu.evaluation` opens one with a configuration built from scorer objects and calls `stream`
and `finish`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu.data import FileInfo, inspect_file
from evalgpu.driver import Driver
from evalgpu.engines.base import Engine
from evalgpu.report import Aggregator
from evalgpu.results import Record
from evalgpu.rows import RepeatedIds, Row, RowReader, file_rows
from evalgpu.runner import WaveStats
from evalgpu.scorers._scorer import Scorer
from evalgpu.settings import RunSettings
from evalgpu.storage import CONFIG_VERSION, ConfigError, OutputFolder, config_scale

__all__ = ["ConfigError", "Outcome", "Progress", "Sweep", "open_sweep"]


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


@dataclass
class Outcome:
    """What a finished sweep did (this run) and what the folder now holds (all runs)."""

    progress: Progress
    total_scored: int
    total_failed: int
    file_errors: list[str]
    summary_path: Path
    repeated_ids: int = 0
    """Rows whose id an earlier row of the data already had (they were scored too)."""


class Sweep:
    """An output folder opened for a run: locked, resumed, and its records aggregated.

    Use it as a context manager (it holds the folder's lock). `stream` scores rows into it (or
    `add_chunk` takes chunks scored elsewhere, skipping what `done` says), and `finish` writes
    `summary.json`.

    Args:
        out: the output folder (created; an existing one is resumed).
        config: the run's configuration with its hash (`RunSettings.config`, or
            `evalgpu.evaluation`'s).
        rows_total: the number of rows, when known (progress).
        option: how the folder was named to the user, for messages ("--out" or "out").
        settings: the command line's settings (`run` needs them).

    Raises:
        ConfigError: the folder holds another configuration's results, or another run is
            writing to it.
        OSError: the folder cannot be read or written.
    """

    def __init__(
        self,
        out: Path,
        config: dict[str, Any],
        *,
        rows_total: int | None = None,
        option: str = "--out",
        settings: RunSettings | None = None,
    ) -> None:
        self.settings = settings
        self.rows_total = rows_total
        self.folder = OutputFolder(out, config, option=option)
        try:
            self.config = self.folder.config
            self.ids: list[str] = self.config["scorer_ids"]
            # The folder's own paths: the records already written name their files by them.
            self.files: list[str] = [d["path"] for d in self.config["data"]]
            self.aggregator = Aggregator(self.ids, self.files, config_scale(self.config))
            self.bad_lines = self.folder.resume(self.aggregator.add)
        except BaseException:
            self.folder.close()
            raise
        self.progress = Progress(rows_total=rows_total)
        self.file_errors: list[str] = []
        """Files that could not be read (or stopped partway), one message each."""
        self.repeats = RepeatedIds()
        """Rows repeating an earlier row's id (counted in summary.json)."""
        self.engine_name: str | None = None

    def close(self) -> None:
        """Release the folder (safe to call twice)."""
        self.folder.close()

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stream(
        self,
        scorers: Sequence[Scorer],
        rows: Iterable[Row],
        *,
        mapping: Mapping[str, str] | None = None,
        chunk_size: int = 256,
        target: Callable[[Any], Any] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> Iterator[list[Record]]:
        """Score what is not done yet; yield each chunk's records once they are on disk.

        Args:
            scorers: the scorers whose ids the configuration names, in its order.
            rows: the rows, streamed (`file_rows`, `python_rows`).
            mapping: field -> column.
            chunk_size: rows per `Runner.run` and per append.
            target: makes a row's output when it has none (see `Driver`).
            on_progress: called after each engine wave and each chunk.
            on_error: called with each failed record's error message, as it happens.
            on_notice: called with each id that repeats an earlier row's
                (`RepeatedIds.note`; all are counted in summary.json).
        """
        if [s.id for s in scorers] != self.ids:
            raise ValueError(f"scorers must be {self.ids}, got {[s.id for s in scorers]}")
        progress = self.progress
        report = on_progress or (lambda _: None)

        def wave(stats: WaveStats) -> None:
            progress.output_tokens += stats.output_tokens
            report(progress)

        def skipped(_: Row) -> None:
            progress.rows_done += 1
            progress.resumed += 1
            if progress.resumed % 1000 == 0:
                report(progress)

        driver = Driver(
            scorers,
            mapping=mapping,
            files=self.files,
            target=target,
            on_wave=wave,
        )
        self.engine_name = ", ".join(
            dict.fromkeys(getattr(s.engine, "name", type(s.engine).__name__) for s in scorers)
        )
        for chunk, records in driver.stream(
            self._note_ids(rows, driver, RowReader(mapping), on_notice),
            chunk_size=chunk_size,
            done=self.done,
            on_skip=skipped,
        ):
            self.add_chunk(len(chunk), records, on_error=on_error)
            report(progress)
            yield records
        report(progress)

    def _note_ids(
        self,
        rows: Iterable[Row],
        driver: Driver,
        reader: RowReader,
        on_notice: Callable[[str], None] | None,
    ) -> Iterator[Row]:
        """`rows`, each id noted on the way (every row, also those a previous run scored)."""
        tell = on_notice or (lambda _: None)
        for row in rows:
            notice = self.repeats.note(reader.id(row)[0], row, self.files)
            if notice is not None:
                tell(notice)
            yield row

    def done(self, file: int, row: int, scorer: str) -> bool:
        """True when (file, row, scorer) has a successful record in the folder (resume)."""
        return self.aggregator.done(file, row, scorer)

    def add_chunk(
        self,
        rows: int,
        records: list[Record],
        *,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        """Append one scored chunk's records durably, then count them (aggregates, progress).

        `stream` calls it for every chunk; a driver that scores chunks elsewhere (Ray actors
        running `Driver.score_chunk`) calls it with each chunk's records as they come back.

        Args:
            rows: the rows the chunk held.
            records: their records (`Driver.score_chunk`).
            on_error: called with each failed record's error message.
        """
        self.folder.append(records)
        progress = self.progress
        progress.rows_run += rows
        progress.rows_done += rows
        for r in records:
            self.aggregator.add(r)
            if r["error"] is None:
                progress.scored += 1
            else:
                progress.failed += 1
                if on_error is not None:
                    on_error(r["error"])

    def finish(self, *, chunk_size: int | None = None, limit: int | None = None) -> Path:
        """Write `summary.json` (aggregates of every record in the folder, and this run)."""
        p = self.progress
        wall = p.elapsed
        summary = {
            "version": CONFIG_VERSION,
            "config_hash": self.config["hash"],
            "model": self.config.get("model"),
            "backend": self.config.get("backend"),
            "engine": self.engine_name,
            "options": self.config["options"],
            "map": self.config["map"],
            "data": self.files,
            "file_errors": {"count": len(self.file_errors), "messages": list(self.file_errors)},
            "duplicate_ids": self.repeats.summary(),
            **self.aggregator.summary(),
            "run": {
                "wall_s": round(wall, 3),
                "rows": p.rows_run,
                "resumed_rows": p.resumed,
                "rows_per_s": round(p.rows_run / wall, 3) if wall > 0 else None,
                "output_tokens_per_s": round(p.output_tokens / wall, 3) if wall > 0 else None,
                "chunk_size": chunk_size,
                "limit": limit,
            },
        }
        return self.folder.write_summary(summary)

    def run(
        self,
        engine: Engine,
        *,
        on_progress: Callable[[Progress], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> Outcome:
        """Score the settings' files on `engine`; write `summary.json` (the command line).

        Args:
            engine: the judge (one per process; its reply cache spans the whole run).
            on_progress: called after each engine wave and each chunk.
            on_error: called with each failed record's error message, as it happens.
            on_notice: called with what is not a row's error but must not go unsaid, as it
                happens: each file that cannot be read (or stops partway), and each id that
                repeats, named once (the first `IDS_NAMED`; all are counted in summary.json).
        """
        s = self.settings
        if s is None:
            raise ValueError("Sweep.run needs the settings it was opened with (open_sweep)")
        tell = on_notice or (lambda _: None)

        def file_error(message: str) -> None:
            self.file_errors.append(message)
            tell(message)

        rows = file_rows(s.data, limit=s.limit, on_file_error=file_error)
        for _ in self.stream(
            s.build_scorers(engine),
            rows,
            mapping=s.mapping,
            chunk_size=s.chunk_size,
            on_progress=on_progress,
            on_error=on_error,
            on_notice=on_notice,
        ):
            pass
        summary_path = self.finish(chunk_size=s.chunk_size, limit=s.limit)
        totals = [self.aggregator.counts(sid) for sid in self.ids]
        return Outcome(
            progress=self.progress,
            total_scored=sum(t[0] for t in totals),
            total_failed=sum(t[1] for t in totals),
            file_errors=self.file_errors,
            summary_path=summary_path,
            repeated_ids=self.repeats.count,
        )


def open_sweep(settings: RunSettings) -> Sweep:
    """Prepare `settings.out`: lock it, check or write its config, read what is done.

    Raises:
        ConfigError: the folder holds another configuration's results, or another run is
            writing to it.
        OSError: a data file or the folder cannot be read or written.
    """
    files = [inspect_file(p) for p in settings.data]
    config = settings.config(files)
    return Sweep(
        settings.out, config, rows_total=_total_rows(files, settings.limit), settings=settings
    )


def _total_rows(files: list[FileInfo], limit: int | None) -> int | None:
    counts = [f.rows for f in files]
    total = None if any(c is None for c in counts) else sum(c or 0 for c in counts)
    if limit is not None:
        return limit if total is None else min(limit, total)
    return total
