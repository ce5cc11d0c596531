"""Run shapes (docs/SEMANTICS.md §1.1): pure helpers that both scorers share.

A run is either agent-shaped (`input` is a dict with an `inputMessages` list, `output` a list
of message dicts with a `role`) or plain (`input` and `output` are strings).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "extract_tool_results",
    "first_user_text",
    "is_agent_run",
    "last_assistant_text",
    "message_text",
]


def is_agent_run(input: Any, output: Any) -> bool:
    """True when `input` has an `inputMessages` list and `output` is a list of messages."""
    return (
        isinstance(input, dict)
        and isinstance(input.get("inputMessages"), list)
        and isinstance(output, list)
        and all(isinstance(m, dict) and "role" in m for m in output)
    )


def _text_of_parts(parts: list[Any]) -> str:
    texts = [
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    ]
    return "\n".join(texts)


def message_text(message: dict[str, Any]) -> str:
    """A message's text: its `content` when a string, else the text parts of `content`.

    `content` may be a list of `{"type": "text", "text": ...}` parts, a dict with such
    `parts`, or a dict with a string `content`. Anything else has no text ("").
    """
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _text_of_parts(content)
    if isinstance(content, dict):
        if isinstance(content.get("parts"), list):
            text = _text_of_parts(content["parts"])
            if text.strip():
                return text
        inner = content.get("content")
        if isinstance(inner, str):
            return inner
    return ""


def _messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict) and isinstance(value.get("inputMessages"), list):
        value = value["inputMessages"]
    if isinstance(value, list):
        return [m for m in value if isinstance(m, dict)]
    return []


def first_user_text(input: Any) -> str | None:
    """The text of the first user message (plain run: the input string itself)."""
    if isinstance(input, str):
        return input
    for message in _messages(input):
        if message.get("role") == "user":
            return message_text(message)
    return None


def last_assistant_text(output: Any) -> str | None:
    """The text of the last assistant message whose text is not blank (plain run: `output`)."""
    if isinstance(output, str):
        return output
    for message in reversed(_messages(output)):
        if message.get("role") == "assistant":
            text = message_text(message)
            if text.strip():
                return text
    return None


def _tool_result(invocation: Any) -> dict[str, Any] | None:
    if not isinstance(invocation, dict) or invocation.get("state") != "result":
        return None
    return {
        "tool_name": invocation.get("toolName"),
        "tool_call_id": invocation.get("toolCallId"),
        "args": invocation.get("args"),
        "result": invocation.get("result"),
    }


def extract_tool_results(output: Any) -> list[dict[str, Any]]:
    """Every finished tool call in `output`, in order.

    Reads parts of type `tool-invocation` whose invocation has `state == "result"` (in
    `content.parts` or in a list `content`) and the legacy `content.toolInvocations`. A call
    that appears in both places (same `toolCallId` in one message) is returned once.

    Returns:
        `[{"tool_name", "tool_call_id", "args", "result"}]`.
    """
    results: list[dict[str, Any]] = []
    for message in _messages(output):
        content = message.get("content")
        parts: list[Any] = []
        legacy: list[Any] = []
        if isinstance(content, list):
            parts = content
        elif isinstance(content, dict):
            found_parts, found_legacy = content.get("parts"), content.get("toolInvocations")
            parts = found_parts if isinstance(found_parts, list) else []
            legacy = found_legacy if isinstance(found_legacy, list) else []
        seen: set[Any] = set()
        invocations = [
            p.get("toolInvocation")
            for p in parts
            if isinstance(p, dict) and p.get("type") == "tool-invocation"
        ]
        for invocation in [*invocations, *legacy]:
            found = _tool_result(invocation)
            if found is None:
                continue
            key = found["tool_call_id"]
            if key is not None and key in seen:
                continue
            seen.add(key)
            results.append(found)
    return results
