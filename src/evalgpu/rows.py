"""Dataset rows to scorer steps: which field feeds which argument, checked on the way.

A row is a dict read from a data file. `RowSteps` reads its fields (through `--map`), checks
their types, and builds a scorer's steps, raising `InputError` that names the field when the row
cannot be scored as it is (`summary: missing (no 'summary' column or a null value)`). The runner
adds the row's label to that message. Mapping, kept explicit:

- summarization: `steps(input=row input or source, output=summary or output, source=source)`;
  an agent-shaped row (`input.inputMessages`, `output` messages) passes input and output as
  they are, and its source is the first user message unless the row has a `source`;
- context recall: `steps(input=question, output=output, ground_truth, context=context)`; an
  agent-shaped row without `context` takes its finished tool calls' results as the passages.
  No (or a blank) ground truth is scored 0 without a model call (DESIGN §1), not an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from evalgpu.data import RowError, replace_surrogates
from evalgpu.engines.base import Engine, JudgeRequest
from evalgpu.messages import (
    extract_tool_results,
    first_user_text,
    is_agent_run,
    last_assistant_text,
)
from evalgpu.results import InputError, Steps, TooLongError
from evalgpu.scorers._scorer import Scorer

__all__ = ["FIELDS", "ContextCheck", "RepeatedIds", "RowSteps", "row_id"]

FIELDS = ("id", "input", "output", "source", "summary", "ground_truth", "context")
"""Row fields; `--map FIELD=COLUMN` reads a field from another column."""


# Chat-template tokens allowed per message when checking that a prompt fits the judge.
_TEMPLATE_TOKENS = 16

# The row field that makes each judge call long, named when it does not fit the judge.
_TAG_FIELD = {
    "summarization.alignment": "source",
    "summarization.questions": "source",
    "summarization.coverage": "summary",
    "summarization.reason": "summary",
    "context_recall.claims": "ground_truth",
    "context_recall.attribution": "context",
    "context_recall.reason": "ground_truth",
}


class RowSteps:
    """Builds one row's steps for a scorer, with `mapping` (field -> column) applied.

    Args:
        mapping: field -> column, for files whose columns have other names.
        engine: the judge; when it offers `count_tokens` and `max_model_len`, every judge
            call is checked against the model's context before it is sent.
    """

    def __init__(self, mapping: dict[str, str], engine: Engine | None = None) -> None:
        self.mapping = dict(mapping)
        self.check = ContextCheck(engine)

    def _get(self, record: dict[str, Any], key: str) -> Any:
        return record.get(self.mapping.get(key, key))

    def _missing(self, key: str) -> str:
        column = self.mapping.get(key, key)
        return f"{key}: missing (no {column!r} column or a null value)"

    def steps(self, name: str, scorer: Scorer, record: dict[str, Any]) -> Steps:
        """The row's steps for `name` ("summarization" | "context-recall").

        Raises:
            InputError: a field is missing, blank or of a wrong type (the message names it).
        """
        if name == "summarization":
            steps, texts = self._summarization(scorer, record)
        else:
            steps, texts = self._context_recall(scorer, record)
        return self.check.wrap(steps, texts) if self.check.active else steps

    def _summarization(
        self, scorer: Scorer, record: dict[str, Any]
    ) -> tuple[Steps, dict[str, str]]:
        input_ = self._get(record, "input")
        source = self._get(record, "source")
        summary = self._get(record, "summary")
        if summary is None and "summary" not in self.mapping:
            summary = self._get(record, "output")
        if summary is None:
            raise InputError(self._missing("summary"))
        if not isinstance(summary, (str, list)):
            raise InputError(
                f"summary: must be a string or a list of messages, got {_kind(summary)}"
            )
        if source is not None and not isinstance(source, str):
            raise InputError(f"source: must be a string, got {_kind(source)}")
        if source is None and input_ is None:
            raise InputError(self._missing("source"))
        per_run = {"source": source} if source is not None else {}
        steps = scorer.steps(input_ if input_ is not None else source, summary, None, **per_run)
        texts = {
            "source": source if source is not None else (first_user_text(input_) or ""),
            "summary": last_assistant_text(summary) or "",
        }
        return steps, texts

    def _context_recall(
        self, scorer: Scorer, record: dict[str, Any]
    ) -> tuple[Steps, dict[str, str]]:
        input_ = self._get(record, "input")
        output = self._get(record, "output")
        truth = self._get(record, "ground_truth")
        if truth is None and "ground_truth" not in self.mapping:
            truth = record.get("groundTruth")
        context = self._get(record, "context")
        if truth is None or (isinstance(truth, str) and not truth.strip()):
            # Normative (DESIGN §1): no ground truth scores 0 without a model call.
            return scorer.steps(input_, output, truth, context=context), {}
        if context is None and is_agent_run(input_, output):
            # An agent-shaped row without a context column: its tool results are the context.
            results = extract_tool_results(output)
            if results:
                context = [
                    r["result"] if isinstance(r["result"], str) else json.dumps(r["result"])
                    for r in results
                ]
        if context is None:
            raise InputError(self._missing("context"))
        if isinstance(context, str):
            context = [context]
        if not isinstance(context, list):
            raise InputError(
                f"context: must be a list of strings or a string, got {_kind(context)}"
            )
        wrong = [p for p in context if not isinstance(p, str)]
        if wrong:
            raise InputError(
                f"context: must be a list of strings, got a list holding {_kind(wrong[0])}"
            )
        if not any(p.strip() for p in context):
            raise InputError("context: blank (no passage has text)")
        steps = scorer.steps(
            input_ if input_ is not None else "",
            output if output is not None else "",
            truth,
            context=context,
        )
        return steps, {
            "ground_truth": truth if isinstance(truth, str) else "",
            "context": "\n\n".join(context),
        }


class ContextCheck:
    """Refuses a judge call whose prompt and reply cannot fit the judge model's context.

    Used only when the engine offers `count_tokens(text) -> int` and `max_model_len: int`
    (prompt plus reply tokens the model holds); other engines are trusted to cope.
    """

    def __init__(self, engine: Engine | None) -> None:
        count = getattr(engine, "count_tokens", None)
        limit = getattr(engine, "max_model_len", None)
        self.active = callable(count) and isinstance(limit, int) and limit > 0
        self.count: Callable[[str], int] = count if callable(count) else len
        self.limit = limit if isinstance(limit, int) else 0

    def check(self, request: JudgeRequest, texts: dict[str, str]) -> None:
        overhead = _TEMPLATE_TOKENS * len(request.messages) + request.max_tokens
        # No tokenizer makes more tokens than UTF-8 bytes, so short prompts skip counting.
        if sum(len(m["content"].encode()) for m in request.messages) + overhead <= self.limit:
            return
        need = sum(self.count(m["content"]) for m in request.messages) + overhead
        if need <= self.limit:
            return
        key = _TAG_FIELD.get(request.tag, "input")
        own = texts.get(key)
        size = f"{self.count(own):,} tokens" if own else "too long"
        raise TooLongError(
            f"{key}: {size}, too long for the judge model's context of {self.limit:,} tokens "
            f"({request.tag} needs {need:,} with its instructions and reply)"
        )

    def wrap(self, steps: Steps, texts: dict[str, str]) -> Steps:
        """`steps`, with every request checked before the runner sends it."""
        try:
            try:
                requests = next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            while True:
                for request in requests:
                    self.check(request, texts)
                replies = yield requests
                try:
                    requests = steps.send(replies)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
        finally:
            steps.close()


def row_id(record: dict[str, Any] | RowError, column: str) -> tuple[str | None, str | None]:
    """The row's id (from `column`) as a string or None, and an error when of a wrong type.

    A row that could not be read has its reader's error, and its id when the row was parsed
    (lone surrogates in the id replaced, so that it can be written).
    """
    if isinstance(record, RowError):
        ident = None
        if record.record is not None:
            ident, _ = row_id(record.record, column)
        return ident, record.message
    ident = record.get(column)
    if isinstance(ident, str):
        return replace_surrogates(ident), None
    if ident is None:
        return ident, None
    if isinstance(ident, int) and not isinstance(ident, bool):
        return str(ident), None
    if isinstance(ident, float) and ident.is_integer():
        return str(int(ident)), None
    return None, f"id: must be a string or an integer, got {_kind(ident)}"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class RepeatedIds:
    """Spots rows whose id an earlier row of the run already had (in any of its files).

    Memory: a set of every distinct id string seen (about 60 bytes plus the id's length each;
    some 10 MB per 100K rows), so that repeats are found exactly in one pass; rows without an
    id are not tracked. Repeated rows are still scored: they are the user's rows.

    Args:
        examples: repeats kept (with where they are) for `summary.json`.
    """

    def __init__(self, examples: int = 10) -> None:
        self.seen: set[str] = set()
        self.repeated: set[str] = set()
        self.count = 0
        """Rows whose id was seen before (a row repeating an id twice counts twice)."""
        self.examples: list[dict[str, Any]] = []
        self.limit = examples

    def check(self, ident: str | None, file: str, row: int) -> bool:
        """Note the row's id; True the first time an id repeats (the time to name it)."""
        if ident is None:
            return False
        if ident not in self.seen:
            self.seen.add(ident)
            return False
        self.count += 1
        if ident in self.repeated:
            return False
        self.repeated.add(ident)
        if len(self.examples) < self.limit:
            self.examples.append({"id": ident, "file": file, "row": row})
        return True

    def summary(self) -> dict[str, Any]:
        """`{"count": rows repeating an id, "ids": distinct ids repeated, "examples": [...]}`."""
        return {"count": self.count, "ids": len(self.repeated), "examples": list(self.examples)}
