"""The transformers engine: constrained decoding over a transformers model, where vLLM cannot run.

A thin adapter, like outlines' own backend files: `chat_for` (the chat a model's template can
take), and `TransformersEngine`, which loads the model and tokenizer, renders and tokenizes the
prompts, refuses those over the context length, decodes the rest with transformers' own
`generate()` (greedy, in batches of similar length, each row constrained by its schema through
a logits processor, `evalgpu.engines._decode.Constrained`) and turns each row into a reply with
`reply_from_text`, like every engine. Speed is vLLM's business (continuous batching, a prefix
cache): where it runs, `backend="auto"` picks it (engines/README.md).
The constraints come from llguidance (`evalgpu.engines._constraint`), the grammar engine of
outlines' llguidance backend and of vLLM's guidance backend: it compiles a schema lazily, in
milliseconds. Soft verdicts: the processor records p(true) where a row chooses a boolean
verdict, and the reply attaches it to the parsed verdicts (`evalgpu.verdicts.attach_p`).
`Grammars` (the engine's constraints over one tokenizer) is exported for users who measure them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel

from evalgpu.engines._compute import COMPUTES, cpu_threads, load_model, resolve_compute
from evalgpu.engines._constraint import Grammars
from evalgpu.engines._decode import Constrained, Slot, literal_masks
from evalgpu.engines._parse import reply_from_text
from evalgpu.engines.base import JudgeReply, JudgeRequest
from evalgpu.verdicts import has_soft_verdicts

__all__ = ["Grammars", "TransformersEngine", "chat_for"]


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
    """Judge engine over a transformers causal LM, decoding constrained by llguidance.

    Args:
        model_path: a transformers model folder (see `evalgpu.models.resolve_model`).
        batch_size: rows decoded together (at most: a batch also holds at most
            `batch_tokens` padded prompt tokens); requests of any schema share them.
        compute: what the model computes in: "auto" (on a CPU, by what it has: see
            `evalgpu.engines._compute.choose_cpu_compute`; on a GPU, `dtype`), "bfloat16" or
            "float32". The head (`lm_head`) computes in float32 whatever the body's compute.
            The engine's `compute` attribute says what was picked, and loading prints it on
            stderr.
        dtype: the weights' torch dtype name for "auto" compute ("auto"/None: bfloat16 on
            CUDA, the CPU's choice on a CPU); a preset's `dtype` (such as "bfloat16" for the
            7B models on a GPU) arrives here.
        threads: torch threads on a CPU (None: every core this process may use,
            `evalgpu.engines._compute.cpu_threads`; fewer on a machine shared with busy
            processes).
        attn_implementation: transformers' attention, "sdpa" or "eager" (None: transformers'
            default, sdpa).
        device: "cpu", "cuda", ...; None picks CUDA when available.
        max_model_len: prompt plus reply limit in tokens (default: the model's context);
            a request over it gets an error reply instead of a crash.
        chat_template_kwargs: extra variables for the chat template (Qwen3's
            `enable_thinking=False`).
        seed: set before every batch (decoding is greedy; the seed pins any tie-breaking).
        batch_tokens: padded prompt tokens of one batch (its rows x its longest prompt):
            bounds the prefill's activations and KV cache; a longer prompt goes alone.
    """

    name = "transformers"

    def __init__(
        self,
        model_path: str,
        *,
        batch_size: int = 16,
        compute: str = "auto",
        dtype: str | None = None,
        threads: int | None = None,
        attn_implementation: str | None = None,
        device: str | None = None,
        max_model_len: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        seed: int = 0,
        batch_tokens: int = 16384,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if compute not in COMPUTES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTES)}, got {compute!r}")
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
        threads = cpu_threads(threads)
        import torch
        from transformers import AutoTokenizer, GenerationConfig

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.compute, why = resolve_compute(compute, dtype, self.device)
        self.threads = threads
        if self.device == "cpu":
            torch.set_num_threads(self.threads)
        torch_dtype = getattr(torch, self.compute)
        self.model_path = str(model_path)
        self.batch_size = batch_size
        self.seed = seed
        self.batch_tokens = batch_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.tokenizer: Any = cast(Any, AutoTokenizer.from_pretrained(model_path))
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model: Any = load_model(
            self.model_path,
            self.compute,
            self.device,
            torch_dtype,
            attn_implementation,
        )
        on = f"{self.threads} thread(s)" if self.device == "cpu" else self.device
        print(
            f"evalgpu: transformers engine computes in {self.compute} ({why}), on {on}",
            file=sys.stderr,
        )
        self.max_model_len = max_model_len or self.model.config.max_position_embeddings
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {self.tokenizer.eos_token_id, *(e for e in eos if e is not None)}
        # The model's own generation settings go: transformers fills what a call leaves unset
        # from them, and a repetition penalty or banned words (a chat model's defaults) would
        # change the scores a verdict's p is read from.
        self.model.generation_config = cast(Any, GenerationConfig)(
            eos_token_id=sorted(self.eos_ids), pad_token_id=self.tokenizer.pad_token_id
        )
        self.system_role = self._template_keeps_system()

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

    def grammars(self) -> Grammars:
        """The engine's vocabulary for constraints (`Grammars`), built on first use (~1-2 s)."""
        grammars = self.__dict__.get("_grammars")
        if grammars is None:
            size = self.model.get_output_embeddings().weight.shape[0]
            grammars = self.__dict__["_grammars"] = Grammars(self.tokenizer, size, self.eos_ids)
        return cast(Grammars, grammars)

    def index(self, schema: type[BaseModel]) -> str:
        """The compiled grammar of `schema` (llguidance), built on first use in milliseconds.

        Raises:
            ValueError: the schema does not compile.
        """
        return self.grammars().grammar(schema)

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        """Answer every request, in order (see the module docstring)."""
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
        for i in fitting:
            self.index(requests[i].schema)  # a schema that does not compile fails before decoding
        for batch in self._batches(fitting, encoded):
            for i, slot in zip(batch, self._decode(requests, encoded, batch), strict=True):
                replies[i] = self._reply(requests[i], slot)
        return cast(list[JudgeReply], replies)

    def _batches(self, fitting: list[int], encoded: list[list[int]]) -> list[list[int]]:
        """`fitting` in batches of similar length (sorted: little padding), each of at most
        `batch_size` rows and `batch_tokens` padded tokens (a longer prompt goes alone)."""
        batches: list[list[int]] = []
        for i in sorted(fitting, key=lambda i: len(encoded[i])):
            batch = batches[-1] if batches else None
            if (
                batch is None
                or len(batch) >= self.batch_size
                or (len(batch) + 1) * len(encoded[i]) > self.batch_tokens
            ):
                batches.append([i])
            else:
                batch.append(i)
        return batches

    def _reply(self, request: JudgeRequest, slot: Slot) -> JudgeReply:
        """The reply of one decoded row: parsed and validated, or an engine error."""
        if slot.error is not None:
            message = f"constrained decoding failed: {slot.error}"
            tokens = slot.prompt_tokens, len(slot.tokens), 0
            return JudgeReply(None, "", *tokens, "error", message, "engine")
        return reply_from_text(
            request,
            self.tokenizer.decode(slot.text_tokens, skip_special_tokens=False),
            prompt_tokens=slot.prompt_tokens,
            output_tokens=len(slot.tokens),
            cached_tokens=0,
            finish_reason=slot.finish or "length",
            true_probs=slot.true_probs,
        )

    def _literal_masks(self) -> Any:
        """Which tokens start `true` / `false` (`literal_masks`), built on first use."""
        # Kept out of __init__: built only by an engine that is asked for soft verdicts.
        masks = self.__dict__.get("_literals")
        if masks is None:
            size = self.model.get_output_embeddings().weight.shape[0]
            masks = self.__dict__["_literals"] = literal_masks(self.tokenizer, size)
        return masks

    def _decode(
        self, requests: Sequence[JudgeRequest], encoded: list[list[int]], batch: list[int]
    ) -> list[Slot]:
        """Greedy constrained decoding of the requests of `batch` with `model.generate()`."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        rows, grammars = [requests[i] for i in batch], self.grammars()
        slots = [
            Slot(r.max_tokens, grammars.start(r.schema), len(encoded[i]))
            for r, i in zip(rows, batch, strict=True)
        ]
        inputs = self.tokenizer.pad(
            {"input_ids": [encoded[i] for i in batch]}, return_tensors="pt"
        ).to(self.device)
        length = int(inputs["input_ids"].shape[1])
        soft = any(has_soft_verdicts(r.schema) for r in rows)
        processor = Constrained(
            slots, grammars, self.eos_ids, length, self._literal_masks() if soft else None
        )
        # The end and pad tokens come from the model's generation config, the engine's own.
        config = cast(Any, GenerationConfig)(
            max_new_tokens=max(r.max_tokens for r in rows) + 1,  # +1: the end token after
            do_sample=False,  # a row's own max_tokens, which `Constrained` forces
        )
        torch.manual_seed(self.seed)
        with torch.inference_mode():
            out = self.model.generate(
                **inputs,
                generation_config=config,
                logits_processor=LogitsProcessorList([processor]),
            )
        # The last token chosen: `generate()` stops before showing it to the processor.
        for slot, ids in zip(slots, out[:, length:].tolist(), strict=True):
            for token in ids[len(slot.tokens) :]:
                if slot.finish is None:
                    slot.take(int(token), self.eos_ids)
            slot.finish = slot.finish or "length"
        return slots
