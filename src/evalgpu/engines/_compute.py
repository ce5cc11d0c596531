"""What the transformers engine computes in: chosen by what the CPU has, or forced.

Three computes on a CPU, measured on a 2-core AMD EPYC with AVX512-BF16, one thread, on
Qwen2.5-Coder-1.5B (docs/BENCHMARKS.md, "CPU engine speed"):

- **bfloat16**: the weights as stored. Prefill ~130-140 tok/s, a wave of 8 at 16 output
  tok/s; 99.5 % of next-token choices are float32's, and most replies (5 to 8 of 8). Native
  where the CPU has AVX512-BF16 or AMX; elsewhere it is emulated (on an AVX2-only EPYC one
  wave had not finished after 14 minutes);
- **int8**: every Linear of the body quantized dynamically (`torch.ao`, int8 weights per
  output channel, activations per batch; fbgemm kernels, AVX2). The fastest here (21.5
  tok/s), but lossy: 7 or 8 of 8 replies differ from float32's, 22 % of next-token choices.
  Only on request;
- **float32**: the reference, and the fallback. Slow on this AMD CPU (prefill 22-38 tok/s, a
  wave at 6 tok/s: its float32 matmuls do not take an AVX-512 path); on an AVX2-only EPYC
  a wave at 5 tok/s, where int8 gives 10.6.

Whatever the body computes in, the last projection (`lm_head`) and the final norm compute in
float32: in bfloat16, logits carry about 3 significant digits, so the probabilities of two
verdict tokens ("true"/"false") tie, and they are what soft verdicts are made of.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any, cast

__all__ = [
    "COMPUTES",
    "DEFAULT_THREADS",
    "choose_cpu_compute",
    "cpu_flags",
    "load_model",
    "resolve_compute",
]

COMPUTES = ("auto", "bfloat16", "int8", "float32")
"""The values of the engine's `compute` option."""

DEFAULT_THREADS = 1
"""Torch threads on a CPU. Measured on 2 cores (bfloat16, a wave of 8 requests): 1 thread
10.4 output tok/s alone and 8.4 beside a busy process; 2 threads 7.3 with other jobs on the
machine and 1.4 beside a busy process (their barriers wait for the busy core). One thread
loses little on a quiet machine and never collapses on a shared one; pass `threads=` on a
machine of your own."""


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

    bfloat16 where the CPU multiplies it natively (AMX or AVX512-BF16), else float32: int8 is
    faster but changes most replies (see the module docstring), so it is never chosen for a
    user; `compute="int8"` asks for it.
    """
    if "amx_bf16" in flags:
        return "bfloat16", "the CPU has AMX-BF16"
    if "avx512_bf16" in flags:
        return "bfloat16", "the CPU has AVX512-BF16"
    return "float32", "the CPU has no native bfloat16"


def resolve_compute(compute: str, dtype: str | None, device: str) -> tuple[str, str]:
    """The compute to load (a torch dtype name, or "int8") and why, for the engine's options.

    Raises:
        ValueError: int8 asked for on another device than the CPU.
    """
    if compute != "auto":
        if compute == "int8" and device != "cpu":
            raise ValueError(f"compute='int8' runs on a CPU only, got device={device!r}")
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
    """Load the model for `compute` ("bfloat16", "int8", "float32", or a torch dtype name).

    Args:
        model_path: a transformers model folder.
        compute: the resolved compute (not "auto").
        device: where the model runs.
        dtype: the torch dtype of the body for computes other than int8.
        attn_implementation: transformers' attention ("sdpa", "eager"; None: its default).

    Returns:
        The model, in eval mode on `device`, with a float32 head.
    """
    from transformers import AutoModelForCausalLM

    auto: Any = AutoModelForCausalLM
    if compute == "int8":
        # Loaded in the stored dtype, then quantized one Linear at a time: a float32 copy of
        # the whole model (7 GB for 1.5B parameters) never exists.
        model = auto.from_pretrained(
            model_path, dtype="auto", attn_implementation=attn_implementation
        )
        _untie_head(model)
        _quantize_linears(model)
        model.float()  # embeddings and norms: float32 (quantized modules ignore it)
    else:
        model = auto.from_pretrained(
            model_path, dtype=dtype, attn_implementation=attn_implementation
        )
        _untie_head(model)
    _float32_head(model)
    return model.to(device).eval()


def _untie_head(model: Any) -> None:
    """Give `lm_head` its own weight when it shares the embeddings' (it becomes float32)."""
    import torch

    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and head.weight is embed.weight:
        head.weight = torch.nn.Parameter(embed.weight.detach().clone(), requires_grad=False)
        model.config.tie_word_embeddings = False


def _float32_head(model: Any) -> None:
    """The final norm and `lm_head` in float32, fed float32: logits with float32 precision."""

    def to_float32(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (args[0].float(), *args[1:])

    head = model.get_output_embeddings()
    head.float()
    head.register_forward_pre_hook(to_float32)
    norm = getattr(getattr(model, "model", None), "norm", None)
    if norm is not None:  # Llama-like models: the norm's output rounds to the body's dtype
        norm.float()
        norm.register_forward_pre_hook(to_float32)


def _quantize_linears(model: Any) -> None:
    """Every Linear but `lm_head` replaced by a dynamic int8 Linear (per-channel weights)."""
    import torch
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    head = model.get_output_embeddings()
    # Parents only: a list holding the Linear modules themselves would keep every float32
    # copy alive until the end (measured: 9.1 GB peak instead of 6).
    parents = [m for m in model.modules() if any(type(c) is torch.nn.Linear for c in m.children())]
    for parent in parents:
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and child is not head:
                linear: Any = child.float()
                linear.qconfig = per_channel_dynamic_qconfig
                setattr(parent, name, cast(Any, DynamicLinear).from_float(linear))
                del child, linear
