"""`package.module:factory`: how the command line names an engine or a scorer of your own."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["call_factory"]


def call_factory(spec: str, what: str, returns: type, noun: str, *args: Any, **kwargs: Any) -> Any:
    """Import the factory `spec` names and call it; what it returns must be a `returns`.

    Args:
        spec: "package.module:factory".
        what: how messages name the spec ("backend", "scorer").
        returns: the type the factory must return (an `Engine`, a `Scorer`).
        noun: how messages name that type ("an Engine", "a Scorer").
        *args: the factory's arguments.
        **kwargs: the factory's keyword arguments.

    Raises:
        ValueError: the factory cannot be imported (the message says why).
        TypeError: it returned something else than a `returns`.
    """
    module, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(
            f"{what} {spec!r}: cannot import {attr!r} from {module!r} ({exc})"
        ) from exc
    made = factory(*args, **kwargs)
    if not isinstance(made, returns):
        raise TypeError(f"{what} {spec!r} returned {type(made).__name__}, not {noun}")
    return made
