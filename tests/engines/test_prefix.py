"""`PrefixStore`: longest match, byte budget, expiry after two waves, no thrash on a scan,
copies not views (pure: caches of made-up tensors, no model)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from evalgpu.engines import _prefix
from evalgpu.engines._prefix import PrefixStore, auto_budget, common_prefix

LAYERS, HEADS, DIM = 2, 2, 4
TOKEN_BYTES = LAYERS * 2 * HEADS * DIM * 4  # keys and values in float32: 128 bytes a token


def batch_cache(rows: int, length: int) -> Any:
    """A stand-in for the decode loop's cache: `layers` with `keys` / `values` of shape
    (rows, heads, length, dim), each value naming its layer, row and column."""
    layers = []
    for layer in range(LAYERS):
        base = torch.arange(length, dtype=torch.float32).view(1, 1, length, 1)
        keys = (base + 1000 * layer + 100_000 * torch.arange(rows).view(rows, 1, 1, 1)).expand(
            rows, HEADS, length, DIM
        )
        layers.append(SimpleNamespace(keys=keys.contiguous(), values=-keys.contiguous()))
    return SimpleNamespace(layers=layers)


def tokens(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def test_common_prefix_counts_leading_equal_tokens():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([5], [6]) == 0
    assert common_prefix([], [1]) == 0
    long = list(range(1000))
    assert common_prefix(long, [*long[:637], -1, *long[638:]]) == 637


def test_longest_finds_the_entry_of_the_longest_common_prefix():
    store = PrefixStore(1 << 20)
    store.new_wave()
    system, source_a, source_b = tokens(0, 20), tokens(100, 50), tokens(200, 50)
    store.put(system + source_a + [1, 2], batch_cache(1, 72))
    store.put(system + source_b + [3], batch_cache(1, 71))
    entry, n = store.longest(system + source_b + [9, 9, 9])
    assert entry is not None and entry.tokens == system + source_b + [3]
    assert n == 70
    entry, n = store.longest([*system, 7])  # both share the system prompt: either will do
    assert n == 20
    assert store.longest([42, 43]) == (None, 0)


def test_a_stored_entry_is_a_copy_of_its_row_not_a_view_of_the_batch_cache():
    store = PrefixStore(1 << 20)
    store.new_wave()
    cache = batch_cache(3, 40)
    assert store.put(tokens(0, 30), cache, row=1)
    (entry,) = store.entries()
    keys, values = entry.layers[1]
    assert keys.shape == (1, HEADS, 30, DIM)
    assert torch.equal(keys, cache.layers[1].keys[1:2, :, :30])
    assert torch.equal(values, cache.layers[1].values[1:2, :, :30])
    before = keys.clone()
    for layer in cache.layers:  # the decode loop writes its cache in place
        layer.keys.fill_(7.0)
        layer.values.fill_(7.0)
    assert torch.equal(keys, before)
    assert all(
        k.data_ptr() != layer.keys.data_ptr()
        for (k, _), layer in zip(entry.layers, cache.layers, strict=True)
    )


def test_the_cache_it_hands_out_is_a_copy_too():
    store = PrefixStore(1 << 20)
    store.new_wave()
    store.put(tokens(0, 30), batch_cache(1, 30))
    (entry,) = store.entries()
    cache = store.cache(entry, 20)
    assert cache.layers[0].keys.shape == (1, HEADS, 20, DIM)
    assert torch.equal(cache.layers[0].keys, entry.layers[0][0][:, :, :20])
    cache.layers[0].keys.fill_(7.0)
    assert entry.layers[0][0][0, 0, 0, 0] == 0.0


def test_an_entry_over_the_budget_is_not_stored():
    store = PrefixStore(30 * TOKEN_BYTES)
    store.new_wave()
    assert not store.put(tokens(0, 31), batch_cache(1, 31))
    assert len(store) == 0 and store.nbytes == 0
    assert store.put(tokens(0, 30), batch_cache(1, 30))
    assert store.nbytes == 30 * TOKEN_BYTES


def test_entries_unused_in_the_last_two_waves_are_dropped():
    store = PrefixStore(1 << 20)
    store.new_wave()  # wave 1
    store.put(tokens(0, 20), batch_cache(1, 20))
    store.put(tokens(100, 20), batch_cache(1, 20))
    store.new_wave()  # wave 2: the first entry is reused
    entry, n = store.longest(tokens(0, 25))
    assert entry is not None and n == 20
    store.cache(entry, n)
    store.new_wave()  # wave 3
    assert len(store) == 2  # wave 1 is one of the two waves before it
    store.new_wave()  # wave 4: the second entry was last used in wave 1
    assert [e.tokens for e in store.entries()] == [tokens(0, 20)]
    store.new_wave()  # wave 5: the first was last used in wave 2
    assert len(store) == 0 and store.nbytes == 0


def test_a_scan_larger_than_the_budget_keeps_what_it_stored_first():
    # Five 20-token prefixes into a store that holds three: the last two are refused rather
    # than evicting the first ones, which then serve the next wave.
    store = PrefixStore(60 * TOKEN_BYTES)
    store.new_wave()
    stored = [store.put(tokens(100 * i, 20), batch_cache(1, 20)) for i in range(5)]
    assert stored == [True, True, True, False, False]
    store.new_wave()
    hits = [store.longest([*tokens(100 * i, 20), 1])[1] for i in range(5)]
    assert hits == [20, 20, 20, 0, 0]


def test_a_full_store_evicts_the_least_recently_used_entries_of_earlier_waves():
    store = PrefixStore(60 * TOKEN_BYTES)
    store.new_wave()
    for i in range(3):
        store.put(tokens(100 * i, 20), batch_cache(1, 20))
    store.new_wave()
    entry, n = store.longest(tokens(0, 20))  # the oldest, used again in this wave
    assert entry is not None
    store.cache(entry, n)
    assert store.put(tokens(500, 20), batch_cache(1, 20))  # evicts prefix 100 (least recent)
    assert store.put(tokens(600, 20), batch_cache(1, 20))  # evicts prefix 200
    assert not store.put(tokens(700, 20), batch_cache(1, 20))  # all of this wave: no room
    assert sorted(e.tokens[0] for e in store.entries()) == [0, 500, 600]
    assert store.nbytes == 60 * TOKEN_BYTES


def test_a_longer_entry_replaces_the_ones_it_extends():
    store = PrefixStore(1 << 20)
    store.new_wave()
    store.put(tokens(0, 20), batch_cache(1, 20))
    store.put(tokens(0, 30), batch_cache(1, 30))
    assert [len(e.tokens) for e in store.entries()] == [30]
    assert store.nbytes == 30 * TOKEN_BYTES
    assert store.put(tokens(0, 30), batch_cache(1, 30))  # the same tokens: kept once
    assert len(store) == 1


def test_the_budget_must_be_positive():
    with pytest.raises(ValueError, match="budget_bytes must be > 0, got 0"):
        PrefixStore(0)


def test_a_row_with_padding_among_its_tokens_is_stored_without_it():
    # A group member's cache: the group's head (3 columns), left padding (3), its tail (4).
    store = PrefixStore(1 << 20)
    store.new_wave()
    cache = batch_cache(2, 10)
    columns = torch.tensor([0, 1, 2, 6, 7, 8, 9])
    assert store.put(tokens(0, 7), cache, row=1, columns=columns)
    (entry,) = store.entries()
    keys, values = entry.layers[0]
    assert keys[0, 0, :, 0].tolist() == [100_000 + c for c in [0, 1, 2, 6, 7, 8, 9]]
    assert torch.equal(values, cache.layers[0].values[1:2, :, columns])
    assert store.nbytes == 7 * TOKEN_BYTES
    cache.layers[0].keys.fill_(7.0)
    assert keys[0, 0, 0, 0] == 100_000
    with pytest.raises(ValueError, match="columns must hold one column per token, got 7 for 8"):
        store.put(tokens(0, 8), cache, row=1, columns=columns)


def test_clear_forgets_every_entry_and_its_bytes():
    store = PrefixStore(1 << 20)
    store.new_wave()
    store.put(tokens(0, 20), batch_cache(1, 20))
    store.put(tokens(100, 20), batch_cache(1, 20))
    assert len(store) == 2 and store.nbytes > 0
    store.clear()
    assert len(store) == 0 and store.nbytes == 0
    assert store.longest(tokens(0, 25)) == (None, 0)


def test_the_default_budget_is_a_quarter_of_the_available_memory(monkeypatch):
    monkeypatch.setattr(_prefix, "_mem_available", lambda: 8 << 30)
    assert auto_budget("cpu") == 2 << 30


def test_the_default_budget_is_never_below_its_floor(monkeypatch):
    monkeypatch.setattr(_prefix, "_mem_available", lambda: 100 << 20)
    assert auto_budget("cpu") == 256 << 20


def test_the_available_memory_is_read_from_meminfo():
    # This machine has a /proc/meminfo; the value is positive and below the total.
    with open("/proc/meminfo") as meminfo:
        total = int(next(meminfo).split()[1]) << 10
    assert 0 < _prefix._mem_available() <= total
