"""Run settings: what `python -m evalgpu run` was asked, validated, and a folder's configuration.

`RunSettings` is built from the command line's flags (or from Python) and validated at
construction; `folder_config` is the one shape of an output folder's `config.json`, which the
command line builds from its settings and `evalgpu.evaluation` from scorer objects.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu.data import FileInfo, file_format
from evalgpu.engines import COMPUTES, TRANSFORMERS_OPTIONS
from evalgpu.engines.base import Engine
from evalgpu.results import RESULT_VERSION
from evalgpu.rows import RowReader
from evalgpu.scorers import create_context_recall_scorer, create_summarization_scorer
from evalgpu.scorers._scorer import Scorer
from evalgpu.storage import CONFIG_VERSION, check_out, config_hash
from evalgpu.verdicts import VerdictMode

__all__ = ["SCORERS", "RunSettings", "folder_config", "model_name"]

SCORERS = {"summarization": "summarization-scorer", "context-recall": "context-recall-scorer"}
"""Scorer names on the command line -> scorer ids in records."""


@dataclass(frozen=True)
class RunSettings:
    """Everything a sweep needs, validated at construction (CLI flags or Python).

    Args:
        data: dataset files (.jsonl, .json, .csv, .parquet), scored in order.
        scorers: "summarization" and/or "context-recall".
        out: the output folder (created; an existing one is resumed).
        model: a model folder or preset name; None for the default model.
        backend: "auto", "vllm", "transformers", or "module:factory".
        max_questions: summarization's most coverage questions per source (>= 1).
        scale: both scorers' scale (> 0).
        verdicts: both scorers' "hard" (the reference) or "soft" verdicts.
        mapping: field -> column, for files whose columns have other names.
        chunk_size: rows scored per engine batch and per append (>= 1).
        limit: read at most this many rows in all (None: all). Rows already scored count.
        compute: the transformers engine's compute ("auto", "bfloat16", "int8", "float32";
            None: its default, "auto").
        threads: the transformers engine's torch threads on a CPU (None: its measured default).
        batch_size: the transformers engine's requests decoded together (None: its default,
            16); its KV caches, and so its memory above the model, grow with it.

    `compute`, `threads` and `batch_size` are options of the engine, not of the scores: like
    the machine that "auto" resolves on, they are not part of a folder's configuration, so a
    folder can be resumed with another compute. Given with backend "auto", any of them loads
    the transformers engine (`evalgpu.engines.TRANSFORMERS_OPTIONS`).
    """

    data: tuple[Path, ...]
    scorers: tuple[str, ...]
    out: Path
    model: str | None = None
    backend: str = "auto"
    max_questions: int = 10
    scale: float = 1.0
    verdicts: VerdictMode = "hard"
    mapping: Mapping[str, str] = field(default_factory=dict)
    chunk_size: int = 256
    limit: int | None = None
    compute: str | None = None
    threads: int | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        # Normalise first, then validate (vLLM's SamplingParams order).
        object.__setattr__(self, "data", tuple(Path(p) for p in self.data))
        object.__setattr__(self, "scorers", tuple(dict.fromkeys(self.scorers)))
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "mapping", dict(self.mapping))
        if not self.data:
            raise ValueError("data must name at least one file")
        for path in self.data:
            file_format(path)
            if not path.is_file():
                raise ValueError(f"data file not found: {path}")
        check_out(self.out)
        if not self.scorers:
            raise ValueError("scorers must name at least one scorer")
        for name in self.scorers:
            if name not in SCORERS:
                raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {name!r}")
        RowReader(self.mapping)  # checks the map
        if (
            isinstance(self.max_questions, bool)
            or not isinstance(self.max_questions, int)
            or self.max_questions < 1
        ):
            raise ValueError(f"max_questions must be >= 1, got {self.max_questions!r}")
        if not (
            isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0
        ):
            raise ValueError(f"scale must be > 0, got {self.scale!r}")
        if self.verdicts not in ("hard", "soft"):
            raise ValueError(f"verdicts must be 'hard' or 'soft', got {self.verdicts!r}")
        if not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 0):
            raise ValueError(f"limit must be >= 0, got {self.limit!r}")
        if self.compute is not None and self.compute not in COMPUTES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTES)}, got {self.compute!r}")
        for name in ("threads", "batch_size"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        given = list(self.engine_options())
        if given and self.backend not in ("auto", "transformers"):
            named = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
            are = "is an option" if len(given) == 1 else "are options"
            raise ValueError(
                f"{named} {are} of the transformers engine, not of backend {self.backend!r}"
            )

    def engine_options(self) -> dict[str, Any]:
        """The options given for the engine (`load_engine`'s keyword arguments)."""
        options = {name: getattr(self, name) for name in TRANSFORMERS_OPTIONS}
        return {name: value for name, value in options.items() if value is not None}

    def load_engine(self) -> Engine:
        """The judge these settings name (`evalgpu.engines.load_engine`, cached per process)."""
        from evalgpu.engines import load_engine

        return load_engine(self.model, backend=self.backend, **self.engine_options())

    def config(self, files: list[FileInfo]) -> dict[str, Any]:
        """What a resumed run must match, with its hash (file paths are not in the hash)."""
        return folder_config(
            scorer_ids=[SCORERS[s] for s in self.scorers],
            model=model_name(self.model),
            backend=self.backend,
            options={
                "max_questions": self.max_questions if "summarization" in self.scorers else None,
                "scale": float(self.scale),
                # Only when not the default, so that folders of earlier runs keep their hash.
                **({"verdicts": self.verdicts} if self.verdicts != "hard" else {}),
            },
            mapping=self.mapping,
            data=[
                {"path": str(p), "sha256": f.sha256, "size": f.size}
                for p, f in zip(self.data, files, strict=True)
            ],
        )

    def build_scorers(self, engine: Engine) -> list[Scorer]:
        """The scorers these settings name, on `engine`, in order."""
        scorers: list[Scorer] = []
        for name in self.scorers:
            if name == "summarization":
                scorers.append(
                    create_summarization_scorer(
                        engine,
                        max_questions=self.max_questions,
                        scale=self.scale,
                        verdicts=self.verdicts,
                    )
                )
            else:
                # Every row brings its own context: the scorer's static one (which the factory
                # requires) is never a fallback, so a row without context is named as such.
                recall = create_context_recall_scorer(
                    engine, context=["(per row)"], scale=self.scale, verdicts=self.verdicts
                )
                scorers.append(dataclasses.replace(recall, fallbacks=frozenset()))
        return scorers


def model_name(model: str | None) -> str | None:
    """How a configuration names a judge model: a folder by its name, a preset as given.

    So that a folder is the same judge wherever it lies, and so that an engine loaded from
    Python (`model_path`) and the command line's `--model` name it alike.
    """
    if model is not None and Path(model).is_dir():
        return Path(model).resolve().name
    return model


def folder_config(
    *,
    scorer_ids: list[str],
    model: Any,
    backend: Any,
    options: dict[str, Any],
    mapping: Mapping[str, str],
    data: list[dict[str, Any]],
) -> dict[str, Any]:
    """An output folder's configuration, with its hash: the one shape for CLI and Python.

    Args:
        scorer_ids: the scorers, in order.
        model: the judge's model (`model_name`; None: the default model).
        backend: the judge's backend (the CLI's --backend; from Python, the engine's name).
        options: options that change scores (`max_questions`, `scale`, ...).
        mapping: field -> column.
        data: one `{"path", "sha256", "size"}` per data file (path not hashed).
    """
    names = {v: k for k, v in SCORERS.items()}
    config: dict[str, Any] = {
        "version": CONFIG_VERSION,
        "result_version": RESULT_VERSION,
        "scorers": [names.get(i, i) for i in scorer_ids],
        "scorer_ids": list(scorer_ids),
        "model": model,
        "backend": backend,
        "options": options,
        "map": dict(sorted(mapping.items())),
        "data": data,
    }
    config["hash"] = config_hash(config)
    return config
