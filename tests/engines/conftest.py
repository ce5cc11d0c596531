"""Engines under test: every engine in `ENGINES` must pass tests/engines/test_contract.py.

Add an engine by appending a `pytest.param(factory, id=..., marks=...)` to `ENGINES`; the
factory takes no argument and returns an `Engine`. The fixture is module-scoped and the real
engines come from `load_engine`, which caches them per process, so a model loads once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from evalgpu.engines import Engine
from evalgpu.engines.scripted import ScriptedEngine


def scripted() -> Engine:
    return ScriptedEngine()


def transformers_default() -> Engine:
    """The transformers engine on the tiny preset (SmolLM2-135M): the contract and the decode
    loop's plumbing need a real model, not a good judge; tests of the default judge itself
    name it (`tests/engines/test_transformers.py`)."""
    from evalgpu.engines import load_engine

    return load_engine("smollm2-135m-instruct", backend="transformers")


def vllm_default() -> Engine:
    """The vLLM engine on the default model (float32 and eager on a CPU)."""
    import os
    from pathlib import Path

    from vllm.platforms import current_platform

    from evalgpu.engines.vllm import VLLMEngine

    model = os.environ.get(
        "EVALGPU_TEST_MODEL",
        str(Path(__file__).resolve().parents[2] / "models" / "smollm2-135m-instruct"),
    )
    if current_platform.is_cpu():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        return VLLMEngine(model, dtype="float32", enforce_eager=True, max_model_len=4096)
    return VLLMEngine(model, enforce_eager=True, max_model_len=4096, gpu_memory_utilization=0.2)


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


ENGINES: list = [
    pytest.param(scripted, id="scripted"),
    pytest.param(transformers_default, id="transformers", marks=pytest.mark.slow),
    pytest.param(
        vllm_default,
        id="vllm",
        marks=[pytest.mark.vllm, pytest.mark.skipif(not _has_vllm(), reason="vLLM not installed")],
    ),
]


@pytest.fixture(scope="module", params=ENGINES)
def any_engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    factory: Callable[[], Engine] = request.param
    engine = factory()
    yield engine
    close = getattr(engine, "close", None)  # vLLM: stop its processes while pytest captures
    if close is not None:
        close()
