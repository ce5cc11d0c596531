"""The object a scorer factory returns: an id, an engine, a row's steps, and `run`/`run_batch`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evalgpu.engines.base import Engine
from evalgpu.results import ScoreResult
from evalgpu.runner import Runner, Steps

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
    steps_fn: Callable[[Any, Any, Any], Steps]

    def __post_init__(self) -> None:
        self._runner = Runner(self.engine)

    def steps(self, input: Any, output: Any, ground_truth: Any = None) -> Steps:
        """The judge steps for one run (the runner drives them)."""
        return self.steps_fn(input, output, ground_truth)

    def run(self, input: Any = None, output: Any = None, ground_truth: Any = None) -> ScoreResult:
        """Score one run."""
        return self._runner.run([(self.id, self.steps(input, output, ground_truth))])[0]

    def run_batch(self, runs: Sequence[dict[str, Any]]) -> list[ScoreResult]:
        """Score many runs (dicts with `input`, `output`, optional `ground_truth`) together.

        Every ready judge call of every run goes to the engine in one `generate()`. Returns
        one result per run, in order; a run that fails has `error` set and `score` None.
        """
        rows = [
            (
                self.id,
                self.steps(
                    run.get("input"),
                    run.get("output"),
                    run.get("ground_truth", run.get("groundTruth")),
                ),
            )
            for run in runs
        ]
        return self._runner.run(rows, labels=[f"row {i}" for i in range(1, len(rows) + 1)])
