"""The transformers engine: outlines-constrained decoding over a transformers model (CPU default).

Three parts, like outlines' own backend files:

- no model: `chat_for` (the chat a model's template can take) and `Slot`, one request's
  decoding state (its constraint, its tokens, why it stopped);
- `KVBatch`, the rows being decoded together and their KV cache: new rows join it and finished
  rows leave it between steps (continuous batching);
- `TransformersEngine.generate`, a greedy decode loop over the model's forward pass, and the
  replies, built by `reply_from_text` like every engine's.

Why its own loop and not `model.generate()`: `generate()` decodes a batch until its longest
reply ends, so a batch of judge replies of 40 to 1,500 tokens spent most of its steps on rows
that had finished (measured: 494 steps for 1,101 useful tokens in a batch of 8). Here a row
leaves the batch the step it ends and a waiting request takes its place, so every step decodes
`batch_size` live rows while work remains, and requests of any schema share a batch: each row
carries its own outlines guide. Prompts that share a prefix (one source's alignment and
questions prompts, and every summary of that source) compute it once (`prefill_groups`): on
a CPU, where prefill is most of the time for long sources, that is the larger saving. Token
counts and finish reasons are read from the generated ids, not estimated from text.
"""

from __future__ import annotations

import inspect
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, cast

from pydantic import BaseModel

from evalgpu.engines._parse import reply_from_text
from evalgpu.engines.base import JudgeReply, JudgeRequest

__all__ = [
    "KVBatch",
    "Slot",
    "TransformersEngine",
    "chat_for",
    "prefill_groups",
    "shared_prefix",
]


def chat_for(messages: list[dict[str, str]], system_role: bool) -> list[dict[str, str]]:
    """The chat to render: as given, or with system text folded into the first user message.

    Some templates (Mistral's, Gemma's) reject or silently drop a system message; for them
    the judge's instructions go first in the user turn, so that the prompt keeps them.
    """
    if system_role:
        return list(messages)
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if system and rest and rest[0]["role"] == "user":
        rest[0]["content"] = f"{system}\n\n{rest[0]['content']}"
    elif system:
        rest.insert(0, {"role": "user", "content": system})
    return rest


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefill_groups(
    prompts: Sequence[Sequence[int]], order: Sequence[int], max_tokens: int
) -> list[tuple[int, list[int]]]:
    """`order` cut into prefill groups: `(shared prefix length, members)`.

    A group's shared prefix is computed once and its members' KV caches start from it; then
    their remaining tokens are computed together, left-padded to the longest. So a group of k
    prompts costs P + k * S tokens (P the shared prefix, S the longest remainder); a prompt
    alone costs its length. Requests of one source (its alignment and questions prompts,
    every summary of it) share the instructions and the source, which is then computed once.

    `order` must be sorted by token list, so that prompts with a common prefix are neighbours;
    the cut into consecutive groups of least total cost is found by dynamic programming.
    `max_tokens` bounds k * S (memory). A group leaves at least one token per member to
    compute: its logits give the reply's first token.
    """
    n = len(order)
    lengths = [len(prompts[i]) for i in order]
    common = [0] + [shared_prefix(prompts[a], prompts[b]) for a, b in pairwise(order)]
    best = [0] + [0] * n  # best[j]: least cost of order[:j]
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (start of the last group, its prefix)
    for j in range(1, n + 1):
        best[j], cut[j] = best[j - 1] + lengths[j - 1], (j - 1, 0)
        prefix, shortest, longest = lengths[j - 1], lengths[j - 1], lengths[j - 1]
        for i in range(j - 2, -1, -1):  # the group order[i:j]
            prefix = min(prefix, common[i + 1])
            shortest, longest = min(shortest, lengths[i]), max(longest, lengths[i])
            p = min(prefix, shortest - 1)
            width = (j - i) * (longest - p)
            if width > max_tokens:
                break
            if best[i] + p + width < best[j]:
                best[j], cut[j] = best[i] + p + width, (i, p)
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
    guide: Any
    """The outlines-core `Guide` of the request's schema: the tokens allowed next."""
    prompt_tokens: int
    cached: int = 0
    """Prompt tokens not computed for this request: a prefix shared with an earlier one."""
    tokens: list[int] = field(default_factory=list)
    """Generated ids, the end token included (it counts as output, as in vLLM)."""
    finish: str | None = None
    """None while decoding, then "stop" (an end token) or "length" (`max_tokens` reached)."""

    def take(self, token: int, eos_ids: set[int]) -> None:
        """Record the token chosen for this row and advance its constraint."""
        self.tokens.append(token)
        if token in eos_ids:
            self.finish = "stop"
            return
        self.guide.advance(token, return_tokens=False)
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
    The cache is a transformers `DynamicCache`, whose layers hold `keys` and `values` of shape
    (rows, heads, length, head_dim).
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


def _pad_left(t: Any, length: int) -> Any:
    """`t` with zeros prepended along its sequence axis (-2 for KV, -1 for a 2-D mask)."""
    import torch.nn.functional as F

    if t.dim() == 2:
        return F.pad(t, (length - t.shape[1], 0))
    return F.pad(t, (0, 0, length - t.shape[-2], 0))


class TransformersEngine:
    """Judge engine over a transformers causal LM, decoding constrained by outlines.

    Args:
        model_path: a transformers model folder (see `evalgpu.models.resolve_model`).
        batch_size: rows decoded together; requests of any schema share them.
        dtype: "auto"/None (float32 on CPU, bfloat16 on CUDA) or a torch dtype name.
        device: "cpu", "cuda", ...; None picks CUDA when available.
        max_model_len: prompt plus reply limit in tokens (default: the model's context);
            a request over it gets an error reply instead of a crash.
        chat_template_kwargs: extra variables for the chat template (Qwen3's
            `enable_thinking=False`).
        seed: set before every wave (decoding is greedy; the seed pins any tie-breaking).
        prefill_tokens: padded prompt tokens prefilled in one forward pass (bounds the memory
            of admitting many long prompts at once).
    """

    name = "transformers"

    def __init__(
        self,
        model_path: str,
        *,
        batch_size: int = 16,
        dtype: str | None = None,
        device: str | None = None,
        max_model_len: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        seed: int = 0,
        prefill_tokens: int = 8192,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        import outlines
        import torch
        from outlines.backends.outlines_core import OutlinesCoreBackend
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype in (None, "auto"):
            torch_dtype = torch.float32 if self.device == "cpu" else torch.bfloat16
        else:
            torch_dtype = getattr(torch, str(dtype))
        self.model_path = str(model_path)
        self.batch_size = batch_size
        self.seed = seed
        self.prefill_tokens = prefill_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.tokenizer: Any = cast(Any, AutoTokenizer.from_pretrained(model_path))
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model: Any = cast(Any, AutoModelForCausalLM).from_pretrained(
            model_path, dtype=torch_dtype
        )
        self.model.to(self.device).eval()
        self.max_model_len = max_model_len or self.model.config.max_position_embeddings
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {self.tokenizer.eos_token_id, *(e for e in eos if e is not None)}
        self.system_role = self._template_keeps_system()
        # One vocabulary for every schema; one compiled index per schema, reused.
        self._vocabulary = OutlinesCoreBackend(
            outlines.from_transformers(self.model, self.tokenizer)
        ).vocabulary
        self._indexes: dict[type[BaseModel], Any] = {}
        # transformers 5.x renamed `past_key_values` to `cache` (the old name still works,
        # with a warning).
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` alone (no special tokens): lets a sweep name a too-long field."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _template_keeps_system(self) -> bool:
        probe = [{"role": "system", "content": "S-7f3a"}, {"role": "user", "content": "U"}]
        try:
            return "S-7f3a" in self._render(probe)
        except Exception:  # jinja raise_exception: "System role not supported"
            return False

    def _render(self, chat: list[dict[str, str]]) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
            )
        )

    def index(self, schema: type[BaseModel]) -> Any:
        """The outlines-core index of `schema` (tokens allowed per state), built on first use."""
        if schema not in self._indexes:
            from outlines_core import Index  # type: ignore[import-untyped]
            from outlines_core.json_schema import (  # type: ignore[import-untyped]
                build_regex_from_schema,
            )

            regex = build_regex_from_schema(json.dumps(schema.model_json_schema()))
            self._indexes[schema] = Index(regex, self._vocabulary)
        return self._indexes[schema]

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        """Answer every request, in order (see the module docstring for how it batches)."""
        if not requests:
            return []
        # The chat template writes the special tokens itself (a BOS, for Llama).
        encoded: list[list[int]] = self.tokenizer(
            [self._render(chat_for(r.messages, self.system_role)) for r in requests],
            add_special_tokens=False,
        )["input_ids"]
        replies: list[JudgeReply | None] = [None] * len(requests)
        for i, (request, ids) in enumerate(zip(requests, encoded, strict=True)):
            if len(ids) + request.max_tokens > self.max_model_len:
                message = (
                    f"prompt of {len(ids)} tokens + max_tokens={request.max_tokens} exceeds "
                    f"max_model_len={self.max_model_len}"
                )
                replies[i] = JudgeReply(None, "", len(ids), 0, 0, "error", message, "too_long")
        fitting = [i for i, reply in enumerate(replies) if reply is None]
        for slot in self._decode([requests[i] for i in fitting], [encoded[i] for i in fitting]):
            i = fitting[slot.at]
            replies[i] = reply_from_text(
                requests[i],
                self.tokenizer.decode(slot.text_tokens, skip_special_tokens=False),
                prompt_tokens=slot.prompt_tokens,
                output_tokens=len(slot.tokens),
                cached_tokens=slot.cached,
                finish_reason=slot.finish or "length",
            )
        return cast(list[JudgeReply], replies)

    def _decode(self, requests: list[JudgeRequest], encoded: list[list[int]]) -> list[Slot]:
        """Greedy constrained decoding of every request; returns the finished slots.

        Each iteration either admits waiting requests (a prefill per `prefill_groups` group;
        their first tokens come from it) or decodes one token for every row. Admission waits
        until a quarter of the batch is free, so that the cost of joining caches is paid for
        several rows at once.
        """
        import torch

        # Sorted by token list: prompts that share a prefix (one source's) are neighbours.
        waiting = deque(sorted(range(len(requests)), key=lambda i: encoded[i]))
        batch, done = KVBatch(), []
        admit_at = max(1, self.batch_size // 4)
        torch.manual_seed(self.seed)
        with torch.inference_mode():
            while waiting or batch:
                free = self.batch_size - len(batch)
                if waiting and free >= min(admit_at, len(waiting)):
                    take = [waiting.popleft() for _ in range(min(free, len(waiting)))]
                    for prefix, group in prefill_groups(encoded, take, self.prefill_tokens):
                        self._admit(batch, group, prefix, requests, encoded)
                else:
                    self._step(batch)
                done += batch.drop_finished()
        return done

    def _admit(
        self,
        batch: KVBatch,
        group: list[int],
        prefix: int,
        requests: list[JudgeRequest],
        encoded: list[list[int]],
    ) -> None:
        """Prefill `group`'s prompts, choose their first tokens, and add them to the batch.

        The shared `prefix` tokens are computed once, for one row, and that cache is copied to
        every member; the rest of each prompt is computed on top of it, left-padded (so the
        padding sits between the prefix and the remainder, masked, and position ids skip it).
        """
        import torch
        from outlines_core import Guide

        cached: dict[str, Any] = {}
        if prefix:
            head = torch.tensor([encoded[group[0]][:prefix]], device=self.device)
            out = self.model(input_ids=head, use_cache=True, logits_to_keep=1)
            cache = out[self._cache_arg]
            cache.batch_repeat_interleave(len(group))
            cached = {self._cache_arg: cache}
        tails = self.tokenizer.pad(
            {"input_ids": [encoded[i][prefix:] for i in group]}, return_tensors="pt"
        ).to(self.device)
        tail_mask = tails["attention_mask"]
        mask = torch.cat([torch.ones_like(tail_mask[:, :1]).expand(-1, prefix), tail_mask], dim=1)
        out = self.model(
            input_ids=tails["input_ids"],
            attention_mask=mask,
            position_ids=prefix + (tail_mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
            logits_to_keep=1,
            **cached,
        )
        slots = [
            Slot(
                at=i,
                max_tokens=requests[i].max_tokens,
                guide=Guide(self.index(requests[i].schema)),
                prompt_tokens=len(encoded[i]),
                cached=prefix if n else 0,  # the first member paid for the prefix
            )
            for n, i in enumerate(group)
        ]
        self._choose(slots, out.logits[:, -1, :])
        batch.join(slots, out[self._cache_arg], mask)

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
            **{self._cache_arg: batch.cache},
        )
        batch.cache = out[self._cache_arg]
        self._choose(slots, out.logits[:, -1, :])

    def _choose(self, slots: list[Slot], logits: Any) -> None:
        """The allowed token of highest logit, for each row (greedy, constrained)."""
        import torch
        from outlines_core.kernels.torch import (  # type: ignore[import-untyped]
            fill_next_token_bitmask,
        )

        words = torch.zeros((len(slots), (logits.shape[-1] + 31) // 32), dtype=torch.int32)
        for row, slot in enumerate(slots):
            fill_next_token_bitmask(slot.guide, words[row : row + 1])
        shifts = torch.arange(32, dtype=torch.int32)
        allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().view(len(slots), -1)
        allowed = allowed[:, : logits.shape[-1]].to(logits.device)
        tokens = logits.float().masked_fill(~allowed, float("-inf")).argmax(dim=-1).tolist()
        for slot, token in zip(slots, tokens, strict=True):
            slot.take(int(token), self.eos_ids)
