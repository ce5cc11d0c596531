"""An output folder on disk: its configuration, its lock, its records, and what they say is done.

An output folder holds `config.json` (what was asked, and its hash), `results.jsonl` (one record
per (row, scorer) outcome, appended), `summary.json` (written at the end) and `.lock`. The rules,
the same for the command line and Python:

- a folder is written by one run at a time (`.lock`, an exclusive `flock`);
- a folder takes only runs of its own configuration (`config.json`'s hash): another one is a
  `ConfigError` that says what differs;
- records are appended a chunk at a time, flushed and fsync'ed (`append_records`), so that a
  `kill -9` loses at most the chunk in flight; a torn last line is cut off when the folder is
  opened again, before anything is appended;
- a (file, row, scorer) is done when it has a successful record (`OutputFolder.done`, over
  an `evalgpu.ledger.Ledger`); the folder alone says so: `pending` hands on only the rows with
  a scorer still to score, each naming its scorers (`Row.todo`), so a resumed run scores only
  what is not done, and `append` never writes a success twice: successes are never scored
  twice and failures are retried;
- `summary.json` (the configuration, the aggregates of every record in the folder, the last
  run's figures) and other whole files are replaced atomically (`write_atomic`).

`OutputFolder` is the one writer (a run holds it open); `read_folder` reads a folder for the
report, without its lock.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalgpu._options import SCALE
from evalgpu.aggregate import Aggregator
from evalgpu.data import FileInfo, replace_surrogates
from evalgpu.engines import AUTO, SCRIPTED
from evalgpu.ledger import Ledger
from evalgpu.results import RESULT_VERSION, Record

if TYPE_CHECKING:
    from evalgpu.engines.base import Engine
    from evalgpu.rows import Row
    from evalgpu.scorers._scorer import Scorer

__all__ = [
    "CONFIG_VERSION",
    "ConfigError",
    "OutputFolder",
    "Record",
    "append_records",
    "check_out",
    "config_hash",
    "config_scale",
    "differences",
    "folder_config",
    "judge_model",
    "latest_records",
    "read_folder",
    "scan_results",
    "upgrade_config",
    "write_atomic",
]

CONFIG_VERSION = 2
"""2: the judge as loaded (engine name, model folder) and each scorer's own options."""


class ConfigError(ValueError):
    """The output folder cannot take this run (another configuration, or another run in it)."""


def config_hash(config: dict[str, Any]) -> str:
    """The hash a resumed run must match: everything but the hash and the data files' paths."""
    keyed = {k: v for k, v in config.items() if k != "hash"}
    keyed["data"] = [{k: v for k, v in d.items() if k != "path"} for d in config["data"]]
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


def config_scale(config: dict[str, Any]) -> float:
    """The scores' range for histograms: the largest of the scorers' scales."""
    options = config["options"]
    if config.get("version", 1) < 2:  # one shared scale, or one per scorer
        scale = options["scale"]
        return max(scale.values()) if isinstance(scale, dict) else float(scale)
    return max((float(o.get("scale", SCALE)) for o in options.values()), default=SCALE)


def upgrade_config(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A version-1 `config.json` in this version's shape, read as it was meant.

    Version 1 named the judge as it was asked for: backend "auto" (resolved by the machine
    that ran it) and model None (the default model) mean the judge that `new` resolved them
    to. Its options were shared (`max_questions` for the scorers that take it, `scale` one
    number or one per scorer, `verdicts` only when not "hard"), with per-scorer extras in
    `options["scorers"]`.

    Args:
        old: the version-1 configuration.
        new: this run's configuration (what "auto" and None resolved to, which scorers take
            `max_questions` and record `verdicts`).
    """
    from evalgpu.models import DEFAULT_MODEL

    shared = dict(old.get("options") or {})
    extras = shared.pop("scorers", {}) or {}
    scale = shared.pop("scale", SCALE)
    questions = shared.pop("max_questions", None)
    options: dict[str, Any] = {}
    for sid in old.get("scorer_ids", []):
        takes = new["options"].get(sid, {})
        mine: dict[str, Any] = {}
        if questions is not None and (sid not in new["options"] or "max_questions" in takes):
            mine["max_questions"] = questions
        mine["scale"] = float(scale[sid] if isinstance(scale, dict) else scale)
        mine.update(shared)  # verdicts, when not "hard"
        if "verdicts" in takes and "verdicts" not in mine:
            mine["verdicts"] = "hard"  # version 1 wrote "hard" by leaving it out
        mine.update(extras.get(sid, {}))
        options[sid] = mine
    model, backend = old.get("model"), old.get("backend")
    if (model is None and new.get("model") in (None, DEFAULT_MODEL)) or backend == SCRIPTED:
        model = new.get("model")  # the default model; the scripted judge loads none
    upgraded = {
        "version": CONFIG_VERSION,
        "result_version": old.get("result_version"),
        "scorer_ids": list(old.get("scorer_ids", [])),
        "model": model,
        "backend": new.get("backend") if backend == AUTO else backend,
        "options": options,
        "map": old.get("map", {}),
        "data": old.get("data", []),
    }
    upgraded["hash"] = config_hash(upgraded)
    return upgraded


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two configurations, one phrase each."""
    found = []
    for key in ("scorer_ids", "model", "backend", "options", "map", "result_version"):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if (
            key == "options"
            and isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
        ):
            for sid in a:  # the scorers' own options: name the one that changed
                for name in sorted(set(a[sid]) | set(b[sid])):
                    was, now = a[sid].get(name), b[sid].get(name)
                    if was != now:
                        found.append(
                            f"options: {sid} {name}: {json.dumps(was)} -> {json.dumps(now)}"
                        )
            continue
        if key == "result_version":
            found.append(f"results of judge pipeline version {a}, this one scores version {b}")
            continue
        found.append(f"{key}: {json.dumps(a)} -> {json.dumps(b)}")
    old_data, new_data = old.get("data", []), new["data"]
    if len(old_data) != len(new_data):
        found.append(f"data: {len(old_data)} files -> {len(new_data)}")
    else:
        for i, (a, b) in enumerate(zip(old_data, new_data, strict=True), 1):
            if (a.get("sha256"), a.get("size")) != (b.get("sha256"), b.get("size")):
                found.append(f"data file {i} ({b['path']}) has other content")
    return found or ["a different configuration hash"]


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
        infos: the files' `inspect_file` (their hashes: a resume refuses a changed file); None
            for a run kept in memory, which resumes nothing and so need not read them twice.
    """
    if paths is None:
        data: list[dict[str, Any]] = [{"path": None, "sha256": None, "size": None}]
    else:
        hashed = infos if infos is not None else [None] * len(paths)
        data = [
            {"path": str(p), "sha256": f.sha256 if f else None, "size": f.size if f else None}
            for p, f in zip(paths, hashed, strict=True)
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


def check_out(out: Path) -> None:
    """Refuse an output folder that is a file, or lies under one, before anything is written.

    Raises:
        ValueError: `out` is a file or lies under one (the message names it).
    """
    for path in (out, *out.parents):
        if path.exists():
            if not path.is_dir():
                where = "is a file" if path == out else f"lies under {path}, a file"
                raise ValueError(f"out: {out} {where}, not a folder; name a folder for the results")
            return


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a reader sees the old file or the new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append_records(f: Any, records: Iterable[Record]) -> None:
    """Append `records` to the open `results.jsonl` file `f`, flushed and fsync'ed.

    Lone surrogates (in a judge's text, an exception's message) become U+FFFD, in the line and
    in the record itself (so that what is echoed afterwards can be written too).
    """
    f.write("".join(_json_line(r) for r in records))
    f.flush()
    os.fsync(f.fileno())


def _json_line(record: Record) -> str:
    line = json.dumps(record, ensure_ascii=False)
    clean = replace_surrogates(line)
    if clean != line:
        record.clear()
        record.update(json.loads(clean))
    return clean + "\n"


def scan_results(path: Path, on_record: Callable[[Record], None]) -> tuple[int, int]:
    """Feed every complete record of `results.jsonl` to `on_record`.

    A last line without its newline (torn by a crash) is ignored, and so is a complete line
    that does not parse.

    Returns:
        The byte offset just past the last complete line, and the number of lines skipped
        because they did not parse.
    """
    end = 0
    bad = 0
    if not path.exists():
        return 0, 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break  # torn: the crash came before its newline
            end += len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(record, dict):
                on_record(record)
            else:
                bad += 1
    return end, bad


class OutputFolder:
    """An output folder opened for appending: locked, its configuration checked or written.

    Open it, then `resume` (read what is done, cut a torn last line), then read the rows
    through `pending` (what is still to score), `append` their chunks' records, then
    `write_summary`. Every record, read or appended,
    goes to the folder's `ledger` (what is done) and to its aggregates (`summary.json`).

    Args:
        out: the folder (created when missing); None: a run kept in memory, with the same
            ledger and aggregates and nothing written.
        config: this run's configuration, with its `hash` (see `config_hash`).

    Raises:
        ConfigError: the folder holds another configuration's results, or another run is
            writing to it.
        ValueError: `out` is a file, or lies under one.
        OSError: the folder cannot be read or written.
    """

    def __init__(self, out: Path | None, config: dict[str, Any]) -> None:
        self.path = out
        self.bad_lines = 0
        """Complete lines of `results.jsonl` that did not parse (skipped by `resume`)."""
        self._lock: int | None = None
        self._file: Any = None
        self._resumed = False
        if out is not None:
            check_out(out)
            out.mkdir(parents=True, exist_ok=True)
            self._lock = _lock(out)
            try:
                config = self._check_config(config)
            except BaseException:
                self.close()
                raise
        self.config = config
        """The folder's configuration: its data paths name the files in its records."""
        self.files: list[str] = [d["path"] for d in self.config["data"]]
        """The data files as the folder's records name them (its first run's paths)."""
        self.ledger = Ledger(self.files)
        """What is done: the latest outcome of every (file, row, scorer) in the folder."""
        self.aggregates = _aggregator(self.config)
        """The aggregates of every record in the folder (`summary.json`)."""

    def resume(self) -> int:
        """Read every record already in `results.jsonl`; cut a torn last line.

        Returns:
            The number of complete lines that did not parse (also in `bad_lines`).
        """
        self._resumed = True
        if self.path is None:
            return 0
        results = self.path / "results.jsonl"
        end, self.bad_lines = scan_results(results, self._take)
        if results.exists() and results.stat().st_size > end:
            os.truncate(results, end)  # a torn last line, from a crash
        return self.bad_lines

    def done(self, file: int, row: int, scorer: str) -> bool:
        """True when (file, row, scorer) has a successful record in the folder (resume)."""
        return self.ledger.done(file, row, scorer)

    def pending(
        self,
        rows: Iterable[Row],
        scorers: Sequence[str],
        on_skip: Callable[[Row], None] = lambda _: None,
    ) -> Iterator[Row]:
        """The rows that a scorer of `scorers` still has to score, each with those scorers in
        `Row.todo`; a row that every scorer is done with is not handed on (`on_skip` is told)."""
        if not self._resumed:
            raise RuntimeError("OutputFolder.pending before resume: it would score rows twice")
        for row in rows:
            todo = tuple(s for s in scorers if not self.done(row.file, row.number, s))
            if todo:
                yield replace(row, todo=todo)
            else:
                on_skip(row)

    def append(self, records: list[Record]) -> list[Record]:
        """Append a chunk's records durably (see `append_records`); after `resume`.

        A record whose (row, scorer) already has a success is not written (a chunk scored
        twice, as a Ray chunk retried after its actor died): a success is never scored twice.

        Returns:
            The records written.
        """
        if not self._resumed:
            raise RuntimeError("OutputFolder.append before resume: a torn line would stay")
        fresh = [r for r in records if not self._has(r)]
        if self._file is None and self.path is not None:
            self._file = open(self.path / "results.jsonl", "a", encoding="utf-8")
        if self._file is not None:
            append_records(self._file, fresh)
        for record in fresh:
            self._take(record)
        return fresh

    def _has(self, record: Record) -> bool:
        file = self.ledger.file_index(record)
        return file >= 0 and self.done(file, record["row"], record["scorer"])

    def _take(self, record: Record) -> None:
        self.ledger.add(record)
        self.aggregates.add(record)

    def write_summary(
        self,
        *,
        engine: str | None,
        file_errors: list[str],
        duplicate_ids: dict[str, Any],
        run: dict[str, Any],
    ) -> dict[str, Any]:
        """Write `summary.json` atomically: the configuration, the aggregates, this run.

        Args:
            engine: the engine(s) that scored, by name.
            file_errors: data files that could not be read, one message each.
            duplicate_ids: rows repeating an earlier row's id (`RepeatedIds.summary`).
            run: this run's figures (rows, time, throughput).

        Returns:
            The summary, as written (kept in memory only, without a folder).
        """
        summary = {
            "version": CONFIG_VERSION,
            "config_hash": self.config["hash"],
            "model": self.config.get("model"),
            "backend": self.config.get("backend"),
            "engine": engine,
            "options": self.config["options"],
            "map": self.config["map"],
            "data": self.files,
            "file_errors": {"count": len(file_errors), "messages": list(file_errors)},
            "duplicate_ids": duplicate_ids,
            **self.aggregates.summary(),
            "run": run,
        }
        if self.path is not None:
            text = json.dumps(summary, indent=2, ensure_ascii=False)
            write_atomic(self.path / "summary.json", replace_surrogates(text) + "\n")
        return summary

    def _check_config(self, new: dict[str, Any]) -> dict[str, Any]:
        out = self.path
        assert out is not None
        path = out / "config.json"
        if path.exists():
            old: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            earlier = old.get("version", 1) < CONFIG_VERSION
            if earlier:
                old = upgrade_config(old, new)
            if old.get("hash") != new["hash"]:
                raise ConfigError(
                    f"output folder {out} holds results of another configuration "
                    f"({'; '.join(differences(old, new))}); use a new output folder, "
                    f"or delete {out} to start over"
                )
            if earlier:  # the same run, written in this version's shape from now on
                write_atomic(path, json.dumps(old, indent=2, ensure_ascii=False) + "\n")
            return old  # its paths name the files in the records already written
        if (out / "results.jsonl").exists():
            raise ConfigError(
                f"output folder {out} has a results.jsonl but no config.json; "
                "use a new output folder"
            )
        write_atomic(path, json.dumps(new, indent=2, ensure_ascii=False) + "\n")
        return new

    def close(self) -> None:
        """Close the records file and release the lock (safe to call twice)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_folder(out: Path) -> tuple[dict[str, Any], Aggregator, int]:
    """Read an output folder without opening it (no lock: a run may be appending to it).

    Returns:
        Its configuration, the aggregates of its records, and the number of lines of
        `results.jsonl` that did not parse.

    Raises:
        FileNotFoundError: the folder has no `config.json` (it is not an output folder).
    """
    config_path = out / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{out} is not an evalgpu output folder (no config.json)")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    aggregates = _aggregator(config)
    _, bad = scan_results(out / "results.jsonl", aggregates.add)
    return config, aggregates, bad


def latest_records(out: Path) -> list[Record]:
    """The folder's latest record of every (file, row, scorer), in the order first seen; a
    success is never replaced by a later failure (a resumed run does not score it again)."""
    latest: dict[tuple[Any, Any, Any], Record] = {}

    def keep(record: Record) -> None:
        key = (record.get("file"), record.get("row"), record.get("scorer"))
        old = latest.get(key)
        if old is None or old.get("error") is not None or record.get("error") is None:
            latest[key] = record

    scan_results(out / "results.jsonl", keep)
    return list(latest.values())


def _aggregator(config: dict[str, Any]) -> Aggregator:
    """Empty aggregates for a folder of `config` (its scorers, files and scale)."""
    return Aggregator(
        config["scorer_ids"], [d["path"] for d in config["data"]], config_scale(config)
    )


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
            f"another evalgpu run is writing to {out}; wait for it or use a new output folder"
        ) from None
    return fd
