"""Sweeps on a Ray cluster (`run --ray`): the local run's records, scored by N engine replicas.

The output folder is opened as for a local run (`evalgpu.sweep.Sweep`: its configuration
derived from the scorers and the judge, lock, resume ledger; the judge is the one the replicas
load, `Planned`, and each replica checks that it loaded that one). Then one Ray Data pipeline
streams the work:

    read: one task on the driver's node, `evalgpu.chunks.read_chunks` (evalgpu's own
          readers: the same row numbers, field mapping and bad-row records as a local run;
          rows already scored are skipped)
      -> chunks of about `chunk_size` rows, cut where the source changes
      -> map_batches(Replica, batch_size=1, compute=ActorPoolStrategy(size=N))
      -> the driver, which appends each chunk's records to results.jsonl as it arrives.

Why not `ray.data.read_json` / `read_csv` / `read_parquet`: they number, parse and type rows
their own way (Arrow schema inference across rows, no line numbers, a bad line fails the read),
so records would differ from a local run's. The judge, not the reader, is the bottleneck.

Each `Replica` actor loads the engine once and runs the scorers' full step pipeline over one
chunk at a time with the local run's `Driver.score_chunk` and one `Runner`: every wave of the
chunk is one `generate()`, and a source's questions are asked once per chunk (and cached
across the actor's chunks). Only the driver writes: a chunk's records reach the file when the
chunk is done, flushed and fsync'ed, so a `kill -9` of the driver loses at most the chunks in
flight, and a record whose (row, scorer) already has a success is never written (a chunk
retried after an actor died, or delivered twice, adds nothing).

Ray is imported only here, and only when a run asks for it (`pip install -e ".[ray]"`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pickle
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from evalgpu.chunks import Chunk, ReadNotes, read_chunks
from evalgpu.driver import Driver
from evalgpu.engines.base import JudgeReply, JudgeRequest
from evalgpu.ledger import Ledger
from evalgpu.results import Record
from evalgpu.runner import WaveStats
from evalgpu.settings import RunSettings
from evalgpu.sweep import Progress, Sweep, judge_model

__all__ = ["Planned", "Replica", "layout", "run_ray"]


@dataclass
class Scored:
    """What a replica sends back for one chunk."""

    records: list[Record]
    rows: int
    notes: ReadNotes
    output_tokens: int
    engine: str


class Planned:
    """The judge the replicas will load, named as `folder_config` names it, without loading it.

    `name`: the backend a replica resolves "auto" to (vLLM where it holds a GPU and vLLM is
    installed, unless a transformers-only option is given; else transformers); your own
    engine is named by its `module:factory`. `model_path`: the model, for `judge_model`.
    """

    def __init__(self, settings: RunSettings, gpus_per_replica: int) -> None:
        backend = settings.backend
        if backend == "auto":
            vllm = importlib.util.find_spec("vllm") is not None
            on_gpu = gpus_per_replica > 0 and vllm and not settings.engine_options()
            backend = "vllm" if on_gpu else "transformers"
        self.name = backend
        self.model_path: str | None = None
        if backend in ("vllm", "transformers"):
            from evalgpu.models import DEFAULT_MODEL

            # Named as `judge_model` names the replicas' folder, without pulling it here.
            model = Path(settings.model or DEFAULT_MODEL)
            self.model_path = str(model if model.is_dir() else model.name)

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        raise NotImplementedError("the replicas' engines judge; a Planned one only names them")


class Replica:
    """The `map_batches` class: one engine replica, scoring one chunk per call.

    Ray Data builds one per actor of the pool (`__init__` loads the engine once, with the
    run's model and backend) and calls it with batches of pickled `Chunk`s; it returns
    pickled `Scored`s, in the same order.

    Args:
        settings: the run.
        files: file names as records carry them (the folder's: a resume keeps the first run's).
        judge: the folder's (backend, model): a replica that loads another built-in judge (a
            node without vLLM, where "auto" resolves to transformers) raises RuntimeError.
    """

    def __init__(self, settings: RunSettings, files: list[str], judge: tuple[Any, Any]) -> None:
        engine = settings.load_engine()
        self.name = str(engine.name)
        loaded = (self.name, judge_model(engine))
        if judge[0] in ("vllm", "transformers") and loaded != judge:
            raise RuntimeError(
                f"this replica loaded the judge {loaded}, not the folder's {tuple(judge)}"
            )
        self.output_tokens = 0
        self.driver = Driver(
            settings.build_scorers(engine),
            mapping=settings.mapping,
            files=files,
            on_wave=self._wave,
        )

    def _wave(self, wave: WaveStats) -> None:
        self.output_tokens += wave.output_tokens

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[bytes]]:
        out = []
        for blob in batch["chunk"]:
            chunk: Chunk = pickle.loads(blob)
            before = self.output_tokens
            records = self.score(chunk) if chunk.rows else []
            scored = Scored(
                records=records,
                rows=len(chunk.rows),
                notes=chunk.notes,
                output_tokens=self.output_tokens - before,
                engine=self.name,
            )
            out.append(pickle.dumps(scored))
        return {"chunk": out}

    def score(self, chunk: Chunk) -> list[Record]:
        """The chunk's records (`Driver.score_chunk`).

        Whatever escapes the driver (an engine that breaks its contract) becomes the error
        record of every (row, scorer) of the chunk still to score, so that the run goes on,
        as it does past a failing row; the chunk is retried by the next run.
        """

        def done(file: int, row: int, scorer: str) -> bool:
            return (file, row, scorer) in chunk.done

        try:
            return self.driver.score_chunk(chunk.rows, done)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            return [
                self.driver.failed(row, self.driver.reader.id(row)[0], sid, message, "engine")
                for row in chunk.rows
                for sid in (s.id for s in self.driver.scorers)
                if not done(row.file, row.number, sid)
            ]


def _read(
    batch: dict[str, Any], settings: RunSettings, files: list[str], ledger: Ledger, ids: list[str]
) -> Iterator[dict[str, list[bytes]]]:
    """The read task: one input item in, the run's chunks out, one batch each (streamed)."""
    for chunk in read_chunks(settings, files, ledger, ids):
        yield {"chunk": [pickle.dumps(chunk)]}


def _forwarded_env() -> dict[str, str]:
    """The driver's EVALGPU_* variables (the models folder, test knobs), for the workers."""
    return {k: v for k, v in os.environ.items() if k.startswith("EVALGPU_")}


def _gpus_per_replica(model: str | None) -> int:
    """GPUs one replica holds: the preset's vLLM `tensor_parallel_size`, else 1."""
    from evalgpu.models import preset_for

    try:
        preset = preset_for(model)
    except (OSError, ValueError):
        preset = None
    size = preset.engine_options("vllm").get("tensor_parallel_size", 1) if preset else 1
    return size if isinstance(size, int) and size >= 1 else 1


def layout(
    settings: RunSettings,
    cluster_gpus: int,
    replicas: int | None = None,
    gpus_per_replica: int | None = None,
) -> tuple[int, int]:
    """(replicas, GPUs per replica) on a cluster with `cluster_gpus` GPUs (see `run_ray`)."""
    if gpus_per_replica is None:
        # The scripted judge (rules, no model) needs no GPU, wherever it runs.
        on_gpu = cluster_gpus > 0 and settings.backend != "scripted"
        gpus_per_replica = _gpus_per_replica(settings.model) if on_gpu else 0
    if replicas is None:
        replicas = max(1, cluster_gpus // gpus_per_replica) if gpus_per_replica else 1
    return replicas, gpus_per_replica


def run_ray(
    settings: RunSettings,
    *,
    address: str | None = None,
    replicas: int | None = None,
    gpus_per_replica: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> Sweep:
    """Score what `settings.out` still lacks on a Ray cluster; write `summary.json`.

    Args:
        settings: the run (the command line's flags).
        address: the cluster (`ray start --head` prints it); None: `RAY_ADDRESS`, else a
            local cluster started here and shut down at the end. A process already connected
            (`ray.init` before the call) keeps its connection.
        replicas: engine replicas, one actor each; None: one per GPU of the cluster (divided
            by `gpus_per_replica`), 1 where the cluster has none.
        gpus_per_replica: GPUs each replica holds; None: the preset's vLLM
            `tensor_parallel_size` (else 1) where the cluster has GPUs, 0 where it has none
            (and for the scripted backend).
        on_progress: called after each chunk (rows done / total, rows/s, output tokens/s over
            all replicas).
        on_error: called with each failed record's error message.
        on_notice: called with each file that cannot be read (or stops partway) and each id
            that repeats an earlier row's (named once), as a local run does.

    Returns:
        The run's `Sweep` (closed): `progress`, `file_errors`, `bad_lines`.

    Raises:
        ImportError: Ray is not installed (`pip install "evalgpu[ray]"`).
        ValueError: `replicas` or `gpus_per_replica` is out of range, or a scorer option is.
        ConfigError: the folder holds another configuration's results, or is in use.
    """
    for name, value, least in (
        ("replicas", replicas, 1),
        ("gpus_per_replica", gpus_per_replica, 0),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < least
        ):
            raise ValueError(f"{name} must be >= {least}, got {value!r}")
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ImportError(f'--ray needs Ray: pip install "evalgpu[ray]" ({exc})') from exc

    started = not ray.is_initialized()
    if started:
        env = _forwarded_env()
        options: dict[str, Any] = {}
        if address is None and not os.environ.get("RAY_ADDRESS"):
            options["include_dashboard"] = False  # a cluster of this run alone: keep it light
        ray.init(
            address=address,
            logging_level=logging.WARNING,
            runtime_env={"env_vars": env} if env else None,
            **options,
        )
    try:
        gpus = int(cast(Any, ray).cluster_resources().get("GPU", 0))
        replicas, gpus_per_replica = layout(settings, gpus, replicas, gpus_per_replica)
        scorers = settings.build_scorers(Planned(settings, gpus_per_replica))
        with Sweep(
            settings.out,
            scorers,
            mapping=settings.mapping,
            paths=settings.data,
            limit=settings.limit,
        ) as sweep:
            dataset = _pipeline(ray, sweep, settings, replicas, gpus_per_replica)
            _drive(sweep, settings, dataset, on_progress, on_error, on_notice or (lambda _: None))
        return sweep
    finally:
        if started:
            ray.shutdown()


def _drive(
    sweep: Sweep,
    settings: RunSettings,
    dataset: Any,
    on_progress: Callable[[Progress], None] | None,
    on_error: Callable[[str], None] | None,
    notice: Callable[[str], None],
) -> None:
    """Append each chunk's records as it comes back, then write `summary.json`."""
    report = on_progress or (lambda _: None)
    progress = sweep.progress
    names: list[str] = []
    for item in dataset.iter_rows():
        scored: Scored = pickle.loads(item["chunk"])
        names.append(scored.engine)
        notes = scored.notes
        for message in notes.file_errors:
            sweep.file_errors.append(message)
            notice(message)
        for message in notes.notices:
            notice(message)
        if notes.repeats is not None:
            sweep.repeats = notes.repeats
        # A (row, scorer) with a success already (a chunk delivered twice) adds nothing.
        sweep.add_chunk(scored.rows, scored.records, on_error=on_error)
        progress.rows_done += notes.skipped
        progress.resumed += notes.skipped
        progress.output_tokens += scored.output_tokens
        report(progress)
    sweep.engine_name = ", ".join(dict.fromkeys(names)) or None
    sweep.finish(chunk_size=settings.chunk_size, limit=settings.limit)


def _pipeline(
    ray: Any, sweep: Sweep, settings: RunSettings, replicas: int, gpus_per_replica: int
) -> Any:
    """read -> chunks -> map_batches(Replica, ActorPoolStrategy(size=replicas))."""
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
    # One read task feeds the pool through many small blocks, which Ray cannot see ahead.
    warnings.filterwarnings("ignore", message="The minimum number of concurrent actors")
    # A dataset keeps a copy of the context it was built under: set ours, build, put it back.
    context = ray.data.DataContext.get_current()
    ours = {
        "enable_progress_bars": False,  # the driver reports progress its own way
        "print_on_execution_start": False,
        # Every chunk its own block: Ray would otherwise merge the read's small outputs into
        # one block (up to 128 MiB): no chunk would reach a replica before the file is read.
        "target_max_block_size": 1,
    }
    saved = {key: getattr(context, key) for key in ours}
    try:
        for key, value in ours.items():
            setattr(context, key, value)
        env = _forwarded_env()
        runtime_env = {"env_vars": env} if env else None
        return (
            ray.data.from_items([{"start": 0}])
            .map_batches(
                _read,
                batch_size=1,
                fn_kwargs={
                    "settings": settings,
                    "files": sweep.files,
                    "ledger": sweep.folder.ledger,
                    "ids": sweep.ids,
                },
                # The files were hashed on this node; the read runs where they are.
                label_selector={"ray.io/node-id": ray.get_runtime_context().get_node_id()},
                num_cpus=0,
                runtime_env=runtime_env,
            )
            .map_batches(
                Replica,
                batch_size=1,
                fn_constructor_kwargs={
                    "settings": settings,
                    "files": sweep.files,
                    "judge": (sweep.config["backend"], sweep.config["model"]),
                },
                compute=ray.data.ActorPoolStrategy(size=replicas),
                num_cpus=1,
                num_gpus=gpus_per_replica,
                runtime_env=runtime_env,
            )
        )
    finally:
        for key, value in saved.items():
            setattr(context, key, value)
