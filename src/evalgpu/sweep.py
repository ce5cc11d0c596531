"""The chunked run behind `python -m evalgpu run`: stream rows, score them, append, resume.

A sweep reads its data files one row at a time, gathers a chunk of rows that still need
scoring, turns each (row, scorer) into the scorer's steps, and hands the whole chunk to one
`Runner` (so every ready judge call of the chunk goes to the engine in one batch). The
chunk's records are then appended to `results.jsonl`, flushed and fsync'ed, before the next
chunk is read. Memory therefore depends on the chunk size, not on the file size.

The output folder holds `config.json` (what was asked, and its hash), `results.jsonl` (one
record per (row, scorer) outcome, appended) and `summary.json` (written at the end). Running
again with the same folder and configuration reads `results.jsonl` first and scores only what
has no successful record: successes are never scored twice, failures are retried. After a
`kill -9`, at most the chunk in flight is lost; a torn last line is cut off before appending.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu.data import (
    FileInfo,
    RowError,
    file_format,
    inspect_file,
    read_rows,
    replace_surrogates,
)
from evalgpu.engines.base import Engine
from evalgpu.report import Aggregator, scan_results
from evalgpu.results import RESULT_VERSION, ErrorKind, InputError, ScoreResult, Steps
from evalgpu.rows import FIELDS, RepeatedIds, RowSteps, row_id
from evalgpu.runner import Runner, WaveStats
from evalgpu.scorers import create_context_recall_scorer, create_summarization_scorer
from evalgpu.scorers._scorer import Scorer
from evalgpu.verdicts import VerdictMode

__all__ = ["SCORERS", "ConfigError", "Outcome", "Progress", "RunSettings", "Sweep", "open_sweep"]

SCORERS = {"summarization": "summarization-scorer", "context-recall": "context-recall-scorer"}
"""Scorer names on the command line -> scorer ids in records."""

CONFIG_VERSION = 1

IDS_NAMED = 20
"""Repeated ids named through `on_notice`; the rest are counted in summary.json only."""


class ConfigError(ValueError):
    """The output folder cannot take this run (another configuration, or another run in it)."""


@dataclass(frozen=True)
class RunSettings:
    """Everything a sweep needs, validated at construction (CLI flags or Python).

    Args:
        data: dataset files (.jsonl, .json, .csv, .parquet), scored in order.
        scorers: "summarization" and/or "context-recall".
        out: the output folder (created; an existing one is resumed).
        model: a model folder or preset name; None for the default model.
        backend: "auto", "vllm", "transformers", or "module:factory".
        max_questions: summarization's most coverage questions per source (>= 1).
        scale: both scorers' scale (> 0).
        verdicts: both scorers' "hard" (the reference) or "soft" verdicts.
        mapping: field -> column, for files whose columns have other names.
        chunk_size: rows scored per engine batch and per append (>= 1).
        limit: read at most this many rows in all (None: all). Rows already scored count.
    """

    data: tuple[Path, ...]
    scorers: tuple[str, ...]
    out: Path
    model: str | None = None
    backend: str = "auto"
    max_questions: int = 10
    scale: float = 1.0
    verdicts: VerdictMode = "hard"
    mapping: Mapping[str, str] = field(default_factory=dict)
    chunk_size: int = 256
    limit: int | None = None

    def __post_init__(self) -> None:
        # Normalise first, then validate (vLLM's SamplingParams order).
        object.__setattr__(self, "data", tuple(Path(p) for p in self.data))
        object.__setattr__(self, "scorers", tuple(dict.fromkeys(self.scorers)))
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "mapping", dict(self.mapping))
        if not self.data:
            raise ValueError("data must name at least one file")
        for path in self.data:
            file_format(path)
            if not path.is_file():
                raise ValueError(f"data file not found: {path}")
        _check_out(self.out)
        if not self.scorers:
            raise ValueError("scorers must name at least one scorer")
        for name in self.scorers:
            if name not in SCORERS:
                raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {name!r}")
        for key, column in self.mapping.items():
            if key not in FIELDS:
                raise ValueError(f"map: unknown field {key!r}; the fields are {', '.join(FIELDS)}")
            if not column:
                raise ValueError(f"map: {key}= needs a column name")
        if (
            isinstance(self.max_questions, bool)
            or not isinstance(self.max_questions, int)
            or self.max_questions < 1
        ):
            raise ValueError(f"max_questions must be >= 1, got {self.max_questions!r}")
        if not (
            isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0
        ):
            raise ValueError(f"scale must be > 0, got {self.scale!r}")
        if self.verdicts not in ("hard", "soft"):
            raise ValueError(f"verdicts must be 'hard' or 'soft', got {self.verdicts!r}")
        if not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 0):
            raise ValueError(f"limit must be >= 0, got {self.limit!r}")

    def config(self, files: list[FileInfo]) -> dict[str, Any]:
        """What a resumed run must match, with its hash (file paths are not in the hash)."""
        config: dict[str, Any] = {
            "version": CONFIG_VERSION,
            "result_version": RESULT_VERSION,
            "scorers": list(self.scorers),
            "scorer_ids": [SCORERS[s] for s in self.scorers],
            "model": self.model,
            "backend": self.backend,
            "options": {
                "max_questions": self.max_questions if "summarization" in self.scorers else None,
                "scale": float(self.scale),
                # Only when not the default, so that folders of earlier runs keep their hash.
                **({"verdicts": self.verdicts} if self.verdicts != "hard" else {}),
            },
            "map": dict(sorted(self.mapping.items())),
            "data": [
                {"path": str(p), "sha256": f.sha256, "size": f.size}
                for p, f in zip(self.data, files, strict=True)
            ],
        }
        config["hash"] = _config_hash(config)
        return config


def _check_out(out: Path) -> None:
    """Refuse an output folder that is a file, or lies under one, before anything is written."""
    for path in (out, *out.parents):
        if path.exists():
            if not path.is_dir():
                where = "is a file" if path == out else f"lies under {path}, a file"
                raise ValueError(f"out: {out} {where}, not a folder; name a folder for the results")
            return


def _config_hash(config: dict[str, Any]) -> str:
    keyed = {k: v for k, v in config.items() if k != "hash"}
    keyed["data"] = [{k: v for k, v in d.items() if k != "path"} for d in config["data"]]
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    found = []
    for key in ("scorers", "model", "backend", "options", "map", "result_version"):
        if old.get(key) != new.get(key):
            found.append(f"{key}: {json.dumps(old.get(key))} -> {json.dumps(new.get(key))}")
    old_data, new_data = old.get("data", []), new["data"]
    if len(old_data) != len(new_data):
        found.append(f"data: {len(old_data)} files -> {len(new_data)}")
    else:
        for i, (a, b) in enumerate(zip(old_data, new_data, strict=True), 1):
            if (a.get("sha256"), a.get("size")) != (b["sha256"], b["size"]):
                found.append(f"data file {i} ({b['path']}) has other content")
    return found or ["a different configuration hash"]


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
    """A prepared output folder (locked, resumed); `run(engine)` scores what is missing.

    Use `open_sweep(settings)` and close it (it is a context manager).
    """

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        out = settings.out
        out.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(out)
        try:
            self.config = self._check_config([inspect_file(p) for p in settings.data])
            self.files = [d["path"] for d in self.config["data"]]
            self.ids = self.config["scorer_ids"]
            self.aggregator = Aggregator(self.ids, self.files, float(settings.scale))
            self.results_path = out / "results.jsonl"
            end, self.bad_lines = scan_results(self.results_path, self.aggregator.add)
            if self.results_path.exists() and self.results_path.stat().st_size > end:
                os.truncate(self.results_path, end)  # a torn last line, from a crash
        except BaseException:
            self.close()
            raise

    def _check_config(self, files: list[FileInfo]) -> dict[str, Any]:
        out = self.settings.out
        new = self.settings.config(files)
        self.rows_total = _total_rows(files, self.settings.limit)
        path = out / "config.json"
        if path.exists():
            old: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            if old.get("hash") != new["hash"]:
                raise ConfigError(
                    f"--out {out} holds results of another configuration "
                    f"({'; '.join(_differences(old, new))}); use a new --out folder, "
                    f"or delete {out} to start over"
                )
            return old  # its paths name the files in the records already written
        if (out / "results.jsonl").exists():
            raise ConfigError(
                f"--out {out} has a results.jsonl but no config.json; use a new --out folder"
            )
        _write_atomic(path, json.dumps(new, indent=2, ensure_ascii=False) + "\n")
        return new

    def close(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(
        self,
        engine: Engine,
        *,
        on_progress: Callable[[Progress], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> Outcome:
        """Score every (row, scorer) without a successful record; write `summary.json`.

        Args:
            engine: the judge (one per process; its reply cache spans the whole run).
            on_progress: called after each engine wave and each chunk.
            on_error: called with each failed record's error message, as it happens.
            on_notice: called with what is not a row's error but must not go unsaid, as it
                happens: each file that cannot be read (or stops partway), and each id that
                repeats, named once (the first `IDS_NAMED`; all are counted in summary.json).
        """
        s = self.settings
        progress = Progress(rows_total=self.rows_total)
        report = on_progress or (lambda _: None)
        self._on_error = on_error or (lambda _: None)
        self._on_notice = on_notice or (lambda _: None)
        self._repeats = RepeatedIds()
        self._progress = progress
        self._scorers = self._build_scorers(engine)
        self._row_steps = RowSteps(dict(s.mapping), engine)
        self._runner = Runner(engine, on_wave=lambda w: self._wave(w, report))
        self.file_errors: list[str] = []
        with open(self.results_path, "a", encoding="utf-8") as self._out:
            chunk: list[tuple[int, int, dict[str, Any] | RowError]] = []
            for item in self._rows():
                file, row, _ = item
                if all(self.aggregator.done(file, row, sid) for sid in self.ids):
                    progress.rows_done += 1
                    progress.resumed += 1
                    if progress.resumed % 1000 == 0:
                        report(progress)
                    continue
                chunk.append(item)
                if len(chunk) >= s.chunk_size:
                    self._score(chunk)
                    chunk = []
                    report(progress)
            if chunk:
                self._score(chunk)
            report(progress)
        totals = [self.aggregator.counts(sid) for sid in self.ids]
        summary_path = s.out / "summary.json"
        summary = json.dumps(self._summary(engine), indent=2, ensure_ascii=False)
        _write_atomic(summary_path, replace_surrogates(summary) + "\n")
        return Outcome(
            progress=progress,
            total_scored=sum(t[0] for t in totals),
            total_failed=sum(t[1] for t in totals),
            file_errors=self.file_errors,
            summary_path=summary_path,
            repeated_ids=self._repeats.count,
        )

    def _build_scorers(self, engine: Engine) -> dict[str, Scorer]:
        s = self.settings
        scorers: dict[str, Scorer] = {}
        if "summarization" in s.scorers:
            scorers["summarization"] = create_summarization_scorer(
                engine, max_questions=s.max_questions, scale=s.scale, verdicts=s.verdicts
            )
        if "context-recall" in s.scorers:
            # Every row brings its own context (passed per run below), so the static context
            # the factory requires is never used.
            scorers["context-recall"] = create_context_recall_scorer(
                engine,
                context=["(each row brings its own context)"],
                scale=s.scale,
                verdicts=s.verdicts,
            )
        return scorers

    def _wave(self, wave: WaveStats, report: Callable[[Progress], None]) -> None:
        self._progress.output_tokens += wave.output_tokens
        report(self._progress)

    def _rows(self) -> Iterator[tuple[int, int, dict[str, Any] | RowError]]:
        """(file index, row, record) over all files, up to `limit` rows.

        A file that cannot be read, or stops partway, is a file error (named as it happens,
        counted in summary.json), whatever the reader raised; the run goes on with the next.
        """
        limit = self.settings.limit
        column = self.settings.mapping.get("id", "id")
        n = 0
        for index, path in enumerate(self.settings.data):
            try:
                for row, record in read_rows(path):
                    if limit is not None and n >= limit:
                        return
                    n += 1
                    self._note_id(index, row, row_id(record, column)[0])
                    yield index, row, record
            except Exception as exc:
                # OSError and ValueError say what is wrong; anything else is named by its type.
                text = str(exc)
                if not isinstance(exc, (OSError, ValueError)):
                    text = f"cannot be read ({type(exc).__name__}: {text})"
                text = replace_surrogates(text)
                message = text if str(path) in text else f"{path}: {text}"
                self.file_errors.append(message)
                self._on_notice(message)

    def _note_id(self, file: int, row: int, ident: str | None) -> None:
        if not self._repeats.check(ident, self.files[file], row):
            return
        named = len(self._repeats.repeated)
        if named <= IDS_NAMED:
            self._on_notice(
                f"{self._label(file, row, None)}: id {json.dumps(ident, ensure_ascii=False)} "
                "repeats an earlier row's id (both are scored)"
            )
        elif named == IDS_NAMED + 1:
            self._on_notice("further repeated ids are only counted in summary.json")

    def _label(self, file: int, row: int, ident: str | None) -> str:
        label = f"row {row}"
        if len(self.files) > 1:
            label = f"{self.files[file]} {label}"
        if ident is not None:
            label += f" (id {json.dumps(ident, ensure_ascii=False)})"
        return label

    def _score(self, chunk: list[tuple[int, int, dict[str, Any] | RowError]]) -> None:
        """Score one chunk with one `Runner.run`, then append its records durably."""
        records: list[dict[str, Any]] = []
        slots: list[int] = []
        jobs: list[tuple[str, Steps]] = []
        labels: list[str | None] = []
        for file, row, record in chunk:
            ident, row_problem = row_id(record, self.settings.mapping.get("id", "id"))
            label = self._label(file, row, ident)
            for name, scorer in self._scorers.items():
                if self.aggregator.done(file, row, scorer.id):
                    continue
                base = {"row": row, "id": ident, "file": self.files[file], "scorer": scorer.id}
                problem = row_problem
                kind: ErrorKind = "input"
                if problem is None:
                    assert isinstance(record, dict)
                    try:
                        steps = self._row_steps.steps(name, scorer, record)
                    except InputError as exc:
                        problem, kind = str(exc), exc.kind
                    except Exception as exc:  # hostile values (nesting too deep, ...): one row's
                        problem = f"{type(exc).__name__}: {exc}"
                if problem is not None:
                    error = ScoreResult(
                        scorer=scorer.id, error=f"{label}: {problem}", error_kind=kind
                    )
                    records.append(_record(base, error))
                    continue
                slots.append(len(records))
                records.append(base)
                jobs.append((scorer.id, steps))
                labels.append(label)
        for slot, result in zip(slots, self._runner.run(jobs, labels), strict=True):
            records[slot] = _record(records[slot], result)
        self._out.write("".join(_json_line(r) for r in records))
        self._out.flush()
        os.fsync(self._out.fileno())
        self._progress.rows_run += len(chunk)
        self._progress.rows_done += len(chunk)
        for r in records:
            self.aggregator.add(r)
            if r["error"] is None:
                self._progress.scored += 1
            else:
                self._progress.failed += 1
                self._on_error(r["error"])

    def _summary(self, engine: Engine) -> dict[str, Any]:
        p = self._progress
        wall = p.elapsed
        return {
            "version": CONFIG_VERSION,
            "config_hash": self.config["hash"],
            "model": self.settings.model,
            "backend": self.settings.backend,
            "engine": getattr(engine, "name", type(engine).__name__),
            "options": self.config["options"],
            "map": self.config["map"],
            "data": self.files,
            "file_errors": {"count": len(self.file_errors), "messages": list(self.file_errors)},
            "duplicate_ids": self._repeats.summary(),
            **self.aggregator.summary(),
            "run": {
                "wall_s": round(wall, 3),
                "rows": p.rows_run,
                "resumed_rows": p.resumed,
                "rows_per_s": round(p.rows_run / wall, 3) if wall > 0 else None,
                "output_tokens_per_s": round(p.output_tokens / wall, 3) if wall > 0 else None,
                "chunk_size": self.settings.chunk_size,
                "limit": self.settings.limit,
            },
        }


def open_sweep(settings: RunSettings) -> Sweep:
    """Prepare `settings.out`: lock it, check or write its config, read what is done.

    Raises:
        ConfigError: the folder holds another configuration's results, or another run is
            writing to it.
        OSError: a data file or the folder cannot be read or written.
    """
    return Sweep(settings)


def _record(base: dict[str, Any], result: ScoreResult) -> dict[str, Any]:
    """One `results.jsonl` record: where it comes from, then the result with reference names."""
    return {
        **base,
        "score": result.score,
        "reason": result.reason,
        "axes": result.axes,
        "preprocessStepResult": result.preprocess_step_result,
        "analyzeStepResult": result.analyze_step_result,
        "usage": result.usage.model_dump(),
        "error": result.error,
        "errorKind": result.error_kind,
        "version": result.version,
    }


def _json_line(record: dict[str, Any]) -> str:
    """The record as one line of JSON; lone surrogates (in a judge's text, an exception's
    message) become U+FFFD, in the line and in `record` (so that what is echoed is writable)."""
    line = json.dumps(record, ensure_ascii=False)
    clean = replace_surrogates(line)
    if clean != line:
        record.clear()
        record.update(json.loads(clean))
    return clean + "\n"


def _total_rows(files: list[FileInfo], limit: int | None) -> int | None:
    counts = [f.rows for f in files]
    total = None if any(c is None for c in counts) else sum(c or 0 for c in counts)
    if limit is not None:
        return limit if total is None else min(limit, total)
    return total


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _lock(out: Path) -> int | None:
    """Hold an exclusive lock on the folder: two runs appending to one file would duplicate."""
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ConfigError(
            f"another evalgpu run is writing to {out}; wait for it or use a new --out"
        ) from None
    return fd
