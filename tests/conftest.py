import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from evalgpu.engines.scripted import ScriptedEngine


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()
