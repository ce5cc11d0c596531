"""The engine contract: what a scorer asks of a judge model, and what it gets back.

Names are a contract (docs/SEMANTICS.md §2). A scorer builds `JudgeRequest`s; the runner hands a
wave of them to `Engine.generate` in one call and reads back one `JudgeReply` per request, in
order. Anything with a `name` and that `generate` method is an engine: tests and users may
bring their own.

Soft verdicts: an engine that can read its own probabilities sets `p` on the boolean verdicts of
`JudgeReply.parsed` (the probability of `true`, renormalised over `true` and `false`), through
`evalgpu.verdicts.attach_p` (or `reply_from_text(..., true_probs=...)`). An engine that cannot
leaves `p` None; nothing else in the contract changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

__all__ = ["Engine", "ErrorKind", "JudgeReply", "JudgeRequest"]

ErrorKind = Literal["input", "too_long", "invalid_reply", "engine"]
"""Why a result failed: `input` (a bad row or field), `too_long` (a text too long for the
judge's context), `invalid_reply` (a reply not valid for its schema, or cut twice at
max_tokens), `engine` (the engine raised or failed the request)."""


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call with its own constrained JSON schema."""

    tag: str
    """Which step asks: "summarization.alignment" | "summarization.questions" |
    "summarization.coverage" | "summarization.reason" | "context_recall.claims" |
    "context_recall.attribution" | "context_recall.reason"."""
    messages: list[dict[str, str]]
    """Chat messages, `[{"role": "system" | "user", "content": str}]`."""
    schema: type[BaseModel]
    """The reply must validate against this model; engines constrain decoding to its JSON schema."""
    max_tokens: int
    """Output token budget; the schema bounds are chosen so that a valid reply fits in it."""


@dataclass
class JudgeReply:
    """The engine's answer to one `JudgeRequest`."""

    parsed: BaseModel | None
    """The reply validated against the request's schema; None only together with `error`."""
    text: str
    """The raw generated text."""
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    """Prompt tokens served from the engine's prefix cache (0 where the engine has none)."""
    finish_reason: str
    """"stop" | "length" | ..."""
    error: str | None = None
    error_kind: ErrorKind | None = None
    """Why `error` is set, when the engine knows: "too_long" (the prompt and reply do not fit
    the model's context), "invalid_reply" (cut, or not valid for the schema), "engine".
    None with an error: the runner counts it as "engine". (Added to the contract with a
    default, so that engines written before it still conform.)"""


@runtime_checkable
class Engine(Protocol):
    """A judge model. `generate` answers every request of one wave, in order."""

    name: str

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]: ...
