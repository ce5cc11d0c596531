"""The transformers engine: constrained decoding over a transformers model (CPU default).

A thin adapter, like outlines' own backend files: `chat_for` (the chat a model's template can
take), and `TransformersEngine`, which loads the model and tokenizer, renders and tokenizes the
prompts, refuses those over the context length, hands the rest to the decode loop
(`evalgpu.engines._decode`: continuous batching, shared-prefix prefill, one constraint per
row) with its prefix store (`evalgpu.engines._prefix`: a source's prefix computed in one wave
serves the next waves) and turns the finished slots into replies with `reply_from_text`, like
every engine.
The constraints come from llguidance (`evalgpu.engines._constraint`), the grammar engine of
outlines' llguidance backend, driven directly: it compiles a schema lazily, in milliseconds,
where outlines-core's eager index took minutes and gigabytes on a 151k-token vocabulary.
Soft verdicts: the loop records p(true) where a row chooses a boolean verdict, and the reply
attaches it to the parsed verdicts (`evalgpu.verdicts.attach_p`).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel

from evalgpu.engines._compute import COMPUTES, cpu_threads, load_model, resolve_compute
from evalgpu.engines._constraint import Grammars
from evalgpu.engines._decode import Decoder, Slot, literal_masks
from evalgpu.engines._heap import map_large_blocks
from evalgpu.engines._parse import reply_from_text
from evalgpu.engines._prefix import PrefixStore, auto_budget
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
    """Judge engine over a transformers causal LM, decoding constrained by llguidance.

    Args:
        model_path: a transformers model folder (see `evalgpu.models.resolve_model`).
        batch_size: rows decoded together; requests of any schema share them.
        compute: what the model computes in: "auto" (on a CPU, by what it has: see
            `evalgpu.engines._compute.choose_cpu_compute`; on a GPU, `dtype`), or one of
            "bfloat16", "int8" (int8 Linear layers, activations per token, CPU only),
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
        seed: set before every wave (decoding is greedy; the seed pins any tie-breaking).
        prefill_tokens: padded prompt tokens of one prefill group (its rows x its longest
            remainder after the shared prefix): bounds the KV cache copied per group.
        prefill_chunk: tokens of one prefill forward pass: a longer prompt (or group) is
            computed in chunks appended to the KV cache, so that activations and attention
            scores are bounded by chunk x length, not length x length (see
            `evalgpu.engines._decode.chunk_spans`). Replies are the same up to float rounding.
        prefix_cache_mb: the byte budget, in MiB, of the prefix store, which keeps the KV
            caches of prompt prefixes across `generate` calls (`evalgpu.engines._prefix`:
            a source's prefix is computed once for the questions wave and the verify wave
            after it); None: a quarter of the memory available once the model is loaded
            (`evalgpu.engines._prefix.auto_budget`); 0 turns it off. Replies are the same
            up to float rounding.
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
        prefill_tokens: int = 8192,
        prefill_chunk: int = 1024,
        prefix_cache_mb: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if compute not in COMPUTES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTES)}, got {compute!r}")
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {prefill_chunk}")
        if prefix_cache_mb is not None and prefix_cache_mb < 0:
            raise ValueError(f"prefix_cache_mb must be >= 0, got {prefix_cache_mb}")
        threads = cpu_threads(threads)
        import torch
        from transformers import AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.compute, why = resolve_compute(compute, dtype, self.device)
        self.threads = threads
        if self.device == "cpu":
            torch.set_num_threads(self.threads)
            map_large_blocks()  # KV caches reallocated every step: see evalgpu.engines._heap
        torch_dtype = getattr(torch, "float32" if self.compute == "int8" else self.compute)
        self.model_path = str(model_path)
        self.batch_size = batch_size
        self.seed = seed
        self.prefill_tokens = prefill_tokens
        self.prefill_chunk = prefill_chunk
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
        budget = auto_budget(self.device) if prefix_cache_mb is None else prefix_cache_mb << 20
        self.prefix_store = PrefixStore(budget) if budget else None
        on = f"{self.threads} thread(s)" if self.device == "cpu" else self.device
        print(
            f"evalgpu: transformers engine computes in {self.compute} ({why}), on {on}",
            file=sys.stderr,
        )
        self.max_model_len = max_model_len or self.model.config.max_position_embeddings
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {self.tokenizer.eos_token_id, *(e for e in eos if e is not None)}
        self.system_role = self._template_keeps_system()
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

    def reset_prefix_cache(self) -> None:
        """Forget every stored prompt prefix (benchmarks: each mode starts cold)."""
        if self.prefix_store is not None:
            self.prefix_store.clear()

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
            if slot.error is not None:
                message = f"constrained decoding failed: {slot.error}"
                replies[i] = JudgeReply(
                    None,
                    "",
                    slot.prompt_tokens,
                    len(slot.tokens),
                    slot.cached,
                    "error",
                    message,
                    "engine",
                )
                continue
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
            self.grammars(),
            device=self.device,
            eos_ids=self.eos_ids,
            cache_arg=self._cache_arg,
            batch_size=self.batch_size,
            prefill_tokens=self.prefill_tokens,
            prefill_chunk=self.prefill_chunk,
            seed=self.seed,
            literals=self._literal_masks()
            if any(has_soft_verdicts(r.schema) for r in requests)
            else None,
            prefix_store=self.prefix_store,
        )
        if self.prefix_store is not None:
            self.prefix_store.new_wave()  # one wave per generate: old entries expire
        for request in requests:
            self.index(request.schema)  # a schema that does not compile fails before decoding
        return decoder.run(encoded, [r.max_tokens for r in requests], [r.schema for r in requests])
