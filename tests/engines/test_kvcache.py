"""`GrowingLayer`: the same keys and values as transformers' `DynamicLayer`, written in place."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers.cache_utils import DynamicLayer  # noqa: E402

from evalgpu.engines._kvcache import BLOCK, GrowingLayer, growing_cache  # noqa: E402


def _kv(rows: int, length: int, seed: int) -> torch.Tensor:
    return torch.randn((rows, 2, length, 4), generator=torch.Generator().manual_seed(seed))


def _both(updates) -> tuple[GrowingLayer, DynamicLayer]:
    growing, dynamic = GrowingLayer(), DynamicLayer()
    for layer in (growing, dynamic):
        for k in updates:
            got = layer.update(k, k * 2)
        assert got[0] is layer.keys and got[1] is layer.values
    return growing, dynamic


def test_updates_give_the_keys_and_values_of_a_dynamic_layer():
    # A prefill in two chunks, then decoding steps past the first buffer's room.
    updates = [_kv(3, 100, 0), _kv(3, 60, 1)] + [_kv(3, 1, 2 + i) for i in range(BLOCK + 5)]
    growing, dynamic = _both(updates)
    assert growing.keys.shape == dynamic.keys.shape == (3, 2, 160 + BLOCK + 5, 4)
    assert torch.equal(growing.keys, dynamic.keys)
    assert torch.equal(growing.values, dynamic.values)
    assert growing.get_seq_length() == dynamic.get_seq_length()


def test_a_decoding_step_writes_in_place_until_the_buffer_is_full():
    layer = GrowingLayer()
    layer.update(_kv(2, 10, 0), _kv(2, 10, 1))
    where = layer.keys.data_ptr()
    for i in range(BLOCK):
        layer.update(_kv(2, 1, i), _kv(2, 1, i))
        assert layer.keys.data_ptr() == where  # a view of the same buffer, one column longer
    layer.update(_kv(2, 1, 0), _kv(2, 1, 0))
    assert layer.keys.data_ptr() != where  # full: a new buffer with BLOCK columns of room
    assert layer.keys.shape[-2] == 10 + BLOCK + 1


def test_keys_replaced_from_outside_are_adopted_by_the_next_update():
    # What the decode loop does when rows join (cat), leave (index) or share a prefix (repeat).
    growing, dynamic = _both([_kv(3, 20, 0), _kv(3, 1, 1)])
    keep = torch.tensor([0, 2])
    for layer in (growing, dynamic):
        layer.keys, layer.values = layer.keys[keep, :, 5:], layer.values[keep, :, 5:]
        layer.batch_repeat_interleave(2)
        layer.update(_kv(4, 1, 2), _kv(4, 1, 3))
        layer.keys = torch.cat([layer.keys, layer.keys[:1]])
        layer.values = torch.cat([layer.values, layer.values[:1]])
        layer.update(_kv(5, 1, 4), _kv(5, 1, 5))
    assert growing.keys.shape == (5, 2, 18, 4)
    assert torch.equal(growing.keys, dynamic.keys)
    assert torch.equal(growing.values, dynamic.values)


def test_the_cache_makes_growing_layers_as_the_model_reaches_them():
    cache = growing_cache()
    for layer in range(3):
        cache.update(_kv(1, 4, layer), _kv(1, 4, layer), layer)
    assert [type(layer) for layer in cache.layers] == [GrowingLayer] * 3
    assert cache.get_seq_length() == 4
