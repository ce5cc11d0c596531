"""Per-row JSON-schema constraints for the transformers engine, by llguidance.

Its logits processor (`evalgpu.engines._decode.Constrained`) needs three things of a row's
constraint: the tokens allowed next (as a bitmask row), to advance by the chosen token, and whether
the reply is complete. `Constraint` is that interface; `Grammars` makes them, one compiled grammar
per schema, over one tokenizer. Nothing else in the engine knows which library does the work, so a
swap of backend stays in this file.

Why llguidance and not outlines-core's `Index`. outlines-core compiles a schema eagerly into a
DFA and a table of the tokens allowed in each of its states. The verdict schemas bound their
strings (`maxLength` 100-300) and lists (`minItems`/`maxItems`), which multiplies the states:
with the 151k-token vocabulary of Qwen2.5-Coder-1.5B, the index of `Alignment` alone took
minutes and gigabytes. llguidance (the grammar engine of outlines' `llguidance` backend and of
vLLM's `guidance` backend) computes each mask lazily from the grammar and a token trie: a
schema compiles at once, a matcher is small, and a mask costs little beside a step of the model
(the measurements: docs/SCHEMAS.md). The engine drives llguidance
directly: outlines' own llguidance backend is a logits processor for outlines' generation loop,
while this loop constrains each row of a continuous batch on its own.

The grammar follows the regex outlines-core built from the same schema: JSON with at most one space
where JSON allows whitespace (`[ ]?`, never a newline: a judge cannot pad a reply with
whitespace), string escapes `\\" \\\\ \\b \\f \\n \\r \\t` (not `\\u` nor `\\/`), and every
bound of the schema enforced (`minLength`/`maxLength`, `minItems`/`maxItems`, `enum`). Once
the value is complete only an end token may follow; the end tokens are the engine's. Where the
grammar forces text (a property name), llguidance allows only its canonical tokenization.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

__all__ = ["JSON_OPTIONS", "Constraint", "Grammars", "schema_text"]

JSON_OPTIONS: JsonCompileOptions = {
    "whitespace_flexible": False,
    "whitespace_pattern": "[ ]?",
}
"""llguidance's JSON-schema compiler options: at most one space where JSON allows whitespace."""


def schema_text(schema: type[BaseModel]) -> str:
    """The JSON schema of `schema` as every grammar engine gets it: its properties in field order.

    The order is part of the prompt: a grammar engine writes the properties in the order the
    schema lists them, and each verdict's boolean comes first so that the judge decides before
    it writes anything else (`evalgpu.verdicts`). Sorted keys would put `passages` before
    `supported` in an attribution check, and its p would be read after the judge had cited a
    passage: a claim in no passage then read as undecided instead of unsupported (docs/VLLM.md).
    """
    return json.dumps(schema.model_json_schema(), ensure_ascii=False)


class Constraint:
    """One row's constraint: the tokens its schema allows next, given the tokens so far.

    Made by `Grammars.start`; one per row (a matcher holds the row's parse state).
    """

    def __init__(self, matcher: Any) -> None:
        self._matcher = matcher

    def allowed(self, bitmask: Any, row: int) -> None:
        """Write the allowed tokens into row `row` of `bitmask`.

        `bitmask` is an int32 CPU tensor of shape (rows, ceil(vocabulary / 32)): token `t` is
        allowed when bit `t % 32` of word `t // 32` is set.
        """
        import torch

        words = bitmask[row]
        if words.dtype != torch.int32 or words.device.type != "cpu" or not words.is_contiguous():
            raise ValueError("the bitmask must be a contiguous int32 CPU tensor")
        # What `llguidance.torch.fill_next_token_bitmask` does, without importing that module:
        # its import compiles a torch kernel we do not use (about 1 s, in the first step).
        self._matcher.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * 4)

    def advance(self, token: int) -> None:
        """Consume the chosen token.

        Raises:
            ValueError: the token is not allowed (the mask was not applied): the message is
                llguidance's.
        """
        if not self._matcher.consume_token(token):
            raise ValueError(f"token {token} rejected: {self._matcher.get_error()}")

    @property
    def is_finished(self) -> bool:
        """Whether the reply is complete: only an end token may follow."""
        return bool(self._matcher.is_stopped())


class Grammars:
    """The compiled grammar of each schema, over one tokenizer; `start` makes row constraints.

    Args:
        tokenizer: a transformers fast tokenizer.
        vocabulary_size: the model's output-layer size (it may exceed the tokenizer's length:
            the extra ids are never allowed); the bitmask covers it.
        eos_ids: the tokens that end a reply, the only ones allowed once the value is complete.
    """

    def __init__(self, tokenizer: Any, vocabulary_size: int, eos_ids: set[int]) -> None:
        import llguidance.hf

        # About 2 s and 160 MB for a 151k-token vocabulary: once per engine.
        self._tokenizer = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=vocabulary_size, eos_token=sorted(eos_ids)
        )
        self.vocabulary_size = vocabulary_size
        self._grammars: dict[type[BaseModel], str] = {}

    def grammar(self, schema: type[BaseModel]) -> str:
        """The llguidance grammar of `schema`, compiled and checked on first use.

        Raises:
            ValueError: llguidance cannot compile the schema (the message says why).
        """
        if schema not in self._grammars:
            from llguidance import LLMatcher

            grammar = LLMatcher.grammar_from_json_schema(schema_text(schema), defaults=JSON_OPTIONS)
            is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, self._tokenizer)
            if is_error:
                raise ValueError(f"schema {schema.__name__}: {messages[0]}")
            self._grammars[schema] = grammar
        return self._grammars[schema]

    def start(self, schema: type[BaseModel]) -> Constraint:
        """A fresh constraint of `schema`, at the start of a reply."""
        from llguidance import LLMatcher

        return Constraint(LLMatcher(self._tokenizer, self.grammar(schema), log_level=0))

    def bitmask(self, rows: int) -> Any:
        """An int32 bitmask of `rows` rows over the vocabulary, every token disallowed."""
        import torch

        return torch.zeros((rows, (self.vocabulary_size + 31) // 32), dtype=torch.int32)
