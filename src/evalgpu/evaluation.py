"""Scoring datasets from Python and from the command line: `evaluate` (streaming, resumable;
the command line turns its flags into scorers and an engine and calls it) and `run_evals` (the
batch API of docs/SEMANTICS.md §1.6), both on the one `Driver`.

    from evalgpu import evaluate
    run = evaluate("outputs.jsonl", [summarization, recall], map={"summary": "model_output"},
                   out="runs/x")
    for record in run:              # records as their chunk finishes, in row order
        ...
    frame = run.to_pandas()         # with pandas installed
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from evalgpu.data import RowError, file_format
from evalgpu.driver import Driver
from evalgpu.results import Record, ScoreResult
from evalgpu.rows import Row, RowReader
from evalgpu.scorers._scorer import Scorer
from evalgpu.storage import check_out, latest_records
from evalgpu.sweep import Executor, Progress, Sweep

__all__ = ["Evaluation", "check_run", "evaluate", "run_evals"]

_NOT_AN_ITEM = RowError("an item is a dict with an 'input' key")

DataSource = str | Path | Sequence[str | Path] | Iterable[dict[str, Any]]


def evaluate(
    data: DataSource,
    scorers: Sequence[Scorer],
    *,
    map: Mapping[str, str] | None = None,
    out: str | Path | None = None,
    target: Callable[[Any], Any] | None = None,
    chunk_size: int = 256,
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
            derived from the scorers (`Scorer.options`) and the judge as loaded (its engine's
            name and model folder: `evalgpu.storage.folder_config`), so `python -m evalgpu
            run` with the same model and options continues the folder, and the other way
            round. Data files are hashed, so a changed file is refused; rows given from
            Python cannot be, and are matched by position: resume with the same rows in the
            same order. None keeps everything in memory.
        target: makes a row's output from its input when the row has no output column.
        chunk_size: rows per engine batch (and per append to `results.jsonl`): a chunk
            closes where the source changes, at twice `chunk_size` regardless.
        limit: read at most this many rows in all (None: all); rows already scored count.
        executor: scores the chunks elsewhere (`evalgpu.sweep.Executor`: `run --ray` passes
            Ray actors); None: in this process.
        on_progress: called with the `Progress` after each engine wave and chunk.
        on_error: called with each failed record's error message, as it happens.
        on_notice: called with what is no row's error but must not go unsaid: each data file
            that cannot be read (or stops partway), each id that repeats an earlier row's.

    Returns:
        An `Evaluation`: iterate it for the records as they are scored, or call
        `to_pandas()` / `run()`. Nothing is scored before that.

    Raises:
        ValueError: no scorers, a bad `map`, `chunk_size`, `limit`, data file name or `out`
            (a file), before anything is scored.
    """
    if not scorers:
        raise ValueError("scorers must name at least one scorer")
    paths = check_run(data, map, out, chunk_size, limit)
    folder = Path(out) if out is not None else None

    def chunks(run: Evaluation) -> Generator[list[Record], None, None]:
        with Sweep(folder, scorers, mapping=map, paths=paths, limit=limit) as sweep:
            run.progress, run.file_errors, run.bad_lines = (
                sweep.progress,
                sweep.file_errors,
                sweep.bad_lines,
            )
            yield from sweep.run(
                () if paths is not None else cast(Iterable[Any], data),
                chunk_size=chunk_size,
                target=target,
                executor=executor,
                on_progress=on_progress,
                on_error=on_error,
                on_notice=on_notice,
            )
            summary = sweep.finish(chunk_size=chunk_size)
        run.summary = {k: summary[k] for k in ("scorers", "tokens", "cached_share")}
        run.finished = True

    return Evaluation(chunks, folder)


def check_run(
    data: DataSource,
    map: Mapping[str, str] | None,
    out: str | Path | None,
    chunk_size: int,
    limit: int | None,
) -> list[Path] | None:
    """Check a run's arguments before anything loads; returns the data files (None: rows).

    Raises:
        ValueError: a bad `map`, `chunk_size` or `limit`, a data file that is missing or of
            an unknown type, or an `out` that is a file (each message names it).
    """
    RowReader(map)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be >= 0, got {limit!r}")
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


class Evaluation:
    """The records of an `evaluate` call, produced as they are iterated (one pass).

    Each record is a dict, the same as a line of `results.jsonl`: `file`, `row`, `id`,
    `scorer`, `score`, `reason`, `axes`, `preprocessStepResult`, `analyzeStepResult`, `usage`,
    `error`, `errorKind`, `version`. Rows already done in `out` are not scored again and not
    yielded. Stopping early, `close()` it (or use it in a `with` block) to release `out`'s lock.
    """

    def __init__(
        self, chunks: Callable[[Evaluation], Generator[list[Record], None, None]], out: Path | None
    ) -> None:
        self._chunks, self._out = chunks, out
        self._records: list[Record] = []
        self._iter: Generator[Record, None, None] | None = None
        self.finished = False
        """True once every row has been scored (and `summary.json` written, with `out`)."""
        self.summary: dict[str, Any] | None = None
        """The aggregates (`summary.json`'s `scorers` and `tokens`), once finished."""
        self.file_errors: list[str] = []
        """Data files that could not be read (or stopped partway), one message each."""
        self.progress: Progress | None = None
        """Where the run stands (rows done, resumed, scored, failed), once it started."""
        self.bad_lines = 0
        """Lines of `out`'s results.jsonl that did not parse (skipped), once it started."""

    def __iter__(self) -> Iterator[Record]:
        if self._iter is None:
            self._iter = self._each()
        return self._iter

    def _each(self) -> Generator[Record, None, None]:
        with contextlib.closing(self._chunks(self)) as chunks:
            for chunk in chunks:
                if self._out is None:
                    self._records.extend(chunk)
                yield from chunk

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

    @property
    def records(self) -> list[Record]:
        """Records produced so far (kept only without `out`: with it, they are on disk)."""
        return list(self._records)

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
        found = self._records if self._out is None else latest_records(self._out)
        return pd.DataFrame.from_records(found)


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
            if isinstance(item, dict) and "input" in item:
                yield Row(0, number, item)
            else:
                yield Row(0, number, _NOT_AN_ITEM)

    driver = Driver(scorers, target=target, noun="item")
    entries: list[dict[str, Any]] = []
    for chunk, records in driver.stream(rows()):
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
        got = [e["scorer_results"][scorer.id].score for e in entries]
        ok = [s for s in got if s is not None]
        scores[scorer.id] = sum(ok) / len(ok) if ok else None
    failed = sum(any(r.error for r in e["scorer_results"].values()) for e in entries)
    return {
        "scores": scores,
        "summary": {"total_items": len(entries), "failed_items": failed},
        "items": entries,
    }
