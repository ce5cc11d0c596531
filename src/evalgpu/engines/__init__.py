"""Judge engines and `load_engine`. Backend libraries are imported only when an engine is built."""

from __future__ import annotations

import importlib
from typing import Any

from evalgpu.engines.base import Engine, JudgeReply, JudgeRequest

__all__ = ["Engine", "JudgeReply", "JudgeRequest", "load_engine"]


def load_engine(model: str | None = None, backend: str = "auto", **options: Any) -> Engine:
    """Load a judge engine.

    Args:
        model: a model folder, a preset name from `models/`, or None for the default model.
        backend: "auto" (vLLM when importable and a CUDA device is present, else
            transformers), "vllm", "transformers", or "package.module:factory" to bring your
            own engine: the factory is called as `factory(model, **options)`.
        **options: passed to the engine.
    """
    if ":" in backend:
        module, _, attr = backend.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"backend {backend!r}: cannot import {attr!r} from {module!r} ({exc})") from exc
        engine = factory(model, **options)
        if not isinstance(engine, Engine):
            raise TypeError(f"backend {backend!r} returned {type(engine).__name__}, not an Engine")
        return engine
    raise NotImplementedError("load_engine: the vllm and transformers engines are not implemented yet")
