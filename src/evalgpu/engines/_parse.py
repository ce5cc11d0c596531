"""Turn generated text into a `JudgeReply`: the one place where replies are validated.

Every engine calls `reply_from_text`, so the rule is the same everywhere: a reply is parsed
strictly against its schema or it is an error. A reply cut at `max_tokens` is an error even
when its prefix happens to parse; nothing is repaired or parsed leniently.

Soft verdicts (see `evalgpu.verdicts`): an engine that reads its own probabilities passes
`true_probs`, one probability of `true` per boolean literal of the reply, in text order, and
they are attached to the parsed verdicts. The helpers below are what engines share to find
those literals: `literal_starts` in a reply's pieces (tokens), and `literal_class` of a token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import ValidationError

from evalgpu.engines.base import JudgeReply, JudgeRequest
from evalgpu.verdicts import attach_p

__all__ = ["literal_class", "literal_starts", "reply_from_text", "soft_probability"]

# What may precede a JSON value in the same token: whitespace, the end of a key, a colon, or
# list punctuation. A token made only of these commits to no value.
_LEAD = ' \t\n\r":,['
# Byte-level BPE and SentencePiece spell a space or newline with these in raw vocabulary pieces;
# some vLLM versions return such pieces as `decoded_token`. They mean whitespace here.
_MARKERS = str.maketrans({"\u0120": " ", "\u2581": " ", "\u010a": "\n"})


def literal_class(token: str) -> Literal["true", "false", "lead", "other"]:
    """Which boolean literal a token commits to, where a JSON value may start.

    "true" (or "false") when, after any leading `_LEAD` characters, the token is a prefix of
    that literal ("t", " tr", ": true") or the whole literal followed by punctuation ("true,");
    "lead" when it is only such characters; "other" for anything else ("the", "True", "1").
    """
    token = token.translate(_MARKERS)
    rest = token.lstrip(_LEAD)
    if not rest:
        return "lead"
    if token[: len(token) - len(rest)].rstrip().endswith('"'):
        return "other"  # a quote right before a letter opens a string: `"t` is no literal
    for word in ("true", "false"):
        if word.startswith(rest):
            return word
        if rest.startswith(word) and not (rest[len(word)].isalnum() or rest[len(word)] == "_"):
            return word
    return "other"


def literal_starts(pieces: Sequence[str]) -> list[tuple[int, bool]]:
    """`(piece index, value)` of each `true`/`false` literal of a JSON text cut into pieces.

    The piece holds the literal's first character: where a token-by-token decoder chose
    between `true` and `false`. Characters inside JSON strings are skipped (with their escapes),
    so "the" in a reason is not a literal.
    """
    found: list[tuple[int, bool]] = []
    in_string = escaped = in_word = False
    for index, piece in enumerate(pieces):
        for char in piece.translate(_MARKERS):
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string, in_word = True, False
            elif char.isalpha():
                if not in_word and char in "tf":
                    found.append((index, char == "t"))
                in_word = True
            else:
                in_word = False
    return found


def soft_probability(true_mass: float, false_mass: float) -> float | None:
    """p(true) renormalised over the two literals; None when neither has any mass."""
    total = true_mass + false_mass
    return true_mass / total if total > 0 else None


def reply_from_text(
    request: JudgeRequest,
    text: str,
    *,
    prompt_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    finish_reason: str = "stop",
    true_probs: Sequence[float] | None = None,
) -> JudgeReply:
    """Validate `text` against `request.schema` and wrap it with its token counts.

    `true_probs`: the engine's probability of `true` at each boolean literal of `text`, in
    order (None: the engine cannot read them; every verdict's `p` stays None).
    """
    reply = JudgeReply(
        parsed=None,
        text=text,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        finish_reason=finish_reason,
    )
    if finish_reason == "length":
        reply.error = f"reply cut at max_tokens={request.max_tokens}"
        reply.error_kind = "invalid_reply"
        return reply
    try:
        reply.parsed = request.schema.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        reply.error = f"reply does not match the schema ({where}: {first['msg']})"
        reply.error_kind = "invalid_reply"
        return reply
    if true_probs is not None:
        attach_p(reply.parsed, true_probs)
    return reply
