"""Run settings: what `python -m evalgpu run` was asked, checked before anything loads.

`RunSettings` loads the judge its flags name (`load_engine`) and builds the scorers on it
(`build_scorers`), which the command line hands to `evalgpu.evaluate`. A folder's configuration
comes from those scorers and that engine (`evalgpu.storage.folder_config`), never from the
flags, so Python and the command line name one run alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu._factory import call_factory
from evalgpu._options import SCALE, check_count, check_scale
from evalgpu.calibration import load_calibration
from evalgpu.driver import CHUNK_SECONDS
from evalgpu.engines import AUTO, BACKENDS, COMPUTES, ENGINE_OPTIONS
from evalgpu.engines.base import Engine
from evalgpu.evaluation import Evaluation, Executor, Progress, check_run, evaluate
from evalgpu.scorers import Scorer, create_summarization_scorer
from evalgpu.scorers.context_recall import row_context_scorer
from evalgpu.scorers.summarization import MAX_QUESTIONS
from evalgpu.verdicts import VERDICT_MODES, VerdictMode

__all__ = ["SCORERS", "RunSettings"]

SCORERS = ("summarization", "context-recall")
"""The built-in scorers' names on the command line; "package.module:factory" names your own."""


@dataclass(frozen=True)
class RunSettings:
    """The command line's flags, one field each (`python -m evalgpu run --help` says what
    each means), checked at construction: a bad flag is a usage error before a model loads.

    `scorers` are "summarization", "context-recall", or "package.module:factory" for a scorer
    of your own, built as `factory(engine)` (its options are its own); `verdicts` None is the
    judge's measured default (`evalgpu.models.verdicts_for`). `compute`, `threads` and
    `batch_size` are options of the engines (`evalgpu.engines.ENGINE_OPTIONS` says which takes
    which), not of the scores: they are not part of a folder's configuration (the backend is,
    as "auto" resolves it), and given with backend "auto", `compute` or `batch_size` loads the
    transformers engine (`evalgpu.engines.TRANSFORMERS_OPTIONS`).
    """

    data: tuple[Path, ...]
    scorers: tuple[str, ...]
    out: Path
    model: str | None = None
    backend: str = AUTO
    max_questions: int = MAX_QUESTIONS
    scale: float = SCALE
    verdicts: VerdictMode | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)
    chunk_size: int | None = None
    chunk_seconds: float = CHUNK_SECONDS
    limit: int | None = None
    compute: str | None = None
    threads: int | None = None
    batch_size: int | None = None
    calibration: str | None = None
    """A calibration file, "none" for the judge's own verdicts, or None for its preset's."""

    def __post_init__(self) -> None:
        # Normalise first, then check (vLLM's SamplingParams order).
        object.__setattr__(self, "data", tuple(Path(p) for p in self.data))
        object.__setattr__(self, "scorers", tuple(dict.fromkeys(self.scorers)))
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "mapping", dict(self.mapping))
        if not self.data:
            raise ValueError("data must name at least one file")
        check_run(
            list(self.data), self.mapping, self.out, self.chunk_size, self.limit, self.chunk_seconds
        )
        if not self.scorers:
            raise ValueError("scorers must name at least one scorer")
        for name in self.scorers:
            if name not in SCORERS and ":" not in name:
                raise ValueError(
                    f"scorer must be {', '.join(SCORERS)} or module:factory, got {name!r}"
                )
        if self.backend not in BACKENDS and ":" not in self.backend:
            raise ValueError(
                f"backend must be {', '.join(BACKENDS)} or module:factory, got {self.backend!r}"
            )
        # The scorers' checks, here so that a bad flag is a usage error before a model loads.
        if self.verdicts is not None and self.verdicts not in VERDICT_MODES:
            raise ValueError(f"verdicts must be 'hard' or 'soft', got {self.verdicts!r}")
        check_count("max_questions", self.max_questions)
        check_scale(self.scale)
        if self.compute is not None and self.compute not in COMPUTES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTES)}, got {self.compute!r}")
        for name in ("threads", "batch_size"):
            if getattr(self, name) is not None:
                check_count(name, getattr(self, name))
        if self.calibration not in (None, "none"):
            load_calibration(Path(self.calibration))  # a bad file is a usage error, here
        refused = [
            name
            for name in self.engine_options()
            if self.backend != AUTO and self.backend not in ENGINE_OPTIONS[name]
        ]
        if refused:
            raise ValueError(f"{_options_of(refused)}, not of backend {self.backend!r}")

    def engine_options(self) -> dict[str, Any]:
        """The options given for the engine (`load_engine`'s keyword arguments)."""
        options = {name: getattr(self, name) for name in ENGINE_OPTIONS}
        return {name: value for name, value in options.items() if value is not None}

    def load_engine(self) -> Engine:
        """The judge these settings name (`evalgpu.engines.load_engine`, cached per process)."""
        from evalgpu.engines import load_engine

        return load_engine(self.model, backend=self.backend, **self.engine_options())

    def evaluate(
        self,
        scorers: Sequence[Scorer],
        *,
        chunk_seconds: float | None = None,
        executor: Executor | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> Evaluation:
        """`evalgpu.evaluate` of these settings' data, column map, folder, chunking and limit
        with `scorers` (`build_scorers`): how the command line and `run_ray` run.
        `chunk_seconds` None is the settings'; the hooks are `evaluate`'s."""
        return evaluate(
            self.data,
            scorers,
            map=self.mapping,
            out=self.out,
            chunk_size=self.chunk_size,
            chunk_seconds=self.chunk_seconds if chunk_seconds is None else chunk_seconds,
            limit=self.limit,
            executor=executor,
            on_progress=on_progress,
            on_error=on_error,
            on_notice=on_notice,
        )

    def build_scorers(self, engine: Engine) -> list[Scorer]:
        """The scorers these settings name, on `engine`, in order.

        Raises:
            ValueError: an option is out of range (`max_questions`, `scale`: the scorers'), or
                a `module:factory` cannot be imported.
            TypeError: a factory returned something else than a `Scorer`.
        """
        calibration = False if self.calibration == "none" else self.calibration
        options: dict[str, Any] = {
            "scale": self.scale,
            "verdicts": self.verdicts,
            "calibration": calibration,
        }
        scorers: list[Scorer] = []
        for name in self.scorers:
            if name == "summarization":
                q = self.max_questions
                scorers.append(create_summarization_scorer(engine, max_questions=q, **options))
            elif name == "context-recall":
                scorers.append(row_context_scorer(engine, **options))  # each row its own context
            else:
                scorers.append(call_factory(name, "scorer", Scorer, "a Scorer", engine))
        return scorers


def _options_of(names: list[str]) -> str:
    """Which engines take the options named, in words, grouped by the engines."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name in names:
        groups.setdefault(ENGINE_OPTIONS[name], []).append(name)
    phrases = []
    for takes, group in groups.items():
        are = "are options" if len(group) > 1 else "is an option"
        engines = f"the {_and(list(takes))} engine{'s' if len(takes) > 1 else ''}"
        phrases.append(f"{_and(group)} {are} of {engines}")
    return ", ".join(phrases)


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
