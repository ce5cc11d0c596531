"""Dynamic int8 Linear layers that quantize each token's activations on its own.

torch.ao's dynamic Linear quantizes its whole input with one scale, taken from the input's
range: one token's output then depends on the values of every other token in the call (the rows
decoded beside it, the prefill chunk). `RowwiseInt8Linear` runs the same fbgemm kernel (int8
weights per output channel) on each token's activations divided by the token's largest
magnitude, with two fixed rows holding +1 and -1 appended so that the kernel's range is [-1, 1]
in every call; the output is scaled back. Each token is quantized in steps of its own range:
its output is bit-identical alone and beside any others (tests/engines/test_int8.py), and
nearer float32 (a Linear of Qwen2.5-1.5B's MLP shape with one outlier channel: relative error
0.10, per batch 0.14; a wave of the 1.5B: 6.5 % of next-token choices differ from float32's,
per batch 22 %, docs/BENCHMARKS.md). What it does not remove: float32's own rounding differs by
~1e-5 between a prompt prefilled whole or in chunks, or beside padding, and where that moves an
activation across a quantization step the difference grows through the layers, so int8 replies
can still depend on the batch. Cost, AVX2 EPYC, one thread: +3 % for 1,024 tokens, +0.5 ms a
call for 8 (the extra elementwise passes).

Imported only when int8 is loaded (torch is a backend library).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from torch.ao.quantization import per_channel_dynamic_qconfig

__all__ = ["RowwiseInt8Linear"]


class RowwiseInt8Linear(torch.nn.Module):
    """A float32 Linear with int8 weights per output channel, activations per token."""

    bias: torch.Tensor | None
    pin: torch.Tensor

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # The kernel without the bias: it is added after the token's scale is restored.
        plain = torch.nn.Linear(self.in_features, self.out_features, bias=False, device="meta")
        plain.weight = linear.weight
        plain.qconfig = per_channel_dynamic_qconfig  # type: ignore[assignment]
        # fbgemm's packed weight (a torch ScriptObject, not a parameter: the model is never
        # saved in int8).
        self._packed = cast(Any, DynamicLinear).from_float(plain)._packed_params._packed_params
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.register_buffer("bias", bias)
        pin = torch.zeros(2, self.in_features)
        pin[:, 0] = torch.tensor([1.0, -1.0])
        self.register_buffer("pin", pin)  # the two rows that fix the kernel's range

    def weight(self) -> torch.Tensor:
        """The quantized weight (per-channel qint8), as torch.ao's dynamic Linear gives it."""
        return cast(torch.Tensor, torch.ops.quantized.linear_unpack(self._packed)[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        scale = rows.abs().amax(dim=1, keepdim=True).clamp_min_(torch.finfo(rows.dtype).tiny)
        unit = torch.cat([rows / scale, self.pin])
        out = torch.ops.quantized.linear_dynamic(unit, self._packed, True)[: len(rows)]
        out = out * scale if self.bias is None else torch.addcmul(self.bias, out, scale)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, per token"
