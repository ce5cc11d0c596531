"""The vLLM engine's adapter, without vLLM: requests -> chat + sampling settings, outputs ->
replies, and the engine's batching around `LLM.chat()`, driven by a stand-in `vllm` module.

The real engine is tested in test_vllm.py (needs vLLM).
"""

from __future__ import annotations

import ctypes.util
import json
import math
import os
import subprocess
import sys
import types
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest

import evalgpu.engines.vllm as vllm_module
from evalgpu.engines._constraint import JSON_OPTIONS
from evalgpu.engines.vllm import (
    CPU_KV_CACHE_GIB,
    LOGPROBS,
    REGEX_COMPILATION_TIMEOUT_S,
    STRUCTURED_OUTPUTS_BACKENDS,
    VLLMEngine,
    json_schema,
    rejection_kind,
    reply_from_output,
    to_vllm,
    true_probs,
)
from evalgpu.scorers.context_recall import attribution_request, claims_request
from evalgpu.scorers.summarization import ENGLISH_CLOSED, alignment_request, questions_request
from evalgpu.verdicts import Claims, Supported, attribution_schema, questions_schema

SOURCE = "The bridge opened in 1932. It carries eight lanes."


def test_messages_pass_through_in_order():
    requests = [claims_request("Paris is in France."), questions_request(SOURCE, 3)]
    conversations, _ = to_vllm(requests)
    assert conversations == [r.messages for r in requests]
    assert conversations[0] is not requests[0].messages  # a copy: vLLM may not alter ours


def test_each_request_carries_its_own_schema():
    requests = [claims_request("Paris is in France."), questions_request(SOURCE, 3)]
    _, settings = to_vllm(requests, backend="xgrammar")
    schemas = [json.loads(s["structured_outputs"]["json"]) for s in settings]
    assert schemas == [
        Claims.model_json_schema(),
        questions_schema(3, ENGLISH_CLOSED).model_json_schema(),
    ]
    assert schemas[1]["properties"]["questions"]["maxItems"] == 3
    assert schemas[1]["properties"]["questions"]["items"]["pattern"] == ENGLISH_CLOSED


def test_sampling_is_greedy_seeded_and_budgeted():
    requests = [alignment_request(SOURCE, "It opened in 1932."), questions_request(SOURCE, 3)]
    _, settings = to_vllm(requests, seed=7)
    for request, s in zip(requests, settings, strict=True):
        assert s["max_tokens"] == request.max_tokens
        assert s["temperature"] == 0.0
        assert s["seed"] == 7
    # Logprobs only where the schema has boolean verdicts, whose p they give.
    assert settings[0]["logprobs"] == LOGPROBS
    assert set(settings[1]) == {"max_tokens", "temperature", "seed", "structured_outputs"}


def test_json_schema_is_built_once_per_class():
    assert json_schema(Claims) is json_schema(Claims)


def test_guidance_gets_the_transformers_engines_grammar_options():
    # The same llguidance grammar in both engines: at most one space where JSON allows it.
    assert json.loads(json_schema(Claims, "guidance"))["x-guidance"] == JSON_OPTIONS
    for backend in ("xgrammar", "outlines"):
        assert json.loads(json_schema(Claims, backend)) == Claims.model_json_schema()
    _, settings = to_vllm([claims_request("A."), claims_request("B.")])
    assert settings[0]["structured_outputs"]["json"] is settings[1]["structured_outputs"]["json"]


@pytest.mark.parametrize("backend", STRUCTURED_OUTPUTS_BACKENDS)
def test_every_backend_gets_the_verdict_first(backend):
    # A grammar engine writes properties in the schema's order: the verdict must come first so
    # that its p is read before the judge cites a passage (sorted keys put `passages` first).
    schema = json.loads(json_schema(attribution_schema(3), backend))
    assert list(schema["properties"]) == ["supported", "passages"]


def test_empty_wave():
    assert to_vllm([]) == ([], [])


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"max_tokens": 0}, ValueError, r"^requests\[0\]\.max_tokens must be >= 1, got 0$"),
        ({"max_tokens": 1.5}, TypeError, r"^requests\[0\]\.max_tokens must be an int, got 1\.5$"),
        ({"messages": []}, ValueError, r"^requests\[0\]\.messages must not be empty"),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            ValueError,
            r"^requests\[0\]\.messages\[0\]\.role must be one of system, user, assistant, "
            r"got 'tool'$",
        ),
        (
            {"messages": [{"role": "user", "content": None}]},
            ValueError,
            r"^requests\[0\]\.messages\[0\]\.content must be a str, got NoneType$",
        ),
        ({"schema": dict}, TypeError, r"^requests\[0\]\.schema must be a pydantic BaseModel"),
    ],
)
def test_malformed_request_is_named(change, error, match):
    bad = replace(claims_request("Paris is in France."), **change)
    with pytest.raises(error, match=match):
        to_vllm([bad])


def test_not_a_request_is_named():
    with pytest.raises(TypeError, match=r"^requests\[1\] must be a JudgeRequest, got dict$"):
        to_vllm([claims_request("A."), {"tag": "x"}])  # type: ignore[list-item]


# RequestOutput -> JudgeReply, with stand-ins shaped like vllm.outputs.


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str | None = "stop"
    logprobs: list[dict[int, Any]] | None = None


@dataclass
class Output:
    outputs: list[Completion]
    prompt_token_ids: list[int] | None = field(default_factory=lambda: [1] * 40)
    num_cached_tokens: int | None = 32


def test_reply_counts_tokens_and_cache():
    request = claims_request("Paris is in France.")
    reply = reply_from_output(
        request, Output([Completion('{"claims": ["Paris is in France."]}', [5] * 9)])
    )
    assert reply.error is None
    assert isinstance(reply.parsed, Claims)
    assert reply.parsed.claims == ["Paris is in France."]
    assert (reply.prompt_tokens, reply.output_tokens, reply.cached_tokens) == (40, 9, 32)
    assert reply.finish_reason == "stop"


def test_no_cache_information_counts_zero():
    output = Output([Completion('{"claims": []}', [5])], num_cached_tokens=None)
    assert reply_from_output(claims_request("A."), output).cached_tokens == 0


def test_cut_reply_is_an_error_never_parsed():
    request = claims_request("A.")
    output = Output([Completion('{"claims": ["A."]}', [5] * 3, finish_reason="length")])
    reply = reply_from_output(request, output)
    assert reply.parsed is None
    assert reply.finish_reason == "length"
    assert reply.error == f"reply cut at max_tokens={request.max_tokens}"
    assert reply.error_kind == "invalid_reply"


# Soft verdicts: p(true) from the logprobs at the token where each literal starts.


@dataclass
class Logprob:
    logprob: float
    decoded_token: str | None


def tokenised(pieces: list[str], at: dict[int, dict[str, float]]) -> Completion:
    """A completion whose token i is pieces[i] (id i), with extra logprob entries `at[i]`
    (text -> logprob, ids from 1000); the sampled token's own logprob is -0.1."""
    logprobs = []
    for i, piece in enumerate(pieces):
        entries = {i: Logprob(-0.1, piece)}
        for j, (text, value) in enumerate(at.get(i, {}).items()):
            entries[1000 + j] = Logprob(value, text)
        logprobs.append(entries)
    return Completion("".join(pieces), list(range(len(pieces))), logprobs=logprobs)


ALIGNED = ['{"sup', 'ported":', " true", "}"]
# The verdict, then the passages: the "t" of "tributed" is inside a string, no literal.
ATTRIBUTED = ['{"sup', 'ported":', " true", ',"passages":[', "1]}"]


def test_p_is_read_where_the_literal_starts_and_renormalised_over_both_literals():
    # At " true" the allowed tokens came back: " true" (sampled, -0.1), "true", " false",
    # " f", and a space that commits to neither.
    completion = tokenised(ALIGNED, {2: {"true": -3.0, " false": -2.0, " f": -4.0, " ": -1.0}})
    (p,) = true_probs(completion)
    true, false = math.exp(-0.1) + math.exp(-3.0), math.exp(-2.0) + math.exp(-4.0)
    assert p == pytest.approx(true / (true + false))

    reply = reply_from_output(alignment_request(SOURCE, "It opened."), Output([completion]))
    assert isinstance(reply.parsed, Supported)
    assert reply.parsed.supported is True
    assert reply.parsed.p == pytest.approx(p)


def test_letters_inside_strings_are_no_literal_and_passages_carry_no_p():
    completion = tokenised(ATTRIBUTED, {2: {" false": -2.0}})
    (p,) = true_probs(completion)
    assert p == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.0)))
    request = attribution_request([SOURCE], "It opened.")
    assert request.schema is attribution_schema(1)
    reply = reply_from_output(request, Output([completion]))
    assert reply.error is None
    assert (reply.parsed.supported, reply.parsed.passages) == (True, [1])
    assert reply.parsed.p == pytest.approx(p)


def test_a_literal_missing_from_the_top_logprobs_gets_at_most_the_smallest_mass():
    completion = tokenised(ALIGNED, {2: {" ": -5.0}})
    (p,) = true_probs(completion)
    assert p == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + math.exp(-5.0)))


def test_no_logprobs_no_p():
    completion = Completion("".join(ALIGNED), list(range(len(ALIGNED))))
    assert true_probs(completion) is None
    reply = reply_from_output(alignment_request(SOURCE, "It opened."), Output([completion]))
    assert reply.error is None and reply.parsed.p is None


def test_schema_mismatch_is_an_error():
    reply = reply_from_output(claims_request("A."), Output([Completion('{"claim": "A."}', [5])]))
    assert reply.parsed is None
    assert reply.error is not None and reply.error.startswith("reply does not match the schema")
    assert reply.error_kind == "invalid_reply"


def test_vllm_error_finish_is_an_error_reply():
    reply = reply_from_output(
        claims_request("A."), Output([Completion("", [], finish_reason="error")])
    )
    assert reply.parsed is None
    assert reply.finish_reason == "error"
    assert reply.error is not None
    assert reply.error.startswith("vLLM ended the request with finish_reason='error'")
    assert reply.error_kind == "engine"


# The engine around LLM.chat(), with a stand-in `vllm` module.


class FakeLLM:
    """Answers `chat()` like vLLM: rejects a batch whose prompt says TOO LONG, before
    generating anything; else answers each conversation with an empty claims list."""

    def __init__(self, model: str, **options: Any) -> None:
        self.model = model
        self.options = options
        self.calls: list[tuple[list[Any], list[Any], dict[str, Any]]] = []
        self.llm_engine = SimpleNamespace(
            model_config=SimpleNamespace(max_model_len=options.get("max_model_len") or 4096)
        )

    def reset_prefix_cache(self) -> bool:
        self.resets = getattr(self, "resets", 0) + 1
        return True

    def get_tokenizer(self) -> Any:
        return SimpleNamespace(
            encode=lambda text, add_special_tokens: text.split(),
            apply_chat_template=lambda conversation, **kwargs: " ".join(
                m["content"] for m in conversation
            ).split(),
        )

    def chat(self, conversations, sampling_params, **kwargs):
        self.calls.append((conversations, sampling_params, kwargs))
        assert len(conversations) == len(sampling_params)
        if any("TOO LONG" in c[-1]["content"] for c in conversations):
            raise FakeValidationError(
                "This model's maximum context length is 2048 tokens. However, your prompt "
                "contains 9000 input tokens.",
                parameter="input_tokens",
                value=9000,
            )
        if any("UNNAMED" in c[-1]["content"] for c in conversations):
            # vLLM's other length check (the engine's input processor) names no parameter.
            raise FakeValidationError("The decoder prompt (length 5000) is too long.")
        if any("BAD TEMPLATE" in c[-1]["content"] for c in conversations):
            raise ValueError("the chat template rejected the conversation")
        return [
            Output(
                [Completion('{"claims": ["x"]}', [1, 2, 3])],
                prompt_token_ids=[0] * 10,
                num_cached_tokens=4,
            )
            for _ in conversations
        ]


class FakeClientError(Exception):
    """vLLM 0.32's `VLLMClientError`: not a ValueError."""


class FakeValidationError(FakeClientError):
    """vLLM's `VLLMValidationError`: a message, and the parameter and value it rejects."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None):
        super().__init__(message)
        self.parameter = parameter
        self.value = value


class FakeStructuredOutputsParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM  # type: ignore[attr-defined]
    vllm.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    sp = types.ModuleType("vllm.sampling_params")
    sp.StructuredOutputsParams = FakeStructuredOutputsParams  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp)
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: False)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    exceptions = types.ModuleType("vllm.exceptions")
    exceptions.VLLMClientError = FakeClientError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.exceptions", exceptions)
    # Set, then deleted: monkeypatch then also removes what the engine sets.
    monkeypatch.setenv("VLLM_REGEX_COMPILATION_TIMEOUT_S", "0")
    monkeypatch.delenv("VLLM_REGEX_COMPILATION_TIMEOUT_S")
    return vllm


def test_engine_options_reach_llm(fake_vllm):
    engine = VLLMEngine("/models/judge", max_model_len=2048, dtype="float32", seed=3, swap_space=1)
    llm = engine.llm
    assert llm.model == "/models/judge"
    assert llm.options["enable_prefix_caching"] is True
    assert llm.options["structured_outputs_config"] == {"backend": "guidance"}
    assert llm.options["hf_overrides"] == {"head_dtype": "float32"}  # p read in float32
    assert llm.options["enforce_eager"] is False  # a GPU: graphs captured
    assert "kv_cache_memory_bytes" not in llm.options
    assert llm.options["seed"] == 3
    assert llm.options["max_model_len"] == 2048
    assert llm.options["dtype"] == "float32"
    assert llm.options["swap_space"] == 1
    assert engine.name == "vllm"
    assert os.environ["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == str(REGEX_COMPILATION_TIMEOUT_S)


def test_on_vllms_cpu_build_it_runs_eager_with_a_bounded_cache(fake_vllm, monkeypatch):
    monkeypatch.setattr(sys.modules["vllm.platforms"].current_platform, "is_cpu", lambda: True)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    options = VLLMEngine("m").llm.options
    assert options["enforce_eager"] is True
    assert options["kv_cache_memory_bytes"] == CPU_KV_CACHE_GIB << 30
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")  # vLLM reads it: the engine adds nothing
    assert "kv_cache_memory_bytes" not in VLLMEngine("m").llm.options
    assert VLLMEngine("m", enforce_eager=False).llm.options["enforce_eager"] is False


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [
        ({"avx2", "avx512_bf16"}, "bfloat16"),
        ({"avx2", "amx_bf16"}, "bfloat16"),
        ({"avx2"}, "float32"),
    ],
)
def test_on_vllms_cpu_build_auto_computes_in_bfloat16_only_where_the_cpu_has_it(
    fake_vllm, monkeypatch, capsys, flags, dtype
):
    monkeypatch.setattr(sys.modules["vllm.platforms"].current_platform, "is_cpu", lambda: True)
    monkeypatch.setattr(vllm_module, "cpu_flags", lambda: frozenset(flags))
    engine = VLLMEngine("m")
    assert (engine.llm.options["dtype"], engine.dtype) == (dtype, dtype)
    assert f"computes in {dtype}" in capsys.readouterr().err
    # A dtype the user names is kept, and a GPU keeps vLLM's own "auto" (the model's dtype).
    assert VLLMEngine("m", dtype="float32").llm.options["dtype"] == "float32"
    monkeypatch.setattr(sys.modules["vllm.platforms"].current_platform, "is_cpu", lambda: False)
    assert VLLMEngine("m").llm.options["dtype"] == "auto"


class BindingLLM(FakeLLM):
    """Records the CPU binding vLLM's engine process would inherit while it starts."""

    def __init__(self, model: str, **options: Any) -> None:
        super().__init__(model, **options)
        self.bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")


def test_on_vllms_cpu_build_it_computes_on_every_core_it_may_use(fake_vllm, monkeypatch):
    monkeypatch.setattr(sys.modules["vllm.platforms"].current_platform, "is_cpu", lambda: True)
    monkeypatch.setattr(fake_vllm, "LLM", BindingLLM)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5, 3, 9}, raising=False)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    # vLLM's own default would leave one core to its scheduler: the engine binds all.
    engine = VLLMEngine("m")
    assert (engine.llm.bind, engine.threads) == ("3,5,9", 3)
    assert VLLMEngine("m", threads=2).llm.bind == "3,5"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ  # set while vLLM starts, then restored
    # Over several processes vLLM binds each; a binding the environment gives is kept.
    assert VLLMEngine("m", tensor_parallel_size=2).llm.bind is None
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1|2-3")
    assert VLLMEngine("m", threads=1).llm.bind == "0-1|2-3"


class PreloadLLM(FakeLLM):
    """Records the LD_PRELOAD vLLM's engine process would inherit while it starts."""

    def __init__(self, model: str, **options: Any) -> None:
        super().__init__(model, **options)
        self.preload = os.environ.get("LD_PRELOAD")


@pytest.fixture
def cpu_build_without_tcmalloc(fake_vllm, monkeypatch, tmp_path):
    """vLLM's CPU build from a wheel with no vllm/libs, on Linux, the system's tcmalloc found."""
    monkeypatch.setattr(sys.modules["vllm.platforms"].current_platform, "is_cpu", lambda: True)
    monkeypatch.setattr(fake_vllm, "LLM", PreloadLLM)
    monkeypatch.setattr(sys, "platform", "linux")
    (tmp_path / "vllm").mkdir()
    monkeypatch.setattr(fake_vllm, "__path__", [str(tmp_path / "vllm")], raising=False)
    found = {"tcmalloc_minimal": "libtcmalloc_minimal.so.4"}
    monkeypatch.setattr(ctypes.util, "find_library", found.get)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    return tmp_path / "vllm", found


def test_on_vllms_cpu_build_the_systems_tcmalloc_is_preloaded(cpu_build_without_tcmalloc):
    assert VLLMEngine("m").llm.preload == "libtcmalloc_minimal.so.4"
    assert "LD_PRELOAD" not in os.environ  # set while vLLM starts, then restored


def test_a_preload_of_the_users_comes_after_tcmalloc(cpu_build_without_tcmalloc, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "libiomp5.so")
    assert VLLMEngine("m").llm.preload == "libtcmalloc_minimal.so.4:libiomp5.so"
    assert os.environ["LD_PRELOAD"] == "libiomp5.so"


def test_tcmalloc_is_left_to_vllm_or_the_user_where_they_bring_one(
    cpu_build_without_tcmalloc, monkeypatch
):
    libs, found = cpu_build_without_tcmalloc
    monkeypatch.setenv("LD_PRELOAD", "libtcmalloc.so.4")
    assert VLLMEngine("m").llm.preload == "libtcmalloc.so.4"
    monkeypatch.delenv("LD_PRELOAD")
    (libs / "libs").mkdir()
    (libs / "libs" / "libtcmalloc_minimal-1a2b.so.4").touch()  # vLLM preloads its own
    assert VLLMEngine("m").llm.preload is None
    (libs / "libs" / "libtcmalloc_minimal-1a2b.so.4").unlink()
    found.clear()  # no tcmalloc on the system: glibc's allocator, as vLLM would leave it
    assert VLLMEngine("m").llm.preload is None


def test_on_a_gpu_nothing_is_preloaded(cpu_build_without_tcmalloc, monkeypatch):
    monkeypatch.setattr(sys.modules["vllm.platforms"].current_platform, "is_cpu", lambda: False)
    assert VLLMEngine("m").llm.preload is None


def test_on_a_gpu_threads_bind_nothing(fake_vllm, monkeypatch):
    monkeypatch.setattr(fake_vllm, "LLM", BindingLLM)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    engine = VLLMEngine("m", threads=4)
    assert (engine.llm.bind, engine.threads) == (None, None)


def test_a_users_hf_overrides_keep_the_float32_head(fake_vllm):
    options = VLLMEngine("m", hf_overrides={"rope_theta": 1.0}).llm.options
    assert options["hf_overrides"] == {"head_dtype": "float32", "rope_theta": 1.0}
    options = VLLMEngine("m", hf_overrides={"head_dtype": "model"}).llm.options
    assert options["hf_overrides"] == {"head_dtype": "model"}  # the user's choice wins


def test_it_offers_the_context_length_check(fake_vllm):
    # fit.ContextFit (in the runner) names a too-long field when an engine has these two.
    engine = VLLMEngine("/models/judge", max_model_len=2048)
    assert engine.max_model_len == 2048  # read back from vLLM's model config
    assert engine.count_tokens("three short words") == 3  # the fake tokenizer splits words


def test_its_prefix_cache_can_be_reset(fake_vllm):
    engine = VLLMEngine("/models/judge")
    engine.reset_prefix_cache()
    assert engine.llm.resets == 1


def test_a_set_regex_timeout_is_kept(fake_vllm, monkeypatch):
    monkeypatch.setenv("VLLM_REGEX_COMPILATION_TIMEOUT_S", "42")
    VLLMEngine("m")
    assert os.environ["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == "42"


def test_one_chat_call_per_wave_with_one_params_per_request(fake_vllm):
    engine = VLLMEngine("m", structured_outputs_backend="xgrammar", chat_template_kwargs={"x": 1})
    requests = [claims_request("A."), questions_request(SOURCE, 3), claims_request("B.")]
    replies = engine.generate(requests)
    assert engine.llm.options["structured_outputs_config"] == {"backend": "xgrammar"}
    assert len(engine.llm.calls) == 1
    conversations, params, kwargs = engine.llm.calls[0]
    assert conversations == [r.messages for r in requests]
    assert [p.kwargs["max_tokens"] for p in params] == [r.max_tokens for r in requests]
    assert [p.kwargs["temperature"] for p in params] == [0.0] * 3
    assert [p.kwargs["structured_outputs"].kwargs["json"] for p in params] == [
        json_schema(r.schema, "xgrammar") for r in requests
    ]
    assert kwargs == {"use_tqdm": False, "chat_template_kwargs": {"x": 1}}
    assert [r.error is None for r in replies] == [
        True,
        False,
        True,
    ]  # claims for a questions schema
    assert replies[1].error.startswith("reply does not match the schema")
    assert (replies[0].prompt_tokens, replies[0].output_tokens, replies[0].cached_tokens) == (
        10,
        3,
        4,
    )


def test_a_rejected_request_fails_alone(fake_vllm):
    engine = VLLMEngine("m")
    requests = [claims_request(t) for t in ("A.", "B.", "TOO LONG", "C.", "D.")]
    replies = engine.generate(requests)
    assert [r.error is None for r in replies] == [True, True, False, True, True]
    assert replies[2].error == (
        "vLLM rejected the request: This model's maximum context length is 2048 tokens. "
        "However, your prompt contains 9000 input tokens."
    )
    assert replies[2].finish_reason == "error"
    assert replies[2].error_kind == "too_long"
    # The full batch, then halves until the rejected request stands alone.
    assert [len(c[0]) for c in engine.llm.calls] == [5, 2, 3, 1, 2]


def test_a_value_error_also_counts_as_a_rejection(fake_vllm):
    engine = VLLMEngine("m")
    replies = engine.generate([claims_request("BAD TEMPLATE"), claims_request("A.")])
    assert (
        replies[0].error == "vLLM rejected the request: the chat template rejected the conversation"
    )
    assert replies[0].error_kind == "engine"  # rejected, but not for its length
    assert replies[1].error is None


def test_a_length_rejection_without_a_parameter_is_counted_by_the_engine(fake_vllm):
    engine = VLLMEngine("m", max_model_len=2048)
    replies = engine.generate(
        [claims_request("UNNAMED " + "word " * 5000), claims_request("UNNAMED one.")]
    )
    # Both rejected with the same words; only the prompt past the context is too long.
    assert [r.error_kind for r in replies] == ["too_long", "engine"]


class ValidationError(Exception):
    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ValidationError("maximum context length", parameter="input_tokens"), "too_long"),
        (ValidationError("upper bound for input tokens", parameter="input_text"), "too_long"),
        # The words say "too long", the fields do not: the fields decide.
        (ValidationError("maximum context length is 2048 tokens"), "engine"),
        (ValidationError("bad schema", parameter="structured_outputs"), "engine"),
        (ValueError("the chat template rejected the conversation"), "engine"),
    ],
)
def test_a_rejection_is_too_long_only_when_its_fields_say_so(exc, kind):
    assert rejection_kind(exc) == kind


def test_other_engine_failures_raise(fake_vllm, monkeypatch):
    engine = VLLMEngine("m")

    def broken(*args, **kwargs):
        raise RuntimeError("engine core died")

    monkeypatch.setattr(engine.llm, "chat", broken)
    with pytest.raises(RuntimeError, match="engine core died"):
        engine.generate([claims_request("A.")])


def test_close_without_engine_processes_is_a_no_op(fake_vllm):
    VLLMEngine("m").close()


def test_no_requests_no_call(fake_vllm):
    engine = VLLMEngine("m")
    assert engine.generate([]) == []
    assert engine.llm.calls == []


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            {"structured_outputs_backend": "regex"},
            r"^structured_outputs_backend must be one of guidance, xgrammar, outlines, "
            r"got 'regex'$",
        ),
        ({"tensor_parallel_size": 0}, r"^tensor_parallel_size must be >= 1, got 0$"),
        (
            {"gpu_memory_utilization": 1.5},
            r"^gpu_memory_utilization must be in \(0, 1\], got 1\.5$",
        ),
        ({"max_model_len": 0}, r"^max_model_len must be >= 1 or None, got 0$"),
        ({"threads": 0}, r"^threads must be >= 1, got 0$"),
        (
            {"structured_outputs_config": {"backend": "xgrammar"}},
            r"^VLLMEngine sets structured_outputs_config itself: use structured_outputs_backend=$",
        ),
    ],
)
def test_bad_options_fail_before_vllm_loads(monkeypatch, options, match):
    monkeypatch.setitem(sys.modules, "vllm", None)  # importing vllm would fail
    with pytest.raises(ValueError, match=match):
        VLLMEngine("m", **options)


def test_missing_vllm_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"pip install 'evalgpu\[vllm\]'"):
        VLLMEngine("m")


def test_importing_the_module_needs_no_vllm():
    code = (
        "import sys; sys.modules['vllm'] = None; import evalgpu.engines.vllm as m; "
        "print(m.VLLMEngine.name)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "vllm"
