"""Calibrated verdicts: a judge's p mapped per kind of check, and its hard verdict by a threshold.

A judge leans one way: the default judge puts most checks above p = 0.5, so a hard verdict at
0.5 says "yes" to claims it is unsure of. A calibration, fitted on labelled rows by
`python -m evalgpu calibrate` (`evalgpu.calibrate`), holds for each kind of check (a judge
request's tag: `summarization.alignment`, `summarization.question_check`,
`summarization.coverage`, `context_recall.attribution`) a threshold `t` and a slope `a`:

    p_cal = sigmoid(a * (logit(p) - logit(t)))

One monotone map gives both readings: the calibrated p is 0.5 exactly at `t`, so a hard verdict
is true exactly when the judge's p is above `t`, and the soft axes are means of `p_cal`. With
`a = 1` the map only moves the judge's 0.5 to `t`. A kind the file does not name keeps the
judge's own verdict and p.

Applied in one place: `calibrated` wraps a row's steps and rewrites each verdict the judge
returns before the scorer reads it; the scorer records `p` (calibrated) beside `p_raw` (the
judge's), and every record names the calibration (`ScoreResult.calibration`). A file is JSON:

    {"format": "evalgpu-calibration/1", "name": "...", "judge": "...", "method": "...",
     "checks": {"context_recall.attribution": {"threshold": 0.62, "slope": 1.4}, ...},
     "fitted_on": {...}}
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalgpu.results import ScoreResult, Steps

__all__ = [
    "CHECK_KINDS",
    "FORMAT",
    "Calibration",
    "CalibrationSpec",
    "CheckCalibration",
    "calibrated",
    "load_calibration",
]

FORMAT: Literal["evalgpu-calibration/1"] = "evalgpu-calibration/1"

CHECK_KINDS = (
    "summarization.alignment",
    "summarization.question_check",
    "summarization.coverage",
    "context_recall.attribution",
)
"""The checks a calibration may map: the tags of the verdict requests of the two scorers."""

_EDGE = 1e-6
"""p is clipped to [_EDGE, 1 - _EDGE] before its logit: a judge's p of exactly 0 or 1 stays so."""


def logit(p: float) -> float:
    p = min(max(p, _EDGE), 1 - _EDGE)
    return math.log(p / (1 - p))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


class CheckCalibration(BaseModel):
    """The map of one kind of check."""

    model_config = ConfigDict(extra="forbid")
    threshold: float = Field(gt=0, lt=1)
    """A hard verdict is true when the judge's p is above this (the calibrated p is then > 0.5)."""
    slope: float = Field(default=1.0, gt=0)
    """How steeply the calibrated p moves with the judge's logit (1: a shift only)."""
    rows: int | None = None
    """The rows it was fitted on."""
    fit: dict[str, float] = Field(default_factory=dict)
    """The fit's own figures on those rows (the metric its threshold maximised)."""

    def apply(self, p: float) -> float:
        """The calibrated p of a judge's p."""
        if p <= 0 or p >= 1:  # certain either way: no map moves it
            return p
        return sigmoid(self.slope * (logit(p) - logit(self.threshold)))


class Calibration(BaseModel):
    """A calibration file: a map per kind of check, what it was fitted on, and for which judge."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["evalgpu-calibration/1"] = FORMAT
    name: str
    """How records and `config.json` name it (with its `digest`)."""
    judge: str | None = None
    """The judge it was fitted for (its model folder's name): another judge needs its own."""
    method: str = ""
    """How it was fitted, in words."""
    checks: dict[str, CheckCalibration]
    fitted_on: dict[str, Any] = Field(default_factory=dict)
    """The labelled files, the rows fitted on and those held out, and the fit's figures."""

    def check(self, kind: str) -> CheckCalibration | None:
        return self.checks.get(kind)

    def digest(self) -> str:
        """A short hash of the maps (the figures beside them do not count)."""
        maps = {k: [v.threshold, v.slope] for k, v in sorted(self.checks.items())}
        text = json.dumps(maps, sort_keys=True)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def option(self) -> dict[str, str]:
        """What a scorer's options (and so `config.json`) record of it."""
        return {"name": self.name, "digest": self.digest()}

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")


CalibrationSpec = Calibration | str | os.PathLike[str] | Mapping[str, Any] | bool | None
"""What `calibration=` takes: a `Calibration`, a file, its dict, False (none), or None (the
judge's preset's, if it names one)."""


def load_calibration(spec: CalibrationSpec) -> Calibration | None:
    """A calibration as given: a `Calibration`, a JSON file, a dict of one; False: none.

    (None is resolved against the judge by `evalgpu.scorers._scorer.resolve_calibration`.)

    Raises:
        ValueError: the file cannot be read, or is not a calibration (the message names it and
            the field at fault).
    """
    if spec is None or spec is False:
        return None
    if isinstance(spec, Calibration):
        return spec
    if spec is True:
        raise ValueError("calibration=True: give a calibration file, or None for the preset's")
    where = "calibration"
    if isinstance(spec, Mapping):
        data: Any = dict(spec)
    else:
        where = f"calibration {os.fspath(spec)}"
        try:
            data = json.loads(Path(spec).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{where}: cannot be read ({exc})") from exc
    try:
        calibration = Calibration.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(the file)"
        raise ValueError(f"{where}: {field}: {first['msg']}") from exc
    unknown = sorted(set(calibration.checks) - set(CHECK_KINDS))
    if unknown:
        raise ValueError(
            f"{where}: checks: unknown kind {unknown[0]!r} (one of {', '.join(CHECK_KINDS)})"
        )
    return calibration


def calibrated(steps: Steps, calibration: Calibration) -> Steps:
    """A row's steps whose verdicts are calibrated before the scorer reads them.

    Each reply to a request whose tag the calibration maps gets `p_raw` (the judge's p), `p`
    (calibrated) and its boolean set to `p_raw > threshold`; the reply is copied, never changed
    in place (the engine's reply cache shares replies between rows and scorers). A verdict
    without a p is left as the judge gave it. The result names the calibration.
    """
    try:
        requests = next(steps)
        while True:
            replies = yield requests
            maps = [calibration.check(r.tag) for r in requests]
            pairs = zip(replies, maps, strict=True)
            requests = steps.send([_calibrate(reply, m) if m else reply for reply, m in pairs])
    except StopIteration as done:
        result: ScoreResult = done.value
        result.calibration = calibration.name
        return result


def _calibrate(reply: BaseModel, check: CheckCalibration) -> BaseModel:
    p = getattr(reply, "p", None)
    if p is None:
        return reply
    boolean = next(
        name for name, value in type(reply).model_fields.items() if value.annotation is bool
    )
    update = {"p_raw": p, "p": check.apply(p), boolean: p > check.threshold}
    return reply.model_copy(update=update)
