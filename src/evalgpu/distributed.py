"""Sweeps on a Ray cluster (`run --ray`): the local run's records, scored by N engine replicas.

The output folder is prepared exactly as for a local run (`open_sweep`: lock, config, resume
ledger). Then one Ray Data pipeline streams the work:

    read: one task on the driver's node, with evalgpu's own readers (the same row numbers,
          field mapping and bad-row records as a local run); rows already scored are skipped
      -> chunks of about `chunk_size` rows, cut where the source changes
      -> map_batches(Replica, batch_size=1, compute=ActorPoolStrategy(size=N))
      -> the driver, which appends each chunk's records to results.jsonl as it arrives.

Why not `ray.data.read_json` / `read_csv` / `read_parquet`: they number, parse and type rows
their own way (Arrow schema inference across rows, no line numbers, a bad line fails the read),
so records would differ from a local run's. The judge, not the reader, is the bottleneck.

Each `Replica` actor loads the engine once and runs the scorers' full step pipeline over one
chunk at a time with its own `Runner`: every wave of the chunk is one `generate()`, and a
source's questions are asked once per chunk (and cached across the actor's chunks). Only the
driver writes: a chunk's records reach the file when the chunk is done, flushed and fsync'ed,
so a `kill -9` of the driver loses at most the chunks in flight, and a record whose (row,
scorer) already has a success is never written (a chunk retried after an actor died, or
delivered twice, adds nothing).

Ray is imported only here, and only when a run asks for it (`pip install -e ".[ray]"`).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from evalgpu.data import RowError, read_rows
from evalgpu.engines.base import Engine
from evalgpu.report import Aggregator
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.rows import RowSteps, row_id
from evalgpu.runner import Runner, WaveStats
from evalgpu.scorers import create_context_recall_scorer, create_summarization_scorer
from evalgpu.scorers._scorer import Scorer
from evalgpu.sweep import SCORERS, Outcome, Progress, Sweep, _record, _write_atomic

__all__ = ["Chunk", "Plan", "Replica", "read_chunks", "run_ray"]

SKIPPED_PER_CHUNK = 10_000
"""Rows already scored are counted, not sent: an empty chunk reports every this many."""

Row = tuple[int, int, "dict[str, Any] | RowError", tuple[str, ...]]
"""(file index, row number, record or RowError, scorer names still to run)."""


@dataclass(frozen=True)
class Plan:
    """What the read task and the replicas need of a run (small and picklable)."""

    data: tuple[str, ...]
    """The data files, read in order."""
    files: tuple[str, ...]
    """File names as records carry them (config.json's: a resume keeps the first run's)."""
    scorers: tuple[str, ...]
    """Scorer names ("summarization", "context-recall")."""
    mapping: dict[str, str]
    model: str | None
    backend: str
    max_questions: int
    scale: float
    chunk_size: int
    limit: int | None

    @classmethod
    def of(cls, sweep: Sweep) -> Plan:
        """The plan of an opened sweep."""
        s = sweep.settings
        return cls(
            data=tuple(str(p) for p in s.data),
            files=tuple(sweep.files),
            scorers=s.scorers,
            mapping=dict(s.mapping),
            model=s.model,
            backend=s.backend,
            max_questions=s.max_questions,
            scale=float(s.scale),
            chunk_size=s.chunk_size,
            limit=s.limit,
        )


@dataclass
class Chunk:
    """One unit of work for a replica: rows to score, and what the read met on the way."""

    rows: list[Row] = field(default_factory=list)
    skipped: int = 0
    """Rows passed over because every scorer already has a success for them."""
    file_errors: list[str] = field(default_factory=list)
    """Data files that could not be read (each message names the file)."""


def _group(record: dict[str, Any] | RowError, mapping: dict[str, str]) -> str | None:
    """What rows that share judge calls have in common: the source (else the ground truth)."""
    if isinstance(record, RowError):
        return None
    for key in ("source", "input", "ground_truth"):
        value = record.get(mapping.get(key, key))
        if value is not None:
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return None


def read_chunks(plan: Plan, ledger: Aggregator) -> Iterator[Chunk]:
    """The rows still to score, in file order, as chunks (what the read task yields).

    A chunk closes once it holds `chunk_size` rows and the next row has another source, so
    that a source's summaries (FRANK has 4-5 an article) go to one replica and its questions
    are asked once; at twice `chunk_size` it closes regardless, which bounds memory.
    """
    chunk = Chunk()
    last: str | None = None
    n = 0
    for index, path in enumerate(plan.data):
        try:
            for row, record in read_rows(path):
                if plan.limit is not None and n >= plan.limit:
                    break
                n += 1
                todo = tuple(
                    name for name in plan.scorers if not ledger.done(index, row, SCORERS[name])
                )
                if not todo:
                    chunk.skipped += 1
                    if chunk.skipped >= SKIPPED_PER_CHUNK and not chunk.rows:
                        yield chunk
                        chunk = Chunk()
                    continue
                key = _group(record, plan.mapping)
                size = len(chunk.rows)
                # A row without a source (an unreadable one) makes no judge calls: no cut.
                cut = size >= plan.chunk_size and key is not None and key != last
                if cut or size >= 2 * plan.chunk_size:
                    yield chunk
                    chunk = Chunk()
                chunk.rows.append((index, row, record, todo))
                last = key if key is not None else last
        except (OSError, ValueError) as exc:
            chunk.file_errors.append(str(exc) if str(path) in str(exc) else f"{path}: {exc}")
    if chunk.rows or chunk.skipped or chunk.file_errors:
        yield chunk


class ChunkScorer:
    """Scores chunks into records with one engine (what each replica holds).

    Args:
        plan: the run.
        engine: the judge; its `Runner` (and reply cache) lives as long as this object.
    """

    def __init__(self, plan: Plan, engine: Engine) -> None:
        self.plan = plan
        self.engine = engine
        self.output_tokens = 0
        self.runner = Runner(engine, on_wave=self._wave)
        self.row_steps = RowSteps(dict(plan.mapping), engine)
        self.scorers: dict[str, Scorer] = {}
        if "summarization" in plan.scorers:
            self.scorers["summarization"] = create_summarization_scorer(
                engine, max_questions=plan.max_questions, scale=plan.scale
            )
        if "context-recall" in plan.scorers:
            # Every row brings its own context, so the factory's static one is never used.
            self.scorers["context-recall"] = create_context_recall_scorer(
                engine, context=["(each row brings its own context)"], scale=plan.scale
            )

    def _wave(self, wave: WaveStats) -> None:
        self.output_tokens += wave.output_tokens

    def score(self, rows: list[Row]) -> list[dict[str, Any]]:
        """The records of `rows` (one per row and scorer still to run), in order.

        Whatever escapes the runner (an engine that breaks its contract, a row that makes a
        scorer raise) becomes the error record of every (row, scorer) of the chunk, so that
        the run goes on, as a failing row does.
        """
        try:
            return self._score(rows)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            return [
                _record(
                    self._base(file, row, record, name),
                    ScoreResult(
                        scorer=SCORERS[name],
                        error=f"{self._label(file, row, record)}: {message}",
                    ),
                )
                for file, row, record, todo in rows
                for name in todo
            ]

    def _base(
        self, file: int, row: int, record: dict[str, Any] | RowError, name: str
    ) -> dict[str, Any]:
        ident, _ = row_id(record, self.plan.mapping.get("id", "id"))
        return {"row": row, "id": ident, "file": self.plan.files[file], "scorer": SCORERS[name]}

    def _label(self, file: int, row: int, record: dict[str, Any] | RowError) -> str:
        ident, _ = row_id(record, self.plan.mapping.get("id", "id"))
        label = f"row {row}"
        if len(self.plan.files) > 1:
            label = f"{self.plan.files[file]} {label}"
        if ident is not None:
            label += f" (id {json.dumps(ident, ensure_ascii=False)})"
        return label

    def _score(self, rows: list[Row]) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        slots: list[int] = []
        jobs: list[tuple[str, Steps]] = []
        labels: list[str | None] = []
        for file, row, record, todo in rows:
            _, problem = row_id(record, self.plan.mapping.get("id", "id"))
            label = self._label(file, row, record)
            for name in todo:
                scorer = self.scorers[name]
                base = self._base(file, row, record, name)
                error = problem
                if error is None:
                    assert isinstance(record, dict)
                    try:
                        steps = self.row_steps.steps(name, scorer, record)
                    except InputError as exc:
                        error = str(exc)
                if error is not None:
                    result = ScoreResult(scorer=scorer.id, error=f"{label}: {error}")
                    records.append(_record(base, result))
                    continue
                slots.append(len(records))
                records.append(base)
                jobs.append((scorer.id, steps))
                labels.append(label)
        for slot, result in zip(slots, self.runner.run(jobs, labels), strict=True):
            records[slot] = _record(records[slot], result)
        return records


@dataclass
class Scored:
    """What a replica sends back for one chunk."""

    records: list[dict[str, Any]]
    rows: int
    skipped: int
    file_errors: list[str]
    output_tokens: int
    engine: str


class Replica:
    """The `map_batches` class: one engine replica, scoring one chunk per call.

    Ray Data builds one per actor of the pool (`__init__` loads the engine once) and calls it
    with batches of pickled `Chunk`s; it returns pickled `Scored`s, in the same order.

    Args:
        plan: the run (model, backend, scorers, options, field mapping).
    """

    def __init__(self, plan: Plan) -> None:
        from evalgpu.engines import load_engine

        engine = load_engine(plan.model, backend=plan.backend)
        self.scorer = ChunkScorer(plan, engine)
        self.name = str(getattr(engine, "name", type(engine).__name__))

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[bytes]]:
        out = []
        for blob in batch["chunk"]:
            chunk: Chunk = pickle.loads(blob)
            before = self.scorer.output_tokens
            records = self.scorer.score(chunk.rows) if chunk.rows else []
            scored = Scored(
                records=records,
                rows=len(chunk.rows),
                skipped=chunk.skipped,
                file_errors=chunk.file_errors,
                output_tokens=self.scorer.output_tokens - before,
                engine=self.name,
            )
            out.append(pickle.dumps(scored))
        return {"chunk": out}


def _read(
    batch: dict[str, Any], plan: Plan, ledger: Aggregator
) -> Iterator[dict[str, list[bytes]]]:
    """The read task: one input item, the run's chunks out, one batch each (streamed)."""
    for chunk in read_chunks(plan, ledger):
        yield {"chunk": [pickle.dumps(chunk)]}


def _forwarded_env() -> dict[str, str]:
    """The driver's EVALGPU_* variables (the models folder, test knobs), for the workers."""
    return {k: v for k, v in os.environ.items() if k.startswith("EVALGPU_")}


def _gpus_per_replica(plan: Plan) -> int:
    """GPUs one replica holds: the preset's vLLM `tensor_parallel_size`, else 1."""
    from evalgpu.models import preset_for

    try:
        preset = preset_for(plan.model)
    except (OSError, ValueError):
        preset = None
    size = preset.engine_options("vllm").get("tensor_parallel_size", 1) if preset else 1
    return size if isinstance(size, int) and size >= 1 else 1


def run_ray(
    sweep: Sweep,
    *,
    address: str | None = None,
    replicas: int | None = None,
    gpus_per_replica: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> Outcome:
    """Score what `sweep` still lacks on a Ray cluster; write `summary.json` as `Sweep.run` does.

    Args:
        sweep: an opened output folder (`open_sweep`): locked, config checked, ledger read.
        address: the cluster (`ray start --head` prints it); None: `RAY_ADDRESS`, else a
            local cluster started here and shut down at the end. A process already connected
            (`ray.init` before the call) keeps its connection.
        replicas: engine replicas, one actor each; None: one per GPU of the cluster (divided
            by `gpus_per_replica`), 1 where the cluster has none.
        gpus_per_replica: GPUs each replica holds; None: the preset's vLLM
            `tensor_parallel_size` (else 1) where the cluster has GPUs, 0 where it has none.
        on_progress: called after each chunk (rows done / total, rows/s, output tokens/s over
            all replicas).
        on_error: called with each failed record's error message, and each unreadable file.

    Raises:
        ImportError: Ray is not installed (`pip install -e ".[ray]"`).
        ValueError: `replicas` or `gpus_per_replica` is out of range.
    """
    if replicas is not None and (
        isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1
    ):
        raise ValueError(f"replicas must be >= 1, got {replicas!r}")
    if gpus_per_replica is not None and (
        not isinstance(gpus_per_replica, int) or gpus_per_replica < 0
    ):
        raise ValueError(f"gpus_per_replica must be >= 0, got {gpus_per_replica!r}")
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ImportError(f'--ray needs Ray: pip install "evalgpu[ray]" ({exc})') from exc

    started = not ray.is_initialized()
    if started:
        env = _forwarded_env()
        ray.init(
            address=address,
            logging_level=logging.WARNING,
            runtime_env={"env_vars": env} if env else None,
        )
    try:
        return _drive(sweep, ray, replicas, gpus_per_replica, on_progress, on_error)
    finally:
        if started:
            ray.shutdown()


def _drive(
    sweep: Sweep,
    ray: Any,
    replicas: int | None,
    gpus_per_replica: int | None,
    on_progress: Callable[[Progress], None] | None,
    on_error: Callable[[str], None] | None,
) -> Outcome:
    plan = Plan.of(sweep)
    report = on_progress or (lambda _: None)
    error = on_error or (lambda _: None)
    cluster_gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus_per_replica is None:
        gpus_per_replica = _gpus_per_replica(plan) if cluster_gpus else 0
    if replicas is None:
        replicas = max(1, cluster_gpus // gpus_per_replica) if gpus_per_replica else 1

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the driver reports progress its own way
    context.print_on_execution_start = False
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
    # One read task feeds the pool through many small blocks, which Ray cannot see ahead.
    warnings.filterwarnings("ignore", message="The minimum number of concurrent actors")
    # Every chunk its own block: Ray would otherwise merge the read's small outputs into one
    # block (up to 128 MiB), so no chunk would reach a replica before the whole file is read.
    context.target_max_block_size = 1
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    here = ray.get_runtime_context().get_node_id()
    env = _forwarded_env()
    runtime_env = {"env_vars": env} if env else None
    dataset = (
        ray.data.from_items([{"start": 0}])
        .map_batches(
            _read,
            batch_size=1,
            fn_kwargs={"plan": plan, "ledger": sweep.aggregator},
            # The files were hashed on this node; the read runs where they are.
            label_selector={"ray.io/node-id": here},
            num_cpus=0,
            runtime_env=runtime_env,
        )
        .map_batches(
            Replica,
            batch_size=1,
            fn_constructor_kwargs={"plan": plan},
            compute=ray.data.ActorPoolStrategy(size=replicas),
            num_cpus=1,
            num_gpus=gpus_per_replica,
            runtime_env=runtime_env,
        )
    )

    progress = Progress(rows_total=sweep.rows_total)
    engine_name = "?"
    file_errors: list[str] = []
    ledger = sweep.aggregator
    with open(sweep.results_path, "a", encoding="utf-8") as out:
        for item in dataset.iter_rows():
            scored: Scored = pickle.loads(item["chunk"])
            engine_name = scored.engine
            for message in scored.file_errors:
                file_errors.append(message)
                error(message)
            # A (row, scorer) with a success already (a chunk delivered twice) adds nothing.
            fresh = [r for r in scored.records if not _done(ledger, plan, r)]
            if fresh:
                out.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in fresh))
                out.flush()
                os.fsync(out.fileno())
            for r in fresh:
                ledger.add(r)
                if r["error"] is None:
                    progress.scored += 1
                else:
                    progress.failed += 1
                    error(r["error"])
            progress.rows_run += scored.rows
            progress.rows_done += scored.rows + scored.skipped
            progress.resumed += scored.skipped
            progress.output_tokens += scored.output_tokens
            report(progress)
    return _finish(sweep, progress, engine_name, file_errors)


def _finish(sweep: Sweep, progress: Progress, engine: str, file_errors: list[str]) -> Outcome:
    """Write `summary.json` as a local run does (it names the replicas' engine)."""
    sweep._progress = progress

    class _Named:
        name = engine

    summary_path = sweep.settings.out / "summary.json"
    summary = sweep._summary(_Named())  # type: ignore[arg-type]
    _write_atomic(summary_path, json.dumps(summary, indent=2) + "\n")
    totals = [sweep.aggregator.counts(sid) for sid in sweep.ids]
    return Outcome(
        progress=progress,
        total_scored=sum(t[0] for t in totals),
        total_failed=sum(t[1] for t in totals),
        file_errors=file_errors,
        summary_path=summary_path,
    )


def _done(ledger: Aggregator, plan: Plan, record: dict[str, Any]) -> bool:
    file = plan.files.index(record["file"]) if len(plan.files) > 1 else 0
    return ledger.done(file, record["row"], record["scorer"])
