"""The transformers engine: outlines-constrained decoding over a transformers model (CPU default).

A thin adapter, like outlines' own backend files: `chat_for` (the chat a model's template can
take), and `TransformersEngine`, which loads the model and tokenizer, renders and tokenizes the
prompts, refuses those over the context length, hands the rest to the decode loop
(`evalgpu.engines._decode`: continuous batching, shared-prefix prefill, one outlines guide per
row) and turns the finished slots into replies with `reply_from_text`, like every engine.
Soft verdicts: the loop records p(true) where a row chooses a boolean verdict, and the reply
attaches it to the parsed verdicts (`evalgpu.verdicts.attach_p`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel

from evalgpu.engines._decode import Decoder, Slot, literal_masks
from evalgpu.engines._parse import reply_from_text
from evalgpu.engines.base import JudgeReply, JudgeRequest
from evalgpu.verdicts import has_soft_verdicts

__all__ = ["TransformersEngine", "chat_for"]


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
                true_probs=slot.true_probs,
            )
        return cast(list[JudgeReply], replies)

    def _literal_masks(self) -> Any:
        """Which tokens start `true` / `false` (`literal_masks`), built on first use."""
        # Kept out of __init__: built only by an engine that is asked for soft verdicts.
        masks = self.__dict__.get("_literals")
        if masks is None:
            size = self.model.get_output_embeddings().weight.shape[0]
            masks = self.__dict__["_literals"] = literal_masks(self.tokenizer, size)
        return masks

    def _decode(self, requests: list[JudgeRequest], encoded: list[list[int]]) -> list[Slot]:
        """Greedy constrained decoding of every request (`evalgpu.engines._decode`)."""
        decoder = Decoder(
            self.model,
            self.tokenizer,
            device=self.device,
            eos_ids=self.eos_ids,
            cache_arg=self._cache_arg,
            batch_size=self.batch_size,
            prefill_tokens=self.prefill_tokens,
            seed=self.seed,
            literals=self._literal_masks()
            if any(has_soft_verdicts(r.schema) for r in requests)
            else None,
        )
        return decoder.run(
            encoded, [r.max_tokens for r in requests], [self.index(r.schema) for r in requests]
        )
