"""A sweep: scorers run into an output folder, resumably; the one way records reach a folder.

A sweep derives the folder's configuration from what scores (`folder_config`: the scorers'
own options and the judge as loaded), opens the folder (`evalgpu.storage.OutputFolder`: lock,
configuration, what is already done, appends, aggregates, `summary.json`), streams rows through
a `Driver` a chunk at a time, appends each chunk's records durably before the next chunk is
read, and keeps the progress. Memory depends on the chunk size, not on the number of rows.
Running again with the same folder and configuration scores only what has no successful
record; after a `kill -9`, at most the chunk in flight is lost.

`evalgpu.evaluate` drives it (the command line calls `evaluate`); `run --ray` takes its chunks
(`chunks`) to replicas and hands back their records (`add_chunk`).
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
from evalgpu.results import RESULT_VERSION, Record
from evalgpu.rows import RepeatedIds, Row
from evalgpu.runner import WaveStats
from evalgpu.scorers._scorer import Scorer
from evalgpu.storage import CONFIG_VERSION, OutputFolder, config_hash

__all__ = ["Progress", "Sweep", "folder_config", "judge_model"]


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

    Use it as a context manager (it holds the folder's lock). `stream` scores rows into it (or
    `add_chunk` takes chunks scored elsewhere, skipping what `folder.done` says), and `finish`
    writes `summary.json`.

    Args:
        out: the output folder (created; an existing one is resumed).
        scorers: the scorers, in the order of their records for a row; the folder's
            configuration is derived from them (`folder_config`).
        mapping: field -> column.
        paths: the data files (hashed into the configuration), or None for rows from Python.
        limit: rows read in all, when limited (progress: the number of rows to expect).

    Raises:
        ConfigError: the folder holds another configuration's results, or another run is
            writing to it.
        OSError: a data file or the folder cannot be read or written.
    """

    def __init__(
        self,
        out: Path,
        scorers: Sequence[Scorer],
        *,
        mapping: Mapping[str, str] | None = None,
        paths: Sequence[Path] | None = None,
        limit: int | None = None,
    ) -> None:
        self.scorers = list(scorers)
        self.mapping = dict(mapping or {})
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

    def close(self) -> None:
        """Release the folder (safe to call twice)."""
        self.folder.close()

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stream(
        self,
        rows: Iterable[Row],
        *,
        chunk_size: int = 256,
        target: Callable[[Any], Any] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> Iterator[list[Record]]:
        """Score what is not done yet; yield each chunk's records once they are on disk.

        Args:
            rows: the rows, streamed (`file_rows`, `python_rows`).
            chunk_size: rows per `Runner.run` and per append (`Driver.chunks`).
            target: makes a row's output when it has none (see `Driver`).
            on_progress: called after each engine wave and each chunk.
            on_error: called with each failed record's error message, as it happens.
            on_notice: called with each id that repeats an earlier row's
                (`RepeatedIds.note`; all are counted in summary.json).
        """
        progress = self.progress
        report = on_progress or (lambda _: None)

        def wave(stats: WaveStats) -> None:
            progress.output_tokens += stats.output_tokens
            report(progress)

        driver = self.driver(target=target, on_wave=wave)
        for chunk in self.chunks(
            driver, rows, chunk_size=chunk_size, on_progress=on_progress, on_notice=on_notice
        ):
            records = driver.score_chunk(chunk, self.folder.done)
            self.add_chunk(len(chunk), records, on_error=on_error)
            report(progress)
            yield records
        report(progress)

    def driver(
        self,
        target: Callable[[Any], Any] | None = None,
        on_wave: Callable[[WaveStats], None] | None = None,
    ) -> Driver:
        """A `Driver` of this folder's scorers, mapping and file names."""
        return Driver(
            self.scorers, mapping=self.mapping, files=self.files, target=target, on_wave=on_wave
        )

    def chunks(
        self,
        driver: Driver,
        rows: Iterable[Row],
        *,
        chunk_size: int = 256,
        on_progress: Callable[[Progress], None] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> Iterator[list[Row]]:
        """What the folder still lacks of `rows`, in chunks (`Driver.chunks`).

        Every row's id is noted on the way, those a previous run scored too (`on_notice`
        is told of each repeat: `RepeatedIds.note`); rows a previous run scored are counted
        as resumed. `stream` scores the chunks here; `run --ray` sends them to its replicas.
        """
        progress = self.progress
        report = on_progress or (lambda _: None)
        tell = on_notice or (lambda _: None)

        def skipped(_: Row) -> None:
            progress.rows_done += 1
            progress.resumed += 1
            if progress.resumed % 1000 == 0:
                report(progress)

        def noted(rows: Iterable[Row]) -> Iterator[Row]:
            for row in rows:
                notice = self.repeats.note(driver.reader.id(row)[0], row, self.files)
                if notice is not None:
                    tell(notice)
                yield row

        return driver.chunks(
            noted(rows), chunk_size=chunk_size, done=self.folder.done, on_skip=skipped
        )

    def add_chunk(
        self,
        rows: int,
        records: list[Record],
        *,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        """Append one scored chunk's records durably, then count them in the progress.

        `stream` calls it for every chunk; a driver that scores chunks elsewhere (Ray actors
        running `Driver.score_chunk`) calls it with each chunk's records as they come back.

        Args:
            rows: the rows the chunk held.
            records: their records (`Driver.score_chunk`); those the folder already has a
                success for are dropped (`OutputFolder.append`).
            on_error: called with each failed record's error message.
        """
        written = self.folder.append(records)
        progress = self.progress
        progress.rows_run += rows
        progress.rows_done += rows
        for r in written:
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
                "limit": limit,
            },
        )


def judge_model(engine: Engine) -> str | None:
    """How a configuration names an engine's model: by its folder's name, else as given.

    A folder is the same judge wherever it lies, and a preset's folder carries the preset's
    name, so `load_engine("smollm2-135m-instruct")` and `--model smollm2-135m-instruct` name
    it alike. None: an engine without a model path (the scripted one, your own).
    """
    path = getattr(engine, "model_path", None)
    if path is None:
        return None
    return Path(path).resolve().name if Path(path).is_dir() else str(path)


def folder_config(
    scorers: Sequence[Scorer],
    mapping: Mapping[str, str],
    paths: Sequence[Path] | None,
    infos: Sequence[FileInfo] | None = None,
) -> dict[str, Any]:
    """An output folder's configuration, with its hash: derived from what scores.

    The judge is named as it was loaded, not as it was asked for: the engine's `name` (the
    backend that "auto" resolved to) and its model (`judge_model`); engine options that do not
    change scores (threads, batch size, compute) are not in it. Each scorer brings its own
    options (`Scorer.options`). So a folder that Python started and one that the command line
    started with the same judge and options are one configuration.

    Args:
        scorers: the scorers, in order.
        mapping: field -> column.
        paths: the data files, or None for rows from Python: those cannot be hashed before
            they are read, so a resume matches them by position (the same rows, in order).
        infos: the files' `inspect_file`, when already read.
    """
    if paths is None:
        data: list[dict[str, Any]] = [{"path": None, "sha256": None, "size": None}]
    else:
        infos = infos if infos is not None else [inspect_file(p) for p in paths]
        data = [
            {"path": str(p), "sha256": f.sha256, "size": f.size}
            for p, f in zip(paths, infos, strict=True)
        ]
    engines = list({id(s.engine): s.engine for s in scorers}.values())
    config: dict[str, Any] = {
        "version": CONFIG_VERSION,
        "result_version": RESULT_VERSION,
        "scorer_ids": [s.id for s in scorers],
        "model": _one(judge_model(e) for e in engines),
        "backend": _one(str(e.name) for e in engines),
        "options": {s.id: dict(s.options) for s in scorers},
        "map": dict(sorted(mapping.items())),
        "data": data,
    }
    config["hash"] = config_hash(config)
    return config


def _one(values: Iterable[Any]) -> Any:
    """The value when all are equal (one engine), else the list of them."""
    found = list(dict.fromkeys(values))
    return found[0] if len(found) == 1 else found


def _total_rows(infos: Sequence[FileInfo] | None, limit: int | None) -> int | None:
    counts = [f.rows for f in infos] if infos is not None else [None]
    total = None if any(c is None for c in counts) else sum(c or 0 for c in counts)
    if limit is not None:
        return limit if total is None else min(limit, total)
    return total
