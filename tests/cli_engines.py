"""Engine factories for driving the CLI with `--backend cli_engines:<factory>` (no model).

`load_engine(model, backend="module:factory")` calls `factory(model, **options)`; these wrap
the shipped `ScriptedEngine` with what a CLI test needs: a token count and a context limit, a
slow judge (for kill -9 at a random moment), or a judge that fails while an environment
variable is set. (They also show users how to bring their own engine.)
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from evalgpu.engines._parse import reply_from_text
from evalgpu.engines.base import JudgeReply, JudgeRequest
from evalgpu.engines.scripted import ScriptedEngine, answer, tagged


class LimitedEngine(ScriptedEngine):
    """A scripted judge with a tokenizer (4 characters a token) and a 4,096-token context."""

    max_model_len = 4096

    def count_tokens(self, text: str) -> int:
        return len(text) // 4


class SlowEngine(ScriptedEngine):
    """A scripted judge that sleeps `EVALGPU_TEST_SLEEP` seconds (default 0.01) per call."""

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        time.sleep(float(os.environ.get("EVALGPU_TEST_SLEEP", "0.01")))
        return super().generate(requests)


class FlakyEngine(ScriptedEngine):
    """A judge whose every call raises while `EVALGPU_TEST_BROKEN` is set."""

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        if os.environ.get("EVALGPU_TEST_BROKEN"):
            raise RuntimeError("the device fell over")
        return super().generate(requests)


class TroubledEngine(LimitedEngine):
    """A limited judge that replies out of schema to a prompt saying GARBLE, and raises on a
    wave with a prompt saying EXPLODE (one failure of each kind, for `--chunk-size 1`)."""

    def __init__(self, model: Any = None, **options: Any) -> None:
        garble = {"summarization.alignment": _garbled}
        super().__init__(model, overrides=garble, **options)

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        if any("EXPLODE" in m["content"] for r in requests for m in r.messages):
            raise RuntimeError("the device fell over")
        return super().generate(requests)


def _garbled(request: JudgeRequest) -> str | dict[str, Any]:
    return "{garbled" if "GARBLE" in request.messages[-1]["content"] else answer(request)


def limited(model: Any = None, **options: Any) -> LimitedEngine:
    return LimitedEngine(model, **options)


def slow(model: Any = None, **options: Any) -> SlowEngine:
    return SlowEngine(model, **options)


def flaky(model: Any = None, **options: Any) -> FlakyEngine:
    return FlakyEngine(model, **options)


def troubled(model: Any = None, **options: Any) -> TroubledEngine:
    return TroubledEngine(model, **options)


class BrokenEngine(ScriptedEngine):
    """A judge that breaks its contract (no replies at all) on any prompt that says BOOM."""

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        if any("BOOM" in m["content"] for r in requests for m in r.messages):
            return []
        return super().generate(requests)


def broken(model: Any = None, **options: Any) -> BrokenEngine:
    return BrokenEngine(model, **options)


class CrashingEngine(ScriptedEngine):
    """A judge whose process dies (as from an out-of-memory kill) on its first call after the
    file named by `EVALGPU_TEST_CRASH` is created... once: it deletes the file first."""

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        marker = os.environ.get("EVALGPU_TEST_CRASH")
        if marker:
            try:
                os.remove(marker)
            except FileNotFoundError:
                pass
            else:
                os._exit(1)
        return super().generate(requests)


def crashing(model: Any = None, **options: Any) -> CrashingEngine:
    return CrashingEngine(model, **options)


GRADED = ("summarization.alignment", "summarization.coverage", "context_recall.attribution")


class GradedEngine(ScriptedEngine):
    """A scripted judge whose verdict p is written in what it checks: a claim or question that
    says "grade 73" gets p 0.73, true when above 0.5 (the checks of `GRADED`; the rest go by
    rule). Labelled rows for `calibrate` write their judge's leaning into their texts."""

    def _reply(self, request: JudgeRequest) -> JudgeReply:
        user = request.messages[-1]["content"]
        item = tagged(user, "claim") + tagged(user, "question")
        found = re.search(r"grade (\d\d)", item)
        if request.tag not in GRADED or found is None:
            return super()._reply(request)
        p = int(found.group(1)) / 100
        verdict: dict[str, Any] = {
            "answered" if "coverage" in request.tag else "supported": p > 0.5
        }
        if request.tag == "context_recall.attribution":
            verdict["passages"] = [1] if p > 0.5 else []
        text = json.dumps(verdict)
        return reply_from_text(request, text, prompt_tokens=1, output_tokens=1, true_probs=[p])
