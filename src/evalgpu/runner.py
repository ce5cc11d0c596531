"""The runner: the one place that batches judge calls across rows.

A scorer describes one run as a generator of steps (`Steps`): it yields the list of judge
requests it needs next, receives their parsed replies in the same order, and finally returns a
`ScoreResult`. The runner advances every row's generator together. Each wave gathers every
ready request of every row, sends identical requests once, and makes a single
`engine.generate()` call; replies are routed back by position. A row whose request fails, or
whose steps raise, gets a result with `error` set; the other rows go on.

Replies are cached per engine, not per runner (`reply_cache`): every `Runner` of one engine,
whoever built it (`scorer.run`, `run_batch`, `run_evals`, a sweep), asks a repeated question
once. Before a wave is sent, each request is checked: a prompt holding a lone surrogate, or
one that cannot fit the judge model's context (`evalgpu.fit`), fails its row without reaching
the engine, so that it cannot fail the other rows of the wave.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from pydantic import BaseModel

from evalgpu.engines.base import Engine, ErrorKind, JudgeReply, JudgeRequest
from evalgpu.fit import ContextFit
from evalgpu.results import InputError, ScoreResult, Steps, Usage

__all__ = ["ReplyCache", "Runner", "WaveStats", "reply_cache"]

_Key = tuple[str, type, int, str]


def _key(request: JudgeRequest) -> _Key:
    return (request.tag, request.schema, request.max_tokens, json.dumps(request.messages))


class ReplyCache:
    """Successful replies of one engine, keyed by the exact request, least recently used out.

    Judges decode at temperature 0, so a repeated request (a repeated source's questions, a
    repeated ground truth's claims) would get the same reply: it is asked once per engine.

    Args:
        size: the most replies kept (a reply is a few hundred bytes of text).
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._replies: OrderedDict[_Key, JudgeReply] = OrderedDict()

    def __len__(self) -> int:
        return len(self._replies)

    def get(self, key: _Key) -> JudgeReply | None:
        reply = self._replies.get(key)
        if reply is not None:
            self._replies.move_to_end(key)
        return reply

    def put(self, key: _Key, reply: JudgeReply) -> None:
        self._replies[key] = reply
        self._replies.move_to_end(key)
        if len(self._replies) > self.size:
            self._replies.popitem(last=False)

    def clear(self) -> None:
        """Forget every reply: the next runs start cold, as on a freshly loaded engine (for a
        measurement that times runs one after another on one engine)."""
        self._replies.clear()


_CACHES: dict[int, tuple[ReplyCache, object]] = {}
"""id(engine) -> (its cache, the engine itself when it cannot be weakly referenced)."""


def reply_cache(engine: Engine) -> ReplyCache:
    """The reply cache of `engine`, made on first use and dropped with the engine."""
    key = id(engine)
    if key not in _CACHES:
        cache = ReplyCache()
        try:
            weakref.finalize(engine, _CACHES.pop, key, None)
            _CACHES[key] = (cache, None)
        except TypeError:  # no weak reference: hold the engine, so that its id stays its own
            _CACHES[key] = (cache, engine)
    return _CACHES[key][0]


@dataclass
class _Row:
    index: int
    scorer: str
    steps: Steps
    label: str | None
    usage: Usage = field(default_factory=Usage)
    pending: list[JudgeRequest] = field(default_factory=list)


@dataclass
class WaveStats:
    """What one `generate()` call carried (for progress lines and benchmarks)."""

    requests: int
    unique: int
    cache_hits: int
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int


class Runner:
    """Drives many rows' steps against one engine, one `generate()` per wave.

    A runner is cheap: it holds no replies of its own (see `reply_cache`).

    Args:
        engine: the judge.
        cache: True for the engine's shared reply cache, False for none (every request is
            sent), or a `ReplyCache` of the caller's.
        on_wave: called with a `WaveStats` after each `generate()`.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        cache: bool | ReplyCache = True,
        on_wave: Callable[[WaveStats], None] | None = None,
    ) -> None:
        self.engine = engine
        self.cache = reply_cache(engine) if cache is True else cache or None
        self.on_wave = on_wave
        self.generate_calls = 0
        self.fit = ContextFit(engine)

    def run(
        self,
        rows: Iterable[tuple[str, Steps]],
        labels: Sequence[str | None] | None = None,
    ) -> list[ScoreResult]:
        """Score every `(scorer_id, steps)` and return their results in the same order.

        `labels[i]` (such as `row 17 (id "a3")`) prefixes row i's error message.
        """
        states = [
            _Row(i, scorer, steps, labels[i] if labels else None)
            for i, (scorer, steps) in enumerate(rows)
        ]
        results: list[ScoreResult | None] = [None] * len(states)
        active = [s for s in states if self._advance(s, None, results)]
        while active:
            wave = [r for s in active for r in s.pending]
            replies = self._answer(wave)
            at = 0
            still = []
            for s in active:
                mine = replies[at : at + len(s.pending)]
                at += len(s.pending)
                if self._advance(s, mine, results):
                    still.append(s)
            active = still
        return [r for r in results if r is not None]

    def _advance(
        self,
        state: _Row,
        replies: list[tuple[JudgeReply, int]] | None,
        results: list[ScoreResult | None],
    ) -> bool:
        """Feed `replies` to a row; record its result and return False once it is done."""
        try:
            if replies is None:
                state.pending = next(state.steps)
            else:
                parsed: list[BaseModel] = []
                for request, (reply, calls) in zip(state.pending, replies, strict=True):
                    state.usage.add(
                        reply.prompt_tokens, reply.output_tokens, reply.cached_tokens, calls
                    )
                    if reply.error is not None:
                        state.steps.close()
                        kind = reply.error_kind or "engine"  # the engine did not say why
                        return self._fail(state, f"{request.tag}: {reply.error}", results, kind)
                    assert reply.parsed is not None  # no error: checked in _call
                    parsed.append(reply.parsed)
                state.pending = state.steps.send(parsed)
            self._check_sendable(state)
            return True
        except StopIteration as done:
            result: ScoreResult = done.value
            result.usage = state.usage
            results[state.index] = result
            return False
        except InputError as exc:
            return self._fail(state, str(exc), results, exc.kind)
        except Exception as exc:
            # A user extractor may raise anything, and so may a row's strange values while its
            # steps are built (a structure nested too deeply): the row, not the engine, is why.
            return self._fail(state, f"{type(exc).__name__}: {exc}", results, "input")

    def _check_sendable(self, state: _Row) -> None:
        """Fail the row (InputError) when a pending request cannot be sent: its prompt holds a
        lone surrogate, or it does not fit the judge's context (`ContextFit`)."""
        try:
            problem = _unsendable(state.pending)
            if problem is not None:
                raise InputError(problem)
            for request in state.pending:
                self.fit.check(request)
        except InputError:
            state.steps.close()
            raise

    def _fail(
        self, state: _Row, message: str, results: list[ScoreResult | None], kind: ErrorKind
    ) -> bool:
        if state.label:
            message = f"{state.label}: {message}"
        results[state.index] = ScoreResult(
            scorer=state.scorer, error=message, error_kind=kind, usage=state.usage
        )
        return False

    def _answer(self, wave: list[JudgeRequest]) -> list[tuple[JudgeReply, int]]:
        """Replies to `wave` in order, each with the number of engine calls it cost this row.

        Identical requests are sent once; the first row that asked pays for it.
        """
        unique: dict[_Key, int] = {}
        hit: dict[_Key, JudgeReply] = {}
        to_send: list[JudgeRequest] = []
        hits = 0
        for request in wave:
            key = _key(request)
            if key in unique:
                continue
            cached = self.cache.get(key) if self.cache is not None else None
            if cached is not None:
                hit[key] = cached
                unique[key] = -1
                hits += 1
                continue
            unique[key] = len(to_send)
            to_send.append(request)
        sent, costs = self._generate(to_send) if to_send else ([], [])
        if self.on_wave is not None:
            self.on_wave(
                WaveStats(
                    requests=len(wave),
                    unique=len(to_send),
                    cache_hits=hits,
                    prompt_tokens=sum(r.prompt_tokens for r in sent),
                    output_tokens=sum(r.output_tokens for r in sent),
                    cached_tokens=sum(r.cached_tokens for r in sent),
                )
            )
        for request, reply in zip(to_send, sent, strict=True):
            if reply.error is None and self.cache is not None:
                self.cache.put(_key(request), reply)
        out: list[tuple[JudgeReply, int]] = []
        paid: set[_Key] = set()
        for request in wave:
            key = _key(request)
            slot = unique[key]
            reply = sent[slot] if slot >= 0 else hit[key]
            if slot < 0 or key in paid:
                out.append((_free(reply), 0))
            else:
                paid.add(key)
                out.append((reply, costs[slot]))
        return out

    def _generate(self, requests: list[JudgeRequest]) -> tuple[list[JudgeReply], list[int]]:
        """One `generate()`, checked; replies cut at `max_tokens` get one retry at twice it.

        Returns the replies and, for each, the engine calls it took (1, or 2 when retried).
        A cut reply is never parsed leniently: still cut after the retry, it is an error.
        """
        replies = self._call(requests)
        cut = [i for i, r in enumerate(replies) if r.finish_reason == "length"]
        costs = [1] * len(replies)
        for i in cut:
            costs[i] = 2
        if cut:
            retry = [replace(requests[i], max_tokens=2 * requests[i].max_tokens) for i in cut]
            for i, request, second in zip(cut, retry, self._call(retry), strict=True):
                first = replies[i]
                second.prompt_tokens += first.prompt_tokens
                second.output_tokens += first.output_tokens
                second.cached_tokens += first.cached_tokens
                if second.finish_reason == "length":
                    second.error = f"reply cut at max_tokens={request.max_tokens} after one retry"
                    second.error_kind = "invalid_reply"
                replies[i] = second
        return replies, costs

    def _call(self, requests: list[JudgeRequest]) -> list[JudgeReply]:
        self.generate_calls += 1
        try:
            replies = list(self.engine.generate(requests))
        except Exception as exc:  # the engine broke on this wave: its rows fail, not the run
            message = f"engine {self.engine.name!r} failed: {type(exc).__name__}: {exc}"
            return [JudgeReply(None, "", 0, 0, 0, "error", message, "engine") for _ in requests]
        if len(replies) != len(requests):
            raise RuntimeError(
                f"engine {self.engine.name!r} returned {len(replies)} replies "
                f"for {len(requests)} requests"
            )
        for request, reply in zip(requests, replies, strict=True):
            if reply.error is None and not isinstance(reply.parsed, request.schema):
                reply.error = "engine returned no reply parsed against the schema"
                reply.error_kind = "invalid_reply"
        return replies


def _unsendable(requests: list[JudgeRequest]) -> str | None:
    """Why these requests cannot go to an engine, or None: a prompt holding a lone surrogate
    (a str that is not text) would make the tokenizer raise, failing every row of the wave."""
    for request in requests:
        for message in request.messages:
            content = message["content"]
            if content.isascii():
                continue
            try:
                content.encode("utf-8")
            except UnicodeEncodeError as exc:
                char = f"\\u{ord(content[exc.start]):04x}"
                return (
                    f"{request.tag}: the prompt holds a lone surrogate ({char}), which is not text"
                )
    return None


def _free(reply: JudgeReply) -> JudgeReply:
    return replace(reply, prompt_tokens=0, output_tokens=0, cached_tokens=0)
