"""Checks of options given by a person (flags, factory arguments): one message, one place."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SCALE", "check_count", "check_scale"]

SCALE = 1.0
"""Scores lie in [0, SCALE] unless a scorer is given another `scale` (`--scale`)."""


def check_count(name: str, value: Any, least: int = 1) -> None:
    """Raise ValueError unless `value` is an int (not a bool) of at least `least`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be >= {least}, got {value!r}")


def check_scale(scale: Any) -> None:
    """Raise ValueError unless `scale` is a finite number above 0 (not a bool)."""
    if isinstance(scale, bool) or not (
        isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0
    ):
        raise ValueError(f"scale must be > 0, got {scale!r}")
