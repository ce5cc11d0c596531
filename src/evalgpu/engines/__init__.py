"""Judge engines and `load_engine`. Backend libraries are imported only when an engine is built."""

from __future__ import annotations

from typing import Any

from evalgpu.engines.base import Engine, JudgeReply, JudgeRequest

__all__ = ["Engine", "JudgeReply", "JudgeRequest", "load_engine"]


def load_engine(model: str | None = None, backend: str = "auto", **options: Any) -> Engine:
    """Load a judge engine (placeholder until the engines land)."""
    raise NotImplementedError("load_engine: engines are not implemented yet")
