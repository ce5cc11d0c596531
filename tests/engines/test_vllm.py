"""The vLLM engine on the default model: one engine, one mixed-schema batch, one scorer run.

Runs where vLLM is importable (`.venv` where scripts/setup installed vLLM's CPU build, or a GPU
machine; scripts/test runs it in a pytest process of its own); skipped elsewhere. On a CPU build it
needs `VLLM_CPU_KVCACHE_SPACE` (GiB of KV cache; 2 is plenty) and takes about 2 minutes, most of it
loading the model and compiling the schemas, plus about 2 more for the scorer run (marked `slow`:
`-m "vllm and not slow"` leaves it out). The model folder comes from `EVALGPU_TEST_MODEL`, else the
repo's `models/smollm2-135m-instruct`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field

pytest.importorskip("vllm")

from evalgpu import create_summarization_scorer
from evalgpu.engines import JudgeRequest
from evalgpu.engines.vllm import VLLMEngine
from evalgpu.prompting import judge_chat
from evalgpu.scorers.context_recall import claims_request
from evalgpu.scorers.summarization import ENGLISH_CLOSED, questions_request
from evalgpu.verdicts import Claims, questions_schema

pytestmark = pytest.mark.vllm

MODEL = Path(
    os.environ.get(
        "EVALGPU_TEST_MODEL",
        Path(__file__).resolve().parents[2] / "models" / "smollm2-135m-instruct",
    )
)
SOURCE = "The Golden Gate Bridge opened in 1937. It spans 2.7 kilometres."


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


@pytest.fixture(scope="module")
def engine() -> Iterator[VLLMEngine]:
    if not (MODEL / "config.json").is_file():
        pytest.skip(
            f"no model at {MODEL}: run `python -m evalgpu models pull` or set EVALGPU_TEST_MODEL"
        )
    if on_cpu():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        # A CPU build has fast kernels for float32 only; compiling the model takes minutes.
        engine = VLLMEngine(MODEL, dtype="float32", enforce_eager=True, max_model_len=4096)
    else:
        engine = VLLMEngine(
            MODEL, enforce_eager=True, max_model_len=4096, gpu_memory_utilization=0.2
        )
    yield engine
    engine.close()  # now, while pytest still captures vLLM's shutdown log


def test_one_batch_with_two_schemas(engine):
    requests = [
        claims_request("The Eiffel Tower is in Paris. It was finished in 1889."),
        questions_request(SOURCE, 3),
    ]
    replies = engine.generate(requests)
    assert len(replies) == 2
    for reply in replies:
        assert reply.error is None, reply.error
        assert reply.finish_reason == "stop"
        assert reply.prompt_tokens > 0
        assert reply.output_tokens > 0
        assert isinstance(reply.cached_tokens, int)
        assert 0 <= reply.cached_tokens <= reply.prompt_tokens
    assert isinstance(replies[0].parsed, Claims)
    # an English source: closed questions only (the pattern is part of the schema)
    assert requests[1].schema is questions_schema(3, ENGLISH_CLOSED)
    assert isinstance(replies[1].parsed, requests[1].schema)
    assert len(replies[1].parsed.questions) <= 3

    # The same wave again: greedy decoding gives the same replies, and the prompts, already
    # seen, are served from the prefix cache.
    again = engine.generate(requests)
    assert [r.text for r in again] == [r.text for r in replies]
    assert all(r.cached_tokens > 0 for r in again)


def test_a_prompt_longer_than_the_model_fails_alone(engine):
    too_long = claims_request("The river is long. " * 1400)  # > max_model_len=4096 tokens
    replies = engine.generate([too_long, questions_request(SOURCE, 3)])
    assert replies[0].parsed is None
    assert replies[0].error is not None
    assert replies[0].error.startswith("vLLM rejected the request: ")
    # Known from the exception's type and fields (VLLMValidationError.parameter), not its words.
    assert replies[0].error_kind == "too_long"
    assert replies[1].error is None


def test_a_schema_the_backend_cannot_take_fails_alone_as_an_engine_error(engine):
    class Lookahead(BaseModel):  # pydantic keeps the pattern as given; no JSON grammar takes it
        word: str = Field(json_schema_extra={"pattern": "(?=x)x+"})

    ask = judge_chat('Reply with JSON: {"word": "xx"}')
    replies = engine.generate(
        [JudgeRequest("t", ask, Lookahead, 16), claims_request("The bridge opened in 1937.")]
    )
    assert replies[0].parsed is None and replies[0].error is not None
    assert replies[0].error_kind == "engine"  # rejected, but not for its length
    assert replies[1].error is None, replies[1].error


def test_it_counts_tokens_for_the_context_length_check(engine):
    assert engine.max_model_len == 4096
    assert engine.count_tokens("") == 0
    assert 0 < engine.count_tokens("The Golden Gate Bridge opened in 1937.") < 20


def test_an_enum_bounds_the_numbers_the_judge_can_write(engine):
    # verdicts.attribution_schema writes passage numbers this way because vLLM's outlines
    # backend ignores integer minimum/maximum; an enum it honours.
    class Cited(BaseModel):
        passages: list[Literal[1, 2]] = Field(min_length=1, max_length=2)

    ask = judge_chat('Reply with JSON: {"passages": [7, 9]}')
    reply = engine.generate([JudgeRequest("t", ask, Cited, 24)])[0]
    assert reply.error is None, reply.error
    assert set(reply.parsed.passages) <= {1, 2}


@pytest.mark.slow  # about 2 minutes on a CPU: compiles two more schemas, ~750 output tokens
def test_summarization_scorer_end_to_end(engine):
    scorer = create_summarization_scorer(engine, max_questions=3)
    result = scorer.run(input=SOURCE, output="The Golden Gate Bridge opened in 1937.")
    assert result.error is None, result.error
    assert result.score is not None and 0.0 <= result.score <= 1.0
    assert len(result.preprocess_step_result["questions"]) <= 3
    assert result.usage.prompt_tokens > 0
