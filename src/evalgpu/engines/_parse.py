"""Turn generated text into a `JudgeReply`: the one place where replies are validated.

Every engine calls `reply_from_text`, so the rule is the same everywhere: a reply is parsed
strictly against its schema or it is an error. A reply cut at `max_tokens` is an error even
when its prefix happens to parse; nothing is repaired or parsed leniently.
"""

from __future__ import annotations

from pydantic import ValidationError

from evalgpu.engines.base import JudgeReply, JudgeRequest


def reply_from_text(
    request: JudgeRequest,
    text: str,
    *,
    prompt_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    finish_reason: str = "stop",
) -> JudgeReply:
    """Validate `text` against `request.schema` and wrap it with its token counts."""
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
