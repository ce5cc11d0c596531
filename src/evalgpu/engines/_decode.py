"""Greedy constrained decoding with continuous batching over a causal LM's forward pass.

The transformers engine's decode loop, apart from its adapter (`evalgpu.engines.transformers`,
which loads the model, renders prompts and turns the finished slots into replies):

- `Slot`, one request's decoding state (its constraint, its tokens, why it stopped);
- `KVBatch`, the rows being decoded together and their KV cache: new rows join it and finished
  rows leave it between steps (continuous batching);
- `prefill_groups`, which prompts share a prefix computed once;
- `Decoder`, the loop: admit waiting requests (prefill), or step every row by one token;
- `literal_masks`, which tokens commit to `true` or `false`, so that the loop reads the
  judge's probability of each boolean verdict where it chose it (soft verdicts).

Why its own loop and not `model.generate()`: `generate()` decodes a batch until its longest
reply ends, so a batch of judge replies of 40 to 1,500 tokens spent most of its steps on rows
that had finished (measured: 494 steps for 1,101 useful tokens in a batch of 8). Here a row
leaves the batch the step it ends and a waiting request takes its place, so every step decodes
`batch_size` live rows while work remains, and requests of any schema share a batch: each row
carries its own constraint (`evalgpu.engines._constraint.Constraint`: the tokens its schema
allows next, computed lazily by llguidance). Prompts that share a prefix (one source's
alignment and questions prompts, and every summary of that source) compute it once
(`prefill_groups`), and with a prefix store (`evalgpu.engines._prefix`) a group's head starts
from the longest prefix stored by an earlier group or wave: on a CPU, where prefill is most of
the time for long sources, that is the larger saving. Token counts and finish reasons are
read from the generated ids, not estimated from text.

Soft verdicts. At a step where the constraint allows only tokens that start `true`, tokens
that start `false`, and tokens of mere JSON punctuation or whitespace, and the row chooses a
literal's token, the row is choosing a boolean verdict. There the loop records
`p = P(true) / (P(true) + P(false))`, each side the softmax mass of every allowed token that
starts that literal (" true", "true", "t", ...), from the logits in float32. Mass over all the
first tokens, not one token each: a tokenizer may spell the same choice several ways.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from evalgpu.engines._heap import trim
from evalgpu.engines._parse import literal_class

if TYPE_CHECKING:
    from evalgpu.engines._constraint import Constraint, Grammars
    from evalgpu.engines._prefix import PrefixStore

__all__ = [
    "Decoder",
    "KVBatch",
    "Slot",
    "chunk_spans",
    "literal_masks",
    "prefill_groups",
    "shared_prefix",
]


def chunk_spans(length: int, rows: int, budget: int) -> list[tuple[int, int]]:
    """`[start, end)` column spans that cut a prefill of `rows` x `length` tokens in chunks.

    Each chunk holds at most `budget` tokens over its rows (at least one column), so that a
    forward pass's activations and its attention scores (chunk x everything before it, not
    length x length) stay bounded however long the prompt. Chunks are computed in order, each
    appended to the KV cache of those before it.
    """
    width = max(1, budget // max(1, rows))
    return [(start, min(length, start + width)) for start in range(0, length, width)]


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefill_groups(
    prompts: Sequence[Sequence[int]],
    order: Sequence[int],
    max_tokens: int,
    stored: Mapping[int, int] | None = None,
) -> list[tuple[int, list[int]]]:
    """`order` cut into prefill groups: `(shared prefix length, members)`.

    A group's shared prefix is computed once and its members' KV caches start from it; then
    their remaining tokens are computed together, left-padded to the longest. So a group of k
    prompts costs P + k * S tokens (P the shared prefix, S the longest remainder); a prompt
    alone costs its length. Requests of one source (its alignment and questions prompts,
    every summary of it) share the instructions and the source, which is then computed once.

    `stored` gives, by prompt index, how many of a prompt's first tokens the prefix store
    holds (`evalgpu.engines._prefix`): they are copied, not computed, but only into a head
    (a group's shared prefix, or a lone prompt but its last token). So a group's head costs
    only what no member has stored, and two prompts whose sources are both stored are not
    grouped over the system message they share (their sources would be computed again, in
    the tails).

    `order` must be sorted by token list, so that prompts with a common prefix are neighbours;
    the cut into consecutive groups of least total cost is found by dynamic programming.
    `max_tokens` bounds k * S (memory). A group leaves at least one token per member to
    compute: its logits give the reply's first token.
    """
    n = len(order)
    lengths = [len(prompts[i]) for i in order]
    held = [(stored or {}).get(i, 0) for i in order]
    common = [0] + [shared_prefix(prompts[a], prompts[b]) for a, b in pairwise(order)]
    best = [0] + [0] * n  # best[j]: least cost of order[:j]
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (start of the last group, its prefix)
    for j in range(1, n + 1):
        alone = lengths[j - 1] - min(held[j - 1], lengths[j - 1] - 1)
        best[j], cut[j] = best[j - 1] + alone, (j - 1, 0)
        prefix, shortest, longest = lengths[j - 1], lengths[j - 1], lengths[j - 1]
        most = held[j - 1]
        for i in range(j - 2, -1, -1):  # the group order[i:j]
            prefix = min(prefix, common[i + 1])
            shortest, longest = min(shortest, lengths[i]), max(longest, lengths[i])
            most = max(most, held[i])
            p = min(prefix, shortest - 1)
            width = (j - i) * (longest - p)
            if width > max_tokens:
                break
            cost = best[i] + p - min(p, most) + width
            if cost < best[j]:
                best[j], cut[j] = cost, (i, p)
    groups = []
    j = n
    while j:
        i, p = cut[j]
        groups.append((p, list(order[i:j])))
        j = i
    return groups[::-1]


@dataclass
class Slot:
    """One request being decoded: where its reply goes, its constraint, its tokens so far."""

    at: int
    """The request's index in the wave."""
    max_tokens: int
    constraint: Constraint
    """The request's schema, as a constraint: the tokens allowed next."""
    prompt_tokens: int
    cached: int = 0
    """Prompt tokens not computed for this request: a prefix shared with an earlier request of
    its prefill group, or copied from the prefix store."""
    tokens: list[int] = field(default_factory=list)
    """Generated ids, the end token included (it counts as output, as in vLLM)."""
    finish: str | None = None
    """None while decoding, then "stop" (an end token), "length" (`max_tokens` reached) or
    "error" (the constraint failed: `error`)."""
    error: str | None = None
    """Why the constraint refused the chosen token (a grammar limit): only this row fails."""
    true_probs: list[float] = field(default_factory=list)
    """p(true) at each boolean verdict chosen so far, in order (see the module docstring)."""

    def take(self, token: int, eos_ids: set[int]) -> None:
        """Record the token chosen for this row and advance its constraint."""
        self.tokens.append(token)
        if token in eos_ids:
            self.finish = "stop"
            return
        try:
            self.constraint.advance(token)
        except ValueError as exc:  # only when no token was allowed: the mask was all zeros
            self.finish, self.error = "error", str(exc)
            return
        if len(self.tokens) >= self.max_tokens:
            self.finish = "length"

    @property
    def position(self) -> int:
        """Position id of the last chosen token, the one the next step feeds the model."""
        return self.prompt_tokens + len(self.tokens) - 1

    @property
    def text_tokens(self) -> list[int]:
        """The reply's ids without the end token."""
        return self.tokens[:-1] if self.finish == "stop" else self.tokens


class KVBatch:
    """Rows decoded together: their slots, their KV cache and its attention mask.

    The mask's zeros mark padding: on the left of a row, and between a shared prefix and the
    rest of a prompt (see `TransformersEngine._admit`); position ids skip it. Rows join with
    `join` (their prefill cache, left-padded to a common length) and leave with
    `drop_finished`; columns that are padding in every row are cut.
    The cache is a transformers `DynamicCache` of `GrowingLayer`s (`evalgpu.engines._kvcache`:
    a step writes its column in place), whose layers hold `keys` and `values` of shape
    (rows, heads, length, head_dim); `join` and `drop_finished` replace them.
    """

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.cache: Any = None
        self.mask: Any = None

    def __len__(self) -> int:
        return len(self.slots)

    def join(self, slots: list[Slot], cache: Any, mask: Any) -> None:
        """Add prefilled rows: their cache and mask, left-padded with ours to one length."""
        import torch

        if self.cache is None:
            self.slots, self.cache, self.mask = list(slots), cache, mask
            return
        length = max(self.mask.shape[1], mask.shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat([_pad_left(mine.keys, length), _pad_left(theirs.keys, length)])
            mine.values = torch.cat(
                [_pad_left(mine.values, length), _pad_left(theirs.values, length)]
            )
        self.mask = torch.cat([_pad_left(self.mask, length), _pad_left(mask, length)])
        self.slots += slots

    def drop_finished(self) -> list[Slot]:
        """Remove the finished rows and return them."""
        import torch

        done = [s for s in self.slots if s.finish is not None]
        if not done:
            return []
        keep = [i for i, s in enumerate(self.slots) if s.finish is None]
        self.slots = [self.slots[i] for i in keep]
        if not keep:
            self.cache = self.mask = None
            return done
        index = torch.tensor(keep, device=self.mask.device)
        self.mask = self.mask[index]
        first = int(self.mask.any(dim=0).int().argmax())  # first column with a real token
        self.mask = self.mask[:, first:]
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, first:]
            layer.values = layer.values[index, :, first:]
        return done


def _fit(masks: Any, size: int) -> Any:
    """`literal_masks` cut or extended (extra ids are "other") to `size` token ids."""
    import torch

    if masks.shape[1] >= size:
        return masks[:, :size]
    extra = torch.zeros((3, size - masks.shape[1]), dtype=torch.bool, device=masks.device)
    extra[2] = True
    return torch.cat([masks, extra], dim=1)


def _pad_left(t: Any, length: int) -> Any:
    """`t` with zeros prepended along its sequence axis (-2 for KV, -1 for a 2-D mask)."""
    import torch.nn.functional as F

    if t.dim() == 2:
        return F.pad(t, (length - t.shape[1], 0))
    return F.pad(t, (0, 0, length - t.shape[-2], 0))


def literal_masks(tokenizer: Any, size: int) -> Any:
    """Boolean masks over token ids `[0, size)`: which start `true`, `false`, or neither.

    Returns a (3, size) tensor: tokens of class "true", of class "false", and "other" (see
    `evalgpu.engines._parse.literal_class`); ids past the tokenizer (padding rows of the
    output layer) are "other". Built once per engine (about 0.3 s for 49k tokens).
    """
    import torch

    masks = torch.zeros((3, size), dtype=torch.bool)
    masks[2] = True
    n = min(size, len(tokenizer))
    texts = tokenizer.batch_decode([[i] for i in range(n)])
    for i, text in enumerate(texts):
        kind = literal_class(text)
        if kind != "other":
            masks[2, i] = False
            if kind != "lead":
                masks[0 if kind == "true" else 1, i] = True
    return masks


def true_probability(logits: Any, true_tokens: Any, false_tokens: Any) -> float:
    """P(true) / (P(true) + P(false)) from one row's logits, computed in float32.

    `true_tokens` / `false_tokens` are boolean masks of the allowed tokens that start each
    literal. The softmax normaliser cancels, so this is the sigmoid of the difference of the
    two sides' log-sum-exp: exact in float32 even when the model computes in bfloat16, which
    resolves probabilities near 1 to about 3 significant digits and ties them.
    """
    import torch

    row = logits.float()
    gap = torch.logsumexp(row[true_tokens], 0) - torch.logsumexp(row[false_tokens], 0)
    return float(torch.sigmoid(gap))


class Decoder:
    """Greedy constrained decoding of many requests over one model, `batch_size` rows at a time.

    Args:
        model: a transformers causal LM (its forward pass is all that is used).
        tokenizer: its tokenizer (left padding; `pad` builds the prefill batches).
        grammars: the compiled grammars of the schemas, over the model's vocabulary.
        device: where the model's inputs go.
        eos_ids: token ids that end a reply.
        cache_arg: the name of the forward pass's KV-cache argument and output.
        batch_size: rows decoded together.
        prefill_tokens: padded prompt tokens of one prefill group (its rows x its longest
            remainder).
        prefill_chunk: tokens of one prefill forward pass: a longer prefix or group is
            computed in chunks of this many tokens appended to the KV cache (`chunk_spans`).
        seed: set before decoding (decoding is greedy; the seed pins any tie-breaking).
        literals: `literal_masks` of the vocabulary, to read soft verdicts; None: no `p`.
        prefix_store: KV caches of prefixes kept across waves (`evalgpu.engines._prefix`):
            a prefill group's head starts from its longest stored prefix, and is stored.
            None: a prefix is shared only within the wave.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        grammars: Grammars,
        *,
        device: str,
        eos_ids: set[int],
        cache_arg: str,
        batch_size: int,
        prefill_tokens: int,
        seed: int,
        prefill_chunk: int = 1024,
        literals: Any = None,
        prefix_store: PrefixStore | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.grammars = grammars
        self.device = device
        self.eos_ids = eos_ids
        self.cache_arg = cache_arg
        self.batch_size = batch_size
        self.prefill_tokens = prefill_tokens
        self.prefill_chunk = prefill_chunk
        self.seed = seed
        self.literals = literals
        self.prefix_store = prefix_store

    def run(
        self,
        encoded: list[list[int]],
        max_tokens: list[int],
        schemas: Sequence[type[BaseModel]],
    ) -> list[Slot]:
        """Decode every prompt of `encoded` constrained by its schema; the finished slots.

        Each iteration either admits waiting requests (a prefill per `prefill_groups` group;
        their first tokens come from it) or decodes one token for every row. Admission waits
        until a quarter of the batch is free, so that the cost of joining caches is paid for
        several rows at once. `Slot.at` is the request's index in `encoded`.
        """
        import torch

        # Sorted by token list: prompts that share a prefix (one source's) are neighbours.
        waiting = deque(sorted(range(len(encoded)), key=lambda i: encoded[i]))
        batch, done = KVBatch(), []
        admit_at = max(1, self.batch_size // 4)
        torch.manual_seed(self.seed)
        with torch.inference_mode():
            while waiting or batch:
                free = self.batch_size - len(batch)
                if waiting and free >= min(admit_at, len(waiting)):
                    take = [waiting.popleft() for _ in range(min(free, len(waiting)))]
                    stored = self._stored(encoded, take)
                    for prefix, group in prefill_groups(encoded, take, self.prefill_tokens, stored):
                        self._admit(batch, group, prefix, encoded, max_tokens, schemas)
                else:
                    self._step(batch)
                done += batch.drop_finished()
        trim()  # the wave's caches are freed: their pages go back to the system
        return done

    def _stored(self, encoded: list[list[int]], take: list[int]) -> dict[int, int]:
        """For each prompt of `take`, how many of its first tokens (all but the last at most)
        the prefix store would give it (`prefill_groups` groups by it); empty without one."""
        store = self.prefix_store
        if store is None:
            return {}
        held = {i: store.longest(encoded[i][:-1])[1] for i in take}
        return {i: n for i, n in held.items() if n >= store.min_reuse}

    def _admit(
        self,
        batch: KVBatch,
        group: list[int],
        prefix: int,
        encoded: list[list[int]],
        max_tokens: list[int],
        schemas: Sequence[type[BaseModel]],
    ) -> None:
        """Prefill `group`'s prompts, choose their first tokens, and add them to the batch.

        The group's head (its shared `prefix`; with a prefix store, a lone prompt but its last
        token) is computed once, for one row, and that cache is copied to every member; the
        rest of each prompt is computed on top of it, left-padded (so the padding sits between
        the head and the remainder, masked, and position ids skip it). With a store, the
        head's longest stored prefix is copied instead of computed (when it saves at least
        `min_reuse` tokens), and the head is stored for the groups and waves after it.
        Both are computed in chunks of at most `prefill_chunk` tokens (`chunk_spans`), each on
        top of the cache of the chunks before it: measured on SmolLM2, a 6,000-token prompt
        in one pass with a padding mask took 44 s and 1.2 GB above the model, in chunks of
        1,024 30 s and 0.9 GB (in one pass, sdpa materialises the padding mask as L x L).
        """
        import torch

        first = encoded[group[0]]
        store = self.prefix_store
        if store is not None and len(group) == 1 and len(first) - 1 >= store.min_reuse:
            prefix = len(first) - 1  # the last token's logits come from the tail pass
        cache, reused = self._head(first[:prefix])
        if prefix and len(group) > 1:
            cache.batch_repeat_interleave(len(group))
        tails = self.tokenizer.pad(
            {"input_ids": [encoded[i][prefix:] for i in group]}, return_tensors="pt"
        ).to(self.device)
        tail_mask = tails["attention_mask"]
        mask = torch.cat([torch.ones_like(tail_mask[:, :1]).expand(-1, prefix), tail_mask], dim=1)
        positions = prefix + (tail_mask.cumsum(-1) - 1).clamp(min=0)
        for start, end in chunk_spans(tail_mask.shape[1], len(group), self.prefill_chunk):
            out = self._forward(
                tails["input_ids"][:, start:end],
                mask[:, : prefix + end],
                positions[:, start:end],
                cache,
            )
            cache = out[self.cache_arg]
        if store is not None:
            self._store_members(store, group, prefix, encoded, cache, mask)
        slots = [
            Slot(
                at=i,
                max_tokens=max_tokens[i],
                constraint=self.grammars.start(schemas[i]),
                prompt_tokens=len(encoded[i]),
                # The first member computed the head but what the store gave; the others, none.
                cached=prefix if n else reused,
            )
            for n, i in enumerate(group)
        ]
        self._choose(slots, out.logits[:, -1, :])
        batch.join(slots, cache, mask)

    def _head(self, head: list[int]) -> tuple[Any, int]:
        """The KV cache of a group's `head` (None when empty), one row, and how many of its
        tokens were copied from the prefix store rather than computed.

        The longest stored prefix is copied when it saves `min_reuse` tokens; the rest is
        computed on top of it in chunks (`chunk_spans`), and the head is stored.
        """
        import torch

        store, cache, reused = self.prefix_store, None, 0
        if store is not None and len(head) >= store.min_reuse:
            entry, reused = store.longest(head)
            if entry is not None and reused >= store.min_reuse:
                cache = store.cache(entry, reused)
            else:
                reused = 0
        if len(head) > reused:
            ids = torch.tensor([head], device=self.device)
            for start, end in chunk_spans(len(head) - reused, 1, self.prefill_chunk):
                start, end = start + reused, end + reused
                cache = self._forward(
                    ids[:, start:end], None, torch.arange(start, end)[None], cache
                )[self.cache_arg]
            if store is not None and len(head) >= store.min_reuse:
                store.put(head, cache)
        return cache, reused

    def _store_members(
        self,
        store: PrefixStore,
        group: list[int],
        prefix: int,
        encoded: list[list[int]],
        cache: Any,
        mask: Any,
    ) -> None:
        """Store the whole prompt of each member of which the tail is most (longer than the
        group's head): the head is stored already, and what a later wave shares with such a
        prompt (its source, after a system message that grouped it with other sources) was
        computed in the tail pass. A member that is mostly the head (one of a source's
        verify calls) adds to the store only its own few tokens, and is not stored.
        """
        for row, i in enumerate(group):
            if len(encoded[i]) - prefix > prefix and len(encoded[i]) >= store.min_reuse:
                store.put(encoded[i], cache, row, columns=mask[row].nonzero().flatten())

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
        """One prefill forward pass of `ids` on top of `cache` (None: a new `growing_cache`)."""
        from evalgpu.engines._kvcache import growing_cache

        return self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions.to(ids.device),
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_arg: growing_cache() if cache is None else cache},
        )

    def _step(self, batch: KVBatch) -> None:
        """Feed every row its last token and choose its next one."""
        import torch

        slots = batch.slots
        ids = torch.tensor([[s.tokens[-1]] for s in slots], device=self.device)
        positions = torch.tensor([[s.position] for s in slots], device=self.device)
        batch.mask = torch.cat([batch.mask, torch.ones_like(batch.mask[:, :1])], dim=1)
        out = self.model(
            input_ids=ids,
            attention_mask=batch.mask,
            position_ids=positions,
            use_cache=True,
            **{self.cache_arg: batch.cache},
        )
        batch.cache = out[self.cache_arg]
        self._choose(slots, out.logits[:, -1, :])

    def _choose(self, slots: list[Slot], logits: Any) -> None:
        """The allowed token of highest logit, for each row (greedy, constrained).

        Where a row chooses a boolean verdict, its p(true) is recorded first (`_read_p`).
        """
        import torch

        words = self.grammars.bitmask(len(slots))
        for row, slot in enumerate(slots):
            slot.constraint.allowed(words, row)
        shifts = torch.arange(32, dtype=torch.int32)
        allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().view(len(slots), -1)
        allowed = allowed[:, : logits.shape[-1]].to(logits.device)
        chosen = logits.float().masked_fill(~allowed, float("-inf")).argmax(dim=-1)
        if self.literals is not None:
            self._read_p(slots, logits, allowed, chosen)
        for slot, token in zip(slots, chosen.tolist(), strict=True):
            slot.take(int(token), self.eos_ids)

    def _read_p(self, slots: list[Slot], logits: Any, allowed: Any, chosen: Any) -> None:
        """Record p(true) for the rows that are choosing between `true` and `false` now.

        Such a row's constraint allows tokens of both literals and nothing else but
        punctuation or whitespace (`literal_masks`), and its chosen token starts a literal
        (when it chose a space, the choice comes at the next step).
        """
        masks = self.literals.to(logits.device)
        if masks.shape[1] != logits.shape[-1]:  # an output layer padded past the tokenizer
            masks = _fit(masks, logits.shape[-1])
        is_true, is_false, is_other = masks
        choosing = (
            (allowed & is_true).any(-1)
            & (allowed & is_false).any(-1)
            & ~(allowed & is_other).any(-1)
            & (is_true[chosen] | is_false[chosen])
        )
        for row in choosing.nonzero().flatten().tolist():
            slots[row].true_probs.append(
                true_probability(logits[row], allowed[row] & is_true, allowed[row] & is_false)
            )
