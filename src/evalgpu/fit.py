"""Does a judge call fit the judge model's context? The runner asks before it sends one.

A request that cannot fit (its prompt, the chat template's tokens and its reply budget over the
model's `max_model_len`) would fail inside the engine, or worse, be cut. The runner checks each
request before its wave and fails that row with an error that names the row's field that made
the call long, and how long that field is. The field's text is read back from the request's own
fenced block (`prompting.fenced`), so no other layer has to work out the scorers' texts again.
"""

from __future__ import annotations

from collections.abc import Callable

from evalgpu.engines.base import Engine, JudgeRequest
from evalgpu.prompting import fenced
from evalgpu.results import TooLongError

__all__ = ["FIELD_OF_TAG", "ContextFit"]

# Chat-template tokens allowed per message when checking that a prompt fits the judge.
TEMPLATE_TOKENS = 16

FIELD_OF_TAG: dict[str, tuple[str, str | None]] = {
    "summarization.alignment": ("source", "source"),
    "summarization.questions": ("source", "source"),
    "summarization.coverage": ("summary", "summary"),
    "summarization.reason": ("summary", None),
    "context_recall.claims": ("ground_truth", "answer"),
    "context_recall.attribution": ("context", "passage"),
    "context_recall.reason": ("ground_truth", None),
}
"""Tag -> (the row field that makes the call long, the fence that holds it in the prompt)."""


class ContextFit:
    """Refuses a judge call whose prompt and reply cannot fit the judge model's context.

    Active only when the engine offers `count_tokens(text) -> int` and `max_model_len: int`
    (prompt plus reply tokens the model holds); other engines are trusted to cope.
    """

    def __init__(self, engine: Engine) -> None:
        count = getattr(engine, "count_tokens", None)
        limit = getattr(engine, "max_model_len", None)
        self.active = callable(count) and isinstance(limit, int) and limit > 0
        self.count: Callable[[str], int] = count if callable(count) else len
        self.limit = limit if isinstance(limit, int) else 0

    def check(self, request: JudgeRequest) -> None:
        """Return when `request` fits (or the engine cannot tell).

        Raises:
            TooLongError: it does not fit; the message names the field and the sizes.
        """
        if not self.active:
            return
        overhead = TEMPLATE_TOKENS * len(request.messages) + request.max_tokens
        # No tokenizer makes more tokens than UTF-8 bytes, so short prompts skip counting.
        if sum(len(m["content"].encode()) for m in request.messages) + overhead <= self.limit:
            return
        need = sum(self.count(m["content"]) for m in request.messages) + overhead
        if need <= self.limit:
            return
        field, fence = FIELD_OF_TAG.get(request.tag, ("input", None))
        own = "\n\n".join(fenced(request.messages[-1]["content"], fence)) if fence else ""
        size = f"{self.count(own):,} tokens" if own else "too long"
        raise TooLongError(
            f"{field}: {size}, too long for the judge model's context of {self.limit:,} tokens "
            f"({request.tag} needs {need:,} with its instructions and reply)"
        )
