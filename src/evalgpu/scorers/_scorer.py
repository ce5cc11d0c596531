"""The object a scorer factory returns: an id, an engine, a row's steps, and `run`/`run_batch`.

A scorer of your own is a `Scorer` too: an id, the engine it judges with, and `steps_fn`, a
generator function that reads and checks the fields it needs from a row (`evalgpu.rows.Fields`,
raising `InputError` that names the field), yields its judge requests and returns its
`ScoreResult`. `evaluate` scores it as it scores the built-in ones, and the command line's
`--scorer package.module:factory` builds it as `factory(engine)`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from evalgpu.calibration import Calibration, CalibrationSpec, calibrated, load_calibration
from evalgpu.engines.base import Engine
from evalgpu.results import InputError, ScoreResult, Steps
from evalgpu.rows import Fields
from evalgpu.runner import Runner
from evalgpu.verdicts import VerdictMode

__all__ = [
    "Scorer",
    "callable_name",
    "digest",
    "resolve_calibration",
    "resolve_engine",
    "resolve_verdicts",
]


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
    """The id its records carry ("summarization-scorer", "context-recall-scorer", yours)."""
    engine: Engine
    """The judge."""
    steps_fn: Callable[[Fields], Steps]
    """`(row) -> Steps`: reads and checks the row's fields, then its judge steps."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The options that change scores (recorded in an output folder's configuration)."""
    calibration: Calibration | None = None
    """The map its verdicts go through before `steps_fn` reads them (`evalgpu.calibration`);
    None: the judge's own. A factory records it in `options` too."""

    def steps(self, row: Fields | Mapping[str, Any]) -> Steps:
        """The judge steps for one row (the runner drives them): its `Fields`, or a dict of them.

        A row may bring its own `source` (summarization) or `context` (context recall), for
        datasets where every row has its own: it replaces the scorer's option of the same
        name for this row (an extractor still applies to agent-shaped runs).
        """
        steps = self.steps_fn(row if isinstance(row, Fields) else Fields(row))
        return steps if self.calibration is None else calibrated(steps, self.calibration)

    def run(self, input: Any = None, output: Any = None, ground_truth: Any = None) -> ScoreResult:
        """Score one run."""
        run = {"input": input, "output": output, "ground_truth": ground_truth}
        return Runner(self.engine).run([(self.id, self.steps(run))])[0]

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
        return self.steps(run)


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


def resolve_calibration(calibration: CalibrationSpec, engine: Engine) -> Calibration | None:
    """The calibration a scorer applies: as given (a file, a `Calibration`; False: none), or
    (None) the one the judge's preset names (`evalgpu.models.calibration_for`), if any.

    Raises:
        ValueError: the file cannot be read or is not a calibration.
    """
    if calibration is None:
        from evalgpu.models import calibration_for

        calibration = calibration_for(engine)
    return load_calibration(calibration)


def digest(text: str) -> str:
    """A short hash that stands for a static option's text in a configuration."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def callable_name(fn: Callable[..., Any]) -> str:
    """`module.qualname` of an extractor, as a configuration records it."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
