"""Sweeps on a Ray cluster (`run --ray`): the local run, with Ray actors as its executor.

`run_ray` calls `evaluate` as a local run does (folder, reading, appends: on the driver); only
the scoring moves. Each chunk goes to a `Replica` actor, which loaded the judge once and runs
the local `Driver.score_chunk` on it, at most `IN_FLIGHT` chunks queued on each; `ray.wait`
hands each chunk's records back as it finishes. A `kill -9` of the driver loses at most the
chunks in flight; an actor that dies is restarted and its chunk retried (`RESTARTS`).

Why actors and not Ray Data: a chunk is the unit of work, of resume and of the reply cache,
and what comes back is records; Ray's readers would number and parse rows their own way, and
the judge, not the reader, is the bottleneck. Ray is imported only here, when a run asks.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

from evalgpu._options import check_count
from evalgpu.driver import Driver
from evalgpu.engines import AUTO, MODEL_BACKENDS, SCRIPTED, auto_backend
from evalgpu.engines.base import JudgeReply, JudgeRequest
from evalgpu.evaluation import Evaluation, Progress
from evalgpu.results import Record
from evalgpu.rows import Row
from evalgpu.runner import WaveStats
from evalgpu.settings import RunSettings
from evalgpu.storage import judge_model

__all__ = ["Planned", "Replica", "layout", "run_ray"]

IN_FLIGHT = 2
"""Chunks queued on each replica: the one it scores and the next, so that it never waits for
the driver, while the driver reads no further ahead than that (memory stays flat)."""
RESTARTS = 3
"""Times Ray restarts a replica that died (out of memory, a lost node) and retries its chunk."""


@dataclass
class Scored:
    """What a replica sends back for one chunk: its records, output tokens and engine name."""

    records: list[Record]
    output_tokens: int
    engine: str


class Planned:
    """The judge the replicas will load, named as `folder_config` names it, without loading it:
    `name` is the backend a replica resolves "auto" to (`auto_backend`, on a GPU where it holds
    one), `model_path` the model (for `judge_model`)."""

    def __init__(self, settings: RunSettings, gpus_per_replica: int) -> None:
        backend = settings.backend
        if backend == AUTO:
            backend = auto_backend(settings.engine_options(), gpu=gpus_per_replica > 0)
        self.name = backend
        self.model_path: str | None = None
        if backend in MODEL_BACKENDS:
            from evalgpu.models import DEFAULT_MODEL

            # Named as `judge_model` names the replicas' folder, without pulling it here.
            model = Path(settings.model or DEFAULT_MODEL)
            self.model_path = str(model if model.is_dir() else model.name)

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        raise NotImplementedError("the replicas' engines judge; a Planned one only names them")


class Replica:
    """One engine replica, run as a Ray actor by `run_ray`: scores one chunk per call.

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
        if judge[0] in MODEL_BACKENDS and loaded != judge:
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

    def score(self, rows: list[Row]) -> Scored:
        """A chunk's records (`Driver.score_chunk`: each row by the scorers of its `Row.todo`),
        and what the driver counts."""
        before = self.output_tokens
        records = self.driver.score_chunk(rows)
        return Scored(records, self.output_tokens - before, self.name)


def _forwarded_env() -> dict[str, str]:
    """The driver's EVALGPU_* variables (the models folder, test knobs), for the workers."""
    return {k: v for k, v in os.environ.items() if k.startswith("EVALGPU_")}


def check_layout(replicas: int | None, gpus_per_replica: int | None = None) -> None:
    """Raise ValueError unless `replicas` (>= 1) and `gpus_per_replica` (>= 0) are None or in
    range: `run_ray`'s check, which the command line makes before anything starts."""
    for name, value, least in (
        ("replicas", replicas, 1),
        ("gpus_per_replica", gpus_per_replica, 0),
    ):
        if value is not None:
            check_count(name, value, least)


def layout(
    settings: RunSettings,
    cluster_gpus: int,
    replicas: int | None = None,
    gpus_per_replica: int | None = None,
) -> tuple[int, int]:
    """(replicas, GPUs per replica) on a cluster with `cluster_gpus` GPUs (see `run_ray`)."""
    if gpus_per_replica is None:
        gpus_per_replica = 0  # and so for the scripted judge (rules, no model), wherever it runs
        if cluster_gpus > 0 and settings.backend != SCRIPTED:
            from evalgpu.models import preset_for

            try:
                preset = preset_for(settings.model)
            except (OSError, ValueError):
                preset = None
            size = preset.engine_options("vllm").get("tensor_parallel_size", 1) if preset else 1
            gpus_per_replica = size if isinstance(size, int) and size >= 1 else 1
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
) -> Evaluation:
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
        on_progress, on_error, on_notice: as `evaluate`'s (output tokens are counted a
            chunk at a time, over all replicas).

    Returns:
        The run's `Evaluation`, finished: `progress`, `file_errors`, `bad_lines`.

    Raises:
        ImportError: Ray is not installed (`pip install "evalgpu[ray]"`).
        ValueError: `replicas` or `gpus_per_replica` is out of range, or a scorer option is.
        ConfigError: the folder holds another configuration's results, or is in use.
    """
    check_layout(replicas, gpus_per_replica)
    try:
        import ray
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
        # The driver only reads rows: its engine is the `Planned` one, never asked.
        return settings.evaluate(
            settings.build_scorers(Planned(settings, gpus_per_replica)),
            # The rate a chunk is sized from is all replicas': a chunk takes one of them
            # about chunk_seconds.
            chunk_seconds=settings.chunk_seconds / replicas,
            executor=partial(_scatter, ray, settings, replicas, gpus_per_replica),
            on_progress=on_progress,
            on_error=on_error,
            on_notice=on_notice,
        ).run()
    finally:
        if started:
            ray.shutdown()


def _scatter(
    ray: Any,
    settings: RunSettings,
    replicas: int,
    gpus_per_replica: int,
    run: Evaluation,
    chunks: Iterator[list[Row]],
) -> Iterator[tuple[int, list[Record]]]:
    """`run_ray`'s executor (`evalgpu.evaluation.Executor`): `replicas` actors, each with one CPU
    and `gpus_per_replica` GPUs; each chunk to the least loaded, at most `IN_FLIGHT` on each,
    each row naming the scorers still to score it; the records in the order they finish."""
    env = _forwarded_env()
    actor = ray.remote(Replica).options(
        num_cpus=1,
        num_gpus=gpus_per_replica,
        max_restarts=RESTARTS,
        max_task_retries=RESTARTS,
        runtime_env={"env_vars": env} if env else None,
    )
    judge = (run.folder.config["backend"], run.folder.config["model"])
    actors = [actor.remote(settings, run.files, judge) for _ in range(replicas)]
    pending: dict[Any, tuple[int, int]] = {}  # the call's result -> its actor, its rows
    load = [0] * len(actors)
    names: list[str] = []
    run.engine_name = None  # named by the replicas that score
    while True:
        while min(load) < IN_FLIGHT and (chunk := next(chunks, None)) is not None:
            at = load.index(min(load))
            pending[actors[at].score.remote(chunk)] = at, len(chunk)
            load[at] += 1
        if not pending:
            return
        [finished], _ = ray.wait(list(pending), num_returns=1)
        at, rows = pending.pop(finished)
        load[at] -= 1
        scored: Scored = ray.get(finished)
        run.progress.output_tokens += scored.output_tokens
        names.append(scored.engine)
        run.engine_name = ", ".join(dict.fromkeys(names))
        yield rows, scored.records
