"""The transformers engine's prefix store: KV caches of prompt prefixes kept across waves.

Why: the decode loop shares a prefix only among the prompts of one `generate()` call (one
wave, `evalgpu.engines._decode.prefill_groups`), but the scorers' calls about one source come
in successive waves: the questions call first, then one verify call per claim and per
question, each prompt the same instructions and source followed by what varies. On a CPU the
prefill of a ~1,000-token source is most of a wave's time, and without a store every wave
computes it again. `PrefixStore` keeps the KV cache of exactly a token sequence, one row: each
prefill group's head (its shared prefix), and each prompt computed mostly apart from its
group's head (see `Decoder._store_members`); a later group whose head starts with the same
tokens copies that cache and computes only the rest.

Bounded two ways, so that memory stays flat over a run of many chunks:

- a byte budget. A put that does not fit first evicts the least recently used entries of
  earlier waves; entries used in the current wave are never evicted for it, and when there
  is still no room the new entry is not stored. So a wave that puts more than the budget
  (a sequential scan) keeps the entries it stored first, which get their hits in the next
  wave, instead of each put evicting the one before it and no entry ever being hit;
- an age: at the start of each wave, entries unused in the two waves before it are dropped
  (a chunk's sources are not seen again once its waves are done).

Entries hold copies, never views of the batch cache: the decode loop writes into its cache in
place (`evalgpu.engines._kvcache.GrowingLayer`), so a view could change under an entry. Copies
of shared prefixes are not shared between entries (a source's questions prompt and its verify
calls' head each hold the source): simple, at the cost of budget.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MIN_REUSE", "PrefixEntry", "PrefixStore", "auto_budget", "common_prefix"]

MIN_REUSE = 16
"""Fewest matching tokens for which a stored cache is copied, and fewest tokens of an entry:
fewer save next to nothing (a chat template's opening tokens) for a copy of every layer.
A guard, not a measured optimum."""


AUTO_SHARE = 4
"""`auto_budget` gives the store a quarter of the memory available when the engine loads."""
AUTO_MIN = 256 << 20


def auto_budget(device: str) -> int:
    """The store's byte budget when none is given: a quarter of the memory available now
    (a GPU's free memory, or the system's `MemAvailable`), at least 256 MiB.

    Why sized by the machine and not a constant: the store pays off only when it holds every
    source of a chunk from its questions wave to its verify wave, and a chunk of the default
    256 rows holds up to 256 sources (about 25 MB each for a 1,000-token source and a 1.5 B
    judge: 28 layers x 2 key-value heads x 128 x 2 bytes x 2, keys and values, per token).
    A fixed 1 GiB holds about 40 of them, fewer than the 60 sources of a 120-row FRANK chunk.
    A quarter leaves room for a second process and for the decode batch.
    """
    if device.startswith("cuda"):
        import torch

        free = int(torch.cuda.mem_get_info(torch.device(device))[0])
    else:
        free = _mem_available()
    return max(AUTO_MIN, free // AUTO_SHARE)


def _mem_available() -> int:
    """The system's available memory in bytes (`/proc/meminfo`; elsewhere, 4 GiB)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 4 << 30


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists (a binary search over slice equality,
    which compares in C: a store lookup compares every entry with a ~1,000-token head)."""
    a = a if isinstance(a, list) else list(a)
    b = b if isinstance(b, list) else list(b)
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # a[:lo] == b[:lo] and a[:hi + 1] != b[:hi + 1]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class PrefixEntry:
    """One stored prefix: its tokens and the KV cache of exactly those tokens, for one row."""

    tokens: list[int]
    layers: list[tuple[Any, Any]]
    """Per layer, keys and values of shape (1, heads, len(tokens), head_dim), copies."""
    nbytes: int
    wave: int
    """The last wave that stored or reused it."""


class PrefixStore:
    """KV caches of prompt prefixes, kept across waves within a byte budget.

    Args:
        budget_bytes: the most bytes of keys and values held (> 0).
        min_reuse: the fewest matching tokens for which `Decoder` reuses an entry.
    """

    def __init__(self, budget_bytes: int, *, min_reuse: int = MIN_REUSE) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be > 0, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.min_reuse = min_reuse
        self.wave = 0
        self.nbytes = 0
        # Least recently used first: a use moves an entry to the end, so the entries of
        # earlier waves come before those of the current one.
        self._entries: OrderedDict[tuple[int, ...], PrefixEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[PrefixEntry]:
        """The entries, least recently used first."""
        return list(self._entries.values())

    def clear(self) -> None:
        """Forget every entry."""
        for key in list(self._entries):
            self._drop(key)

    def new_wave(self) -> None:
        """Start a wave: drop the entries that neither of the two waves before it used."""
        self.wave += 1
        for key in [k for k, e in self._entries.items() if e.wave < self.wave - 2]:
            self._drop(key)

    def longest(self, tokens: Sequence[int]) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest prefix with `tokens`, and that length (None, 0: none).

        A lookup is not a use: `use` marks the entry the caller reuses.
        """
        best: PrefixEntry | None = None
        length = 0
        for entry in self._entries.values():
            n = common_prefix(entry.tokens, tokens)
            if n > length:
                best, length = entry, n
        return best, length

    def use(self, entry: PrefixEntry) -> None:
        """Mark `entry` used in this wave (most recently used; kept two more waves)."""
        entry.wave = self.wave
        self._entries.move_to_end(tuple(entry.tokens))

    def cache(self, entry: PrefixEntry, length: int) -> Any:
        """A new decode-loop cache (`growing_cache`) holding a copy of `entry`'s first
        `length` tokens; marks the entry used."""
        from evalgpu.engines._kvcache import growing_cache

        self.use(entry)
        cache = growing_cache()
        for i, (keys, values) in enumerate(entry.layers):
            # GrowingLayer.update copies into a buffer of its own: the entry is not aliased.
            cache.update(keys[:, :, :length], values[:, :, :length], i)
        return cache

    def put(self, tokens: Sequence[int], cache: Any, row: int = 0, columns: Any = None) -> bool:
        """Store a copy of `row`'s keys and values of `tokens` in `cache`, if it fits; whether
        it was stored.

        `columns` (an index tensor) are the row's cache columns that hold `tokens`, in order,
        when padding sits among them (a group's member: its head, then its left-padded
        tail); None: the first `len(tokens)`. An entry for the same tokens is only marked
        used. Entries whose tokens are a prefix of `tokens` are dropped when the new one is
        stored: it serves every lookup they would.
        """
        key = tuple(tokens)
        if key in self._entries:
            self.use(self._entries[key])
            return True
        n = len(key)
        if columns is not None and len(columns) != n:
            raise ValueError(f"columns must hold one column per token, got {len(columns)} for {n}")
        heads = [(layer.keys, layer.values) for layer in cache.layers]
        nbytes = sum(
            n
            * (k[0, :, 0].nelement() * k.element_size() + v[0, :, 0].nelement() * v.element_size())
            for k, v in heads
        )
        subsumed = [k for k in self._entries if len(k) < n and key[: len(k)] == k]
        if not self._make_room(nbytes, subsumed):
            return False
        for k in subsumed:
            self._drop(k)
        if columns is None:
            layers = [
                (k[row : row + 1, :, :n].clone(), v[row : row + 1, :, :n].clone()) for k, v in heads
            ]
        else:  # indexing copies
            layers = [
                (k[row : row + 1, :, columns], v[row : row + 1, :, columns]) for k, v in heads
            ]
        self._entries[key] = PrefixEntry(list(key), layers, nbytes, self.wave)
        self.nbytes += nbytes
        return True

    def _make_room(self, nbytes: int, subsumed: list[tuple[int, ...]]) -> bool:
        """Evict least recently used entries of earlier waves until `nbytes` more fit beside
        what stays (the `subsumed` entries go too); False, evicting nothing, if they cannot."""
        freed = sum(self._entries[k].nbytes for k in subsumed)
        victims = []
        for k, entry in self._entries.items():
            if self.nbytes - freed + nbytes <= self.budget_bytes:
                break
            if entry.wave < self.wave and k not in subsumed:
                victims.append(k)
                freed += entry.nbytes
        if self.nbytes - freed + nbytes > self.budget_bytes:
            return False
        for k in victims:
            self._drop(k)
        return True

    def _drop(self, key: tuple[int, ...]) -> None:
        self.nbytes -= self._entries.pop(key).nbytes
