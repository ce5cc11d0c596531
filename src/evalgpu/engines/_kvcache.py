"""The decode loop's KV cache: a transformers `DynamicCache` whose layers grow in blocks.

transformers' `DynamicLayer` appends a step's keys and values with `torch.cat`: every decoding
step copies the whole cache of every layer into a new, one-column-longer tensor (on the default
model, 28 layers x 2 tensors of 8 rows x 2 heads x ~1,000 columns x 128, about 230 MB a step in
bfloat16), and on a CPU each new tensor of that size is a fresh mapping whose pages fault in
(`evalgpu.engines._heap`). `GrowingLayer` keeps each tensor in a buffer with room for `BLOCK`
more columns and writes a step's column in place; `keys`/`values` are views of the filled part,
so attention reads exactly what it read before. A buffer is reallocated only when it is full,
or when the loop replaces `keys`/`values` (rows join or leave the batch, a shared prefix is
copied to a group's rows): the next update adopts the new tensors into a buffer of their own.
"""

from __future__ import annotations

from typing import Any

from transformers.cache_utils import Cache, DynamicLayer

__all__ = ["BLOCK", "GrowingLayer", "growing_cache"]

BLOCK = 256
"""Columns of room a buffer gets beyond what it holds when it is (re)allocated."""


class GrowingLayer(DynamicLayer):  # type: ignore[no-untyped-call]
    """A `DynamicLayer` whose keys and values are views of buffers with room to grow."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._key_buffer: Any = None
        self._value_buffer: Any = None

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        """Write the new columns after the cached ones; the keys and values so far (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys: Any = self.keys
        values: Any = self.values
        new = key_states.shape[-2]
        length = keys.shape[-2] if keys.dim() == 4 else 0  # 0: lazy_initialization's empty
        if not self._owns(keys, values) or length + new > self._key_buffer.shape[-2]:
            self._key_buffer = _room(keys, length, key_states, new)
            self._value_buffer = _room(values, length, value_states, new)
        self._key_buffer[:, :, length : length + new] = key_states
        self._value_buffer[:, :, length : length + new] = value_states
        self.keys = self._key_buffer[:, :, : length + new]
        self.values = self._value_buffer[:, :, : length + new]
        return self.keys, self.values

    def _owns(self, keys: Any, values: Any) -> bool:
        """Whether `keys`/`values` are still the views of our buffers that `update` left."""
        mine, theirs = (self._key_buffer, self._value_buffer), (keys, values)
        return mine[0] is not None and all(
            t.dim() == 4
            and t.data_ptr() == b.data_ptr()
            and t.stride() == b.stride()
            and t.shape[:2] == b.shape[:2]
            for t, b in zip(theirs, mine, strict=True)
        )


def _room(held: Any, length: int, like: Any, new: int) -> Any:
    """A buffer holding the `length` columns of `held` with room for `new` + BLOCK more."""
    import torch

    rows, heads, _, dim = like.shape
    buffer = torch.empty(
        (rows, heads, length + new + BLOCK, dim), dtype=like.dtype, device=like.device
    )
    if length:
        buffer[:, :, :length] = held
    return buffer


def growing_cache() -> Cache:
    """An empty cache whose layers (made as the model reaches them) are `GrowingLayer`s."""
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache
