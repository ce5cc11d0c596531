"""The scripted engine: a deterministic judge without a model (`backend="scripted"`).

For users who test their own pipelines (file formats, column maps, resume, report) without a
model, and for evalgpu's own tests and benchmarks: like inspect's `mockllm` and httpx's
`MockTransport`, rules stand in for the judge, and any step can be overridden by tag. Its
scores mean nothing about quality; they are repeatable. The rules:

- claims are the sentences of the text they are listed from (the summary, the ground truth);
- a claim is supported (attributed) when every content word of it occurs in the source (in one
  passage, and the passages cited are those);
- questions are "Is it true that <sentence>?" for the source's sentences; the source answers one
  "yes", and the summary answers it, when every content word of its sentence occurs in that text;
- soft verdicts: the probability `p` of each boolean is `true_p` (0.9) for `true` and
  `1 - true_p` for `false`, attached through the same path as the real engines' (one value per
  literal of the reply text, in order); `true_p=None` plays an engine that cannot read them.

Every reply is JSON text parsed with the same strict parser as the real engines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from evalgpu.engines._parse import literal_starts, reply_from_text
from evalgpu.engines.base import JudgeReply, JudgeRequest

__all__ = ["ScriptedEngine", "answer"]

STOP = {
    "the",
    "and",
    "was",
    "were",
    "for",
    "with",
    "that",
    "this",
    "from",
    "has",
    "had",
    "have",
    "his",
    "her",
    "its",
    "are",
    "is",
    "it",
    "he",
    "she",
    "they",
    "by",
    "in",
    "of",
    "to",
    "a",
    "an",
    "on",
    "at",
    "as",
    "be",
    "true",
    "which",
    "who",
    "did",
    "does",
    "do",
}


def tagged(text: str, tag: str) -> str:
    """The text between <tag> and </tag> in a prompt (the last such block)."""
    found = re.findall(rf"<{tag}>\n(.*?)\n</{tag}>", text, flags=re.S)
    return found[-1] if found else ""


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def claims(text: str) -> list[str]:
    """A text's sentences as its claims, within the schema's bounds (10 claims of 200 chars)."""
    return [s[:200] for s in sentences(text)][:10]


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if w not in STOP}


def listed(text: str) -> list[str]:
    """Items of a numbered list written by `evalgpu.prompting.numbered`."""
    return [re.sub(r"^\d+\. ", "", line) for line in text.splitlines() if line.strip()]


def question_fact(question: str) -> str:
    return re.sub(r"^Is it true that |\?$", "", question)


def answer(request: JudgeRequest) -> dict[str, Any]:
    """The rule-based reply to one request, as a dict."""
    user = request.messages[-1]["content"]
    tag = request.tag
    if tag == "summarization.claims":
        return {"claims": claims(tagged(user, "summary"))}
    if tag == "context_recall.claims":
        return {"claims": claims(tagged(user, "answer"))}
    if tag == "summarization.questions":
        n = int(re.search(r"at most (\d+)", user).group(1))  # type: ignore[union-attr]
        # A closed question: no quote, backslash or question mark inside, and not too long.
        facts = [
            " ".join(re.sub(r'[?"\\]', "", s).rstrip(".!").split())
            for s in sentences(tagged(user, "source"))
        ]
        return {"questions": [f"Is it true that {f[:150]}?" for f in facts][:n]}
    if tag == "summarization.alignment":
        return {"supported": words(tagged(user, "claim")) <= words(tagged(user, "source"))}
    if tag == "summarization.question_check":
        fact = words(question_fact(tagged(user, "question")))
        return {"yes": fact <= words(tagged(user, "source"))}
    if tag == "summarization.coverage":
        fact = words(question_fact(tagged(user, "question")))
        return {"answered": fact <= words(tagged(user, "summary"))}
    if tag == "context_recall.attribution":
        passages = [words(p) for p in re.findall(r"<passage>\n(.*?)\n</passage>", user, flags=re.S)]
        claim = words(tagged(user, "claim"))
        found = [i for i, p in enumerate(passages, 1) if claim <= p]
        return {"supported": bool(found), "passages": found}
    if tag.endswith(".reason"):
        return {"reason": "The judge wrote this reason."}
    raise AssertionError(f"the scripted engine has no rule for {tag}")


Override = Callable[[JudgeRequest], "str | dict[str, Any] | JudgeReply"]


class ScriptedEngine:
    """An `Engine` that answers by rule, records every call, and can be scripted per tag.

    Args:
        overrides: tag -> function of the request returning a dict (sent as JSON), raw text,
            or a whole `JudgeReply`.
        model: ignored (so that `load_engine(model, backend="scripted")` works with any model).
        record: keep every request in `calls` (tests read them); a long sweep turns it off,
            so that memory stays flat (`load_engine` does).
        true_p: the `p` of a `true` verdict (a `false` one gets `1 - true_p`); None: no `p`,
            like an engine that cannot read its probabilities.
    """

    name = "scripted"

    def __init__(
        self,
        model: Any = None,
        overrides: dict[str, Override] | None = None,
        *,
        record: bool = True,
        true_p: float | None = 0.9,
        **_: Any,
    ) -> None:
        if true_p is not None and not 0 <= true_p <= 1:
            raise ValueError(f"true_p must be in [0, 1] or None, got {true_p!r}")
        self.overrides = dict(overrides or {})
        self.record = record
        self.true_p = true_p
        self.calls: list[list[JudgeRequest]] = []

    @property
    def requests(self) -> list[JudgeRequest]:
        """Every request received, in order."""
        return [r for call in self.calls for r in call]

    def by_tag(self, tag: str) -> list[JudgeRequest]:
        """The requests received for one step."""
        return [r for r in self.requests if r.tag == tag]

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        """Answer every request by rule (or by its tag's override), in order."""
        if self.record:
            self.calls.append(list(requests))
        return [self._reply(r) for r in requests]

    def _reply(self, request: JudgeRequest) -> JudgeReply:
        made: Any = (
            self.overrides[request.tag](request)
            if request.tag in self.overrides
            else answer(request)
        )
        if isinstance(made, JudgeReply):
            return made
        text = made if isinstance(made, str) else json.dumps(made, ensure_ascii=False)
        prompt = sum(len(m["content"]) for m in request.messages) // 4
        true_probs = None
        if self.true_p is not None:
            true_probs = [self.true_p if v else 1 - self.true_p for _, v in literal_starts([text])]
        return reply_from_text(
            request,
            text,
            prompt_tokens=prompt,
            output_tokens=len(text) // 4 + 1,
            true_probs=true_probs,
        )
