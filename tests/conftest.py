import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from evalgpu.engines.scripted import ScriptedEngine


@pytest.fixture(scope="session", autouse=True)
def _close_loaded_engines() -> Iterator[None]:
    """Stop the engines `load_engine` cached (vLLM's engine process) while pytest still
    captures: at interpreter exit, vLLM would log its shutdown to a closed stream."""
    yield
    from evalgpu import engines

    for engine in list(engines._ENGINES.values()):
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    engines._ENGINES.clear()


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()
