"""The object a scorer factory returns: an id, an engine, a row's steps, and `run`/`run_batch`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evalgpu.engines.base import Engine
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.runner import Runner

__all__ = ["Scorer", "resolve_engine"]


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
    """A configured scorer. All batching happens in the runner; this only wires it up."""

    id: str
    engine: Engine
    steps_fn: Callable[..., Steps]
    per_run_fields: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self._runner = Runner(self.engine)

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
        return self._runner.run([(self.id, self.steps(input, output, ground_truth))])[0]

    def run_batch(self, runs: Sequence[dict[str, Any]]) -> list[ScoreResult]:
        """Score many runs (dicts with `input`, `output`, optional `ground_truth`) together.

        Every ready judge call of every run goes to the engine in one `generate()`. Returns
        one result per run, in order; a run that fails has `error` set and `score` None.
        """
        rows = [(self.id, self._run_steps(run)) for run in runs]
        return self._runner.run(rows, labels=[f"row {i}" for i in range(1, len(rows) + 1)])

    def _run_steps(self, run: Any) -> Steps:
        if not isinstance(run, dict):
            return _invalid(f"a run is a dict with input and output, got {type(run).__name__}")
        per_run = {k: run[k] for k in self.per_run_fields if run.get(k) is not None}
        ground_truth = run.get("ground_truth", run.get("groundTruth"))
        return self.steps(run.get("input"), run.get("output"), ground_truth, **per_run)


def _invalid(message: str) -> Steps:
    raise InputError(message)
    yield  # unreachable: makes this a generator, so the runner records the error for the row
