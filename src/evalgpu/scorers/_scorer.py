"""The object a scorer factory returns: an id, an engine, a row's steps, and `run`/`run_batch`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from evalgpu.engines.base import Engine
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.runner import Runner
from evalgpu.verdicts import VerdictMode

__all__ = ["Scorer", "callable_name", "digest", "resolve_engine", "resolve_verdicts"]


def resolve_engine(model: Any) -> Engine:
    """An `Engine` as given, or a model folder / preset name (None: the default model) loaded."""
    if isinstance(model, Engine):
        return model
    if model is None or isinstance(model, str):
        from evalgpu.engines import load_engine

        return load_engine(model)
    raise TypeError(
        "model must be an Engine, a model folder, a preset name or None, "
        f"got {type(model).__name__}"
    )


@dataclass
class Scorer:
    """A configured scorer. All batching happens in the runner; this only wires it up.

    Every `run` / `run_batch` goes through a `Runner` of the scorer's engine, and so through
    that engine's reply cache, which every scorer on the engine shares.
    """

    id: str
    """"summarization-scorer" | "context-recall-scorer"."""
    engine: Engine
    """The judge."""
    steps_fn: Callable[..., Steps]
    """`(input, output, ground_truth, **per_run) -> Steps` (the scorer module's `_steps`)."""
    per_run_fields: frozenset[str] = frozenset()
    """Options a run may bring as its own: `source` (summarization), `context` (recall)."""
    fallbacks: frozenset[str] = frozenset()
    """Per-run fields the scorer can do without, because it has its own option for them."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The options that change scores (recorded in an output folder's configuration)."""

    def steps(self, input: Any, output: Any, ground_truth: Any = None, **per_run: Any) -> Steps:
        """The judge steps for one run (the runner drives them).

        `per_run` carries this run's own `source` (summarization) or `context` (context
        recall), for datasets where every row has its own: it replaces the scorer's option of
        the same name for this run (an extractor still applies to agent-shaped runs).
        """
        unknown = set(per_run) - self.per_run_fields
        if unknown:
            raise TypeError(f"{self.id} takes no per-run {', '.join(sorted(unknown))}")
        return self.steps_fn(input, output, ground_truth, **per_run)

    def run(self, input: Any = None, output: Any = None, ground_truth: Any = None) -> ScoreResult:
        """Score one run."""
        return Runner(self.engine).run([(self.id, self.steps(input, output, ground_truth))])[0]

    def run_batch(self, runs: Sequence[dict[str, Any]]) -> list[ScoreResult]:
        """Score many runs (dicts with `input`, `output`, optional `ground_truth`) together.

        Every ready judge call of every run goes to the engine in one `generate()`. Returns
        one result per run, in order; a run that fails has `error` set and `score` None.
        """
        rows = [(self.id, self._run_steps(run)) for run in runs]
        return Runner(self.engine).run(rows, labels=[f"row {i}" for i in range(1, len(rows) + 1)])

    def _run_steps(self, run: Any) -> Steps:
        if not isinstance(run, dict):
            return _invalid(f"a run is a dict with input and output, got {type(run).__name__}")
        per_run = {k: run[k] for k in self.per_run_fields if run.get(k) is not None}
        ground_truth = run.get("ground_truth", run.get("groundTruth"))
        return self.steps(run.get("input"), run.get("output"), ground_truth, **per_run)


def _invalid(message: str) -> Steps:
    raise InputError(message)
    yield  # unreachable: makes this a generator, so the runner records the error for the row


def resolve_verdicts(verdicts: str | None, engine: Engine) -> VerdictMode:
    """The verdict mode a scorer counts with: as asked, or (None) the judge's measured default
    (`evalgpu.models.verdicts_for`: its preset says which mode agrees best with people)."""
    if verdicts is None:
        from evalgpu.models import verdicts_for

        verdicts = verdicts_for(engine)[0]
    return cast(VerdictMode, verdicts)


def digest(text: str) -> str:
    """A short hash that stands for a static option's text in a configuration."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def callable_name(fn: Callable[..., Any]) -> str:
    """`module.qualname` of an extractor, as a configuration records it."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
