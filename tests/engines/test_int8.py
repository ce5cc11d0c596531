"""`RowwiseInt8Linear`: int8 weights per channel, each token's activations quantized on its own,
so that a token's output does not depend on the tokens computed beside it."""

from __future__ import annotations

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from torch.ao.quantization import per_channel_dynamic_qconfig

from evalgpu.engines._int8 import RowwiseInt8Linear


def _linear(bias: bool) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(64, 48, bias=bias)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
def test_a_tokens_output_does_not_depend_on_the_tokens_beside_it(bias):
    linear = _linear(bias)
    rowwise = RowwiseInt8Linear(linear)
    x = torch.randn(5, 64)
    loud = torch.randn(1, 64) * 100
    with torch.inference_mode():
        batched = rowwise(x)
        alone = torch.cat([rowwise(row[None]) for row in x])
        beside = rowwise(torch.cat([x, loud]))[:-1]
        as_3d = rowwise(x.reshape(1, 5, 64))
    assert torch.equal(alone, batched) and torch.equal(beside, batched)
    assert as_3d.shape == (1, 5, 48) and torch.equal(as_3d[0], batched)
    # Why: torch.ao's dynamic Linear takes one scale from the whole input.
    linear.qconfig = per_channel_dynamic_qconfig  # type: ignore[assignment]
    per_batch = DynamicLinear.from_float(linear)
    with torch.inference_mode():
        assert not torch.equal(per_batch(torch.cat([x, loud]))[:-1], per_batch(x))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
def test_the_output_is_the_linear_to_within_its_quantization_steps(bias):
    linear = _linear(bias)
    rowwise = RowwiseInt8Linear(linear)
    x = torch.randn(16, 64)
    x[:, 3] *= 30  # an outlier channel, as in LLM activations
    with torch.inference_mode():
        exact, out = linear(x), rowwise(x)
    # Each weight is within half its channel's step; each activation within half a step of
    # 2/127 of its token's largest magnitude (7-bit codes over [-1, 1]).
    weight = rowwise.weight()
    w_step = weight.q_per_channel_scales().float()[None, :]
    x_step = x.abs().amax(dim=1, keepdim=True) * 2 / 127
    w_abs = weight.dequantize().abs().sum(dim=1)[None, :]
    bound = w_step / 2 * x.abs().sum(dim=1, keepdim=True) + x_step / 2 * w_abs
    assert bool(((out - exact).abs() <= bound * 1.001 + 1e-6).all())
    assert (out - exact).abs().max() > 0  # it is quantized


def test_a_zero_token_gives_the_bias():
    linear = _linear(True)
    with torch.inference_mode():
        out = RowwiseInt8Linear(linear)(torch.zeros(2, 64))
    assert torch.equal(out, linear.bias.detach().expand(2, 48))
