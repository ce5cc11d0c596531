"""Engines under test: every engine in `ENGINES` must pass tests/engines/test_contract.py.

Add an engine by appending a `pytest.param(factory, id=..., marks=...)` to `ENGINES`; the
factory takes no argument and returns an `Engine`. The fixture is module-scoped and the real
engines come from `load_engine`, which caches them per process, so a model loads once.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from evalgpu.engines import Engine

from fakes import ScriptedEngine


def scripted() -> Engine:
    return ScriptedEngine()


def transformers_default() -> Engine:
    """The transformers engine on the default model (pulled on first use, about 30 s)."""
    from evalgpu.engines import load_engine

    return load_engine(None, backend="transformers")


ENGINES: list = [
    pytest.param(scripted, id="scripted"),
    pytest.param(transformers_default, id="transformers", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module", params=ENGINES)
def any_engine(request: pytest.FixtureRequest) -> Engine:
    factory: Callable[[], Engine] = request.param
    return factory()
