"""What the transformers engine computes in: chosen by what the CPU has, or forced.

Two computes on a CPU, measured on a 2-core AMD EPYC with AVX512-BF16, one thread, on
Qwen2.5-Coder-1.5B (docs/DECISIONS.md, 2026-12-01, "CPU engine speed"):

- **bfloat16**: the weights as stored; 99.5 % of next-token choices are float32's, and most
  replies. Native where the CPU has AVX512-BF16 or AMX; elsewhere it is emulated, and slower
  than float32 by far;
- **float32**: the reference, and the fallback where the CPU has no native bfloat16.

(An int8 compute went with the engine's other speed machinery once vLLM's CPU build became the
CPU default where it runs: it was lossy, and a row's replies depended on the rows beside it.)

Whatever the body computes in, the last projection (`lm_head`) and the final norm compute in
float32: in bfloat16, logits carry about 3 significant digits, so the probabilities of two
verdict tokens ("true"/"false") tie, and they are what soft verdicts are made of.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

__all__ = [
    "COMPUTES",
    "Checkpoint",
    "choose_cpu_compute",
    "cpu_flags",
    "cpu_threads",
    "load_model",
    "resolve_compute",
]

COMPUTES = ("auto", "bfloat16", "float32")
"""The values of the engine's `compute` option."""


def cpu_threads(threads: int | None = None) -> int:
    """The CPU threads an engine computes with: `threads`, or every core this process may use
    (`os.sched_getaffinity`: a container's or `taskset`'s share, not the machine's count).

    Beside another busy process, fewer threads than cores are faster: each step's threads wait
    for the slowest of them (docs/BENCHMARKS.md has the measurement), so `threads=` is how a
    shared machine is shared.

    Raises:
        ValueError: `threads` < 1.
    """
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads!r}")
        return threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS has no affinity
        return max(1, os.cpu_count() or 1)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (`flags` line of /proc/cpuinfo), or none where it is unreadable."""
    try:
        with cpuinfo.open() as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def choose_cpu_compute(flags: Collection[str]) -> tuple[str, str]:
    """The compute for a CPU with these flags, and why (a few words for the load note).

    bfloat16 where the CPU multiplies it natively (AMX or AVX512-BF16), else float32.
    """
    if "amx_bf16" in flags:
        return "bfloat16", "the CPU has AMX-BF16"
    if "avx512_bf16" in flags:
        return "bfloat16", "the CPU has AVX512-BF16"
    return "float32", "the CPU has no native bfloat16"


def resolve_compute(compute: str, dtype: str | None, device: str) -> tuple[str, str]:
    """The compute to load (a torch dtype name) and why, for the engine's options."""
    if compute != "auto":
        return compute, "asked for"
    if dtype not in (None, "auto"):
        return str(dtype), "the dtype asked for"
    if device != "cpu":
        return "bfloat16", f"the default on {device}"
    return choose_cpu_compute(cpu_flags() or _flags_from_torch())


def _flags_from_torch() -> frozenset[str]:
    """Where /proc/cpuinfo is missing: torch's own check for native bfloat16 (oneDNN's)."""
    import torch

    try:
        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        native = False
    return frozenset({"avx512_bf16"}) if native else frozenset()


def load_model(
    model_path: str, compute: str, device: str, dtype: Any, attn_implementation: str | None = None
) -> Any:
    """Load the model for `compute` ("bfloat16", "float32", or a torch dtype name).

    The model is first loaded in its stored dtype, which maps the weights file without reading
    it; a parameter that must change dtype is then read from the file into its new dtype, one
    tensor at a time (`Checkpoint`). So a float32 model from a bfloat16 file peaks at its own
    size: read through the mapping, the file's pages would count in RSS until the end of the
    load (measured on Qwen2.5-Coder-1.5B: 10.5 GB peak for 7.1 GB of float32 weights).

    Args:
        model_path: a transformers model folder.
        compute: the resolved compute (not "auto").
        device: where the model runs.
        dtype: the torch dtype of the body.
        attn_implementation: transformers' attention ("sdpa", "eager"; None: its default).

    Returns:
        The model, in eval mode on `device`, with a float32 head.
    """
    from transformers import AutoModelForCausalLM

    auto: Any = AutoModelForCausalLM
    model = auto.from_pretrained(model_path, dtype="auto", attn_implementation=attn_implementation)
    checkpoint = Checkpoint(Path(model_path))
    _cast(model, "", checkpoint, dtype)
    model.config.dtype = dtype  # as `from_pretrained(dtype=...)` records it
    _untie_head(model)
    _float32_head(model, checkpoint)
    return model.to(device).eval()


_STORED_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
"""The safetensors dtypes a parameter is read from (others are cast through the mapping)."""


class Checkpoint:
    """The tensors of a model folder's safetensors files, read with plain file reads.

    Only the headers are read up front; `read` takes one tensor from disk into a buffer of
    its own and casts it, so no page of the file stays mapped in the process.
    """

    def __init__(self, folder: Path) -> None:
        self._where: dict[str, tuple[Path, int, int, str, list[int]]] = {}
        for file in sorted(folder.glob("*.safetensors")):
            with file.open("rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size))
            for name, info in header.items():
                if name != "__metadata__" and info["dtype"] in _STORED_DTYPES:
                    start, end = info["data_offsets"]
                    where = (file, 8 + size + start, end - start, info["dtype"], info["shape"])
                    self._where[name] = where

    def read(self, name: str, like: Any, dtype: Any) -> Any:
        """The stored tensor `name` in `dtype`, or `like` cast where the files do not hold it
        with `like`'s shape (a name the model renames, say)."""
        import torch

        where = self._where.get(name)
        if where is None:
            return like.to(dtype)
        file, offset, size, stored, shape = where
        if list(like.shape) != shape or not size:
            return like.to(dtype)
        raw = bytearray(size)
        with file.open("rb") as f:
            f.seek(offset)
            f.readinto(raw)
        tensor = torch.frombuffer(raw, dtype=getattr(torch, _STORED_DTYPES[stored]))
        return tensor.reshape(shape).to(dtype)


def _cast(module: Any, prefix: str, checkpoint: Checkpoint, dtype: Any) -> None:
    """Every parameter of `module` (named under `prefix`) not yet in `dtype`, read into it."""
    for name, param in module.named_parameters(prefix=prefix):
        if param.dtype != dtype:
            param.data = checkpoint.read(name, param.data, dtype)


def _untie_head(model: Any) -> None:
    """Give `lm_head` its own weight where it shares the embeddings' in a dtype other than
    float32: the head computes in float32, the embeddings stay in the body's dtype."""
    import torch

    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and head.weight is embed.weight and head.weight.dtype != torch.float32:
        head.weight = torch.nn.Parameter(embed.weight.detach().clone(), requires_grad=False)
        model.config.tie_word_embeddings = False


def _float32_head(model: Any, checkpoint: Checkpoint) -> None:
    """The final norm and `lm_head` in float32, fed float32: logits with float32 precision."""
    import torch

    def to_float32(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (args[0].float(), *args[1:])

    names = {id(module): name for name, module in model.named_modules()}
    head = model.get_output_embeddings()
    norm = getattr(getattr(model, "model", None), "norm", None)
    # Llama-like models: the final norm's output would round to the body's dtype.
    for module in (head, norm) if norm is not None else (head,):
        _cast(module, names[id(module)], checkpoint, torch.float32)
        module.register_forward_pre_hook(to_float32)
