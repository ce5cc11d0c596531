"""The transformers engine: outlines-constrained decoding over a transformers model (CPU default).

Three parts, like outlines' own backend files:

- pure translation, no model: `chat_for` (the chat a model's template can take),
  `plan_batches` (requests grouped by schema and budget, sorted by prompt length),
  `read_output` (tokens back into text, token count and finish reason);
- `TransformersEngine.generate`, one `model.generate()` per batch;
- the replies, built by `reply_from_text` like every engine's.

outlines compiles each schema into a logits processor once; the engine calls
`model.generate()` itself with that processor, so that it sees the generated token ids: token
counts and finish reasons are read from them, not estimated from text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any, cast

from pydantic import BaseModel

from evalgpu.engines._parse import reply_from_text
from evalgpu.engines.base import JudgeReply, JudgeRequest

__all__ = ["TransformersEngine", "chat_for", "plan_batches", "read_output"]


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


def plan_batches(
    requests: Sequence[JudgeRequest], prompt_lengths: Sequence[int], batch_size: int
) -> list[list[int]]:
    """Request indices in batches: one schema and one `max_tokens` per batch, similar lengths.

    A batch shares one compiled constraint and one `max_new_tokens`, and sorting by prompt
    length keeps left padding (computed for nothing) small.
    """
    groups: dict[tuple[type, int], list[int]] = {}
    for i, request in enumerate(requests):
        groups.setdefault((request.schema, request.max_tokens), []).append(i)
    batches = []
    for members in groups.values():
        members.sort(key=lambda i: prompt_lengths[i])
        batches += [members[at : at + batch_size] for at in range(0, len(members), batch_size)]
    return batches


def read_output(ids: Sequence[int], eos_ids: set[int], max_new_tokens: int) -> tuple[int, int, str]:
    """`(tokens of text, tokens generated, finish_reason)` of one generated sequence.

    The text is the tokens before the first end-of-sequence token; the count includes that
    token (as vLLM counts it) but not the padding after it. No end token within
    `max_new_tokens` means the reply was cut: "length".
    """
    for n, token in enumerate(ids):
        if token in eos_ids:
            return n, n + 1, "stop"
    n = len(ids)
    return n, n, "length" if n >= max_new_tokens else "stop"


@cache
def _processor_class() -> type:
    """outlines_core's logits processor, masking logits in plain torch.

    Its default mask kernel goes through `torch.compile`: about 10 s at the first token of
    every process on a CPU, and a C++ compiler on the machine. Unpacking the bitmask eagerly
    costs well under a millisecond per token for a 50k vocabulary.
    """
    import torch
    from outlines.backends.outlines_core import OutlinesCoreLogitsProcessor
    from outlines_core.kernels.torch import (  # type: ignore[import-untyped]
        fill_next_token_bitmask,
    )

    class EagerMaskProcessor(OutlinesCoreLogitsProcessor):
        def _bias_logits_torch(self, batch_size: int, logits: Any) -> Any:
            for i in range(batch_size):
                fill_next_token_bitmask(self._guides[i], self._bitmasks[i])
            words = torch.cat(self._bitmasks[:batch_size]).to(logits.device)
            shifts = torch.arange(32, device=logits.device, dtype=torch.int32)
            allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().view(batch_size, -1)
            logits.masked_fill_(~allowed[:, : logits.shape[1]], float("-inf"))
            return logits

    return EagerMaskProcessor


class TransformersEngine:
    """Judge engine over a transformers causal LM, decoding constrained by outlines.

    Args:
        model_path: a transformers model folder (see `evalgpu.models.resolve_model`).
        batch_size: sequences decoded together (one schema and budget per batch).
        dtype: "auto"/None (float32 on CPU, bfloat16 on CUDA) or a torch dtype name.
        device: "cpu", "cuda", ...; None picks CUDA when available.
        max_model_len: prompt plus reply limit in tokens (default: the model's context);
            a request over it gets an error reply instead of a crash.
        chat_template_kwargs: extra variables for the chat template (Qwen3's
            `enable_thinking=False`).
        seed: set before every batch (decoding is greedy; the seed pins any tie-breaking).
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
        self.batch_size = batch_size
        self.seed = seed
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
        # One vocabulary index for every schema; one compiled processor per schema, reused.
        self._vocabulary = OutlinesCoreBackend(
            outlines.from_transformers(self.model, self.tokenizer)
        ).vocabulary
        self._processors: dict[type[BaseModel], Any] = {}

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

    def processor(self, schema: type[BaseModel]) -> Any:
        """The outlines logits processor of `schema`, compiled on first use."""
        if schema not in self._processors:
            from outlines_core import Index  # type: ignore[import-untyped]
            from outlines_core.json_schema import (  # type: ignore[import-untyped]
                build_regex_from_schema,
            )

            regex = build_regex_from_schema(json.dumps(schema.model_json_schema()))
            index = Index(regex, self._vocabulary)
            self._processors[schema] = _processor_class()(index, "torch")
        return self._processors[schema]

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
                replies[i] = JudgeReply(None, "", len(ids), 0, 0, "error", message)
        fitting = [i for i, reply in enumerate(replies) if reply is None]
        lengths = [len(encoded[i]) for i in fitting]
        for batch in plan_batches([requests[i] for i in fitting], lengths, self.batch_size):
            members = [fitting[j] for j in batch]
            answers = self._generate_batch(
                [requests[i] for i in members], [encoded[i] for i in members]
            )
            for i, reply in zip(members, answers, strict=True):
                replies[i] = reply
        return cast(list[JudgeReply], replies)

    def _generate_batch(
        self, requests: list[JudgeRequest], encoded: list[list[int]]
    ) -> list[JudgeReply]:
        """One `model.generate()` for requests of one schema and one budget."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        schema, max_tokens = requests[0].schema, requests[0].max_tokens
        inputs = self.tokenizer.pad({"input_ids": encoded}, return_tensors="pt").to(self.device)
        processor = self.processor(schema)
        processor.reset()
        # Our settings, not the model's generation_config defaults (sampling, penalties).
        config = GenerationConfig(  # type: ignore[no-untyped-call]
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.tokenizer.pad_token_id,
        )
        torch.manual_seed(self.seed)
        with torch.inference_mode():
            out = self.model.generate(
                **inputs,
                generation_config=config,
                logits_processor=LogitsProcessorList([processor]),
            )
        width = inputs["input_ids"].shape[1]
        replies = []
        for row, request in enumerate(requests):
            ids = out[row, width:].tolist()
            n_text, n_out, finish = read_output(ids, self.eos_ids, max_tokens)
            replies.append(
                reply_from_text(
                    request,
                    self.tokenizer.decode(ids[:n_text], skip_special_tokens=False),
                    prompt_tokens=len(encoded[row]),
                    output_tokens=n_out,
                    finish_reason=finish,
                )
            )
        return replies
