"""The transformers engine: its pure request adapter (no model), then slow end-to-end runs of
both scorers on the real default model on CPU."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from pydantic import BaseModel, ConfigDict

from evalgpu import create_context_recall_scorer, create_summarization_scorer
from evalgpu.engines import Engine, JudgeReply, JudgeRequest
from evalgpu.engines._compute import (
    INT8_CAVEAT,
    choose_cpu_compute,
    cpu_flags,
    resolve_compute,
)
from evalgpu.engines._decode import (
    KVBatch,
    Slot,
    literal_masks,
    prefill_groups,
    shared_prefix,
    true_probability,
)
from evalgpu.engines._prefix import common_prefix
from evalgpu.engines.transformers import TransformersEngine, chat_for
from evalgpu.prompting import fence, judge_chat
from evalgpu.scorers.context_recall import claims_request
from evalgpu.scorers.summarization import alignment_request, coverage_request, questions_request
from evalgpu.verdicts import Reason, Verdict

# -- the pure adapter --------------------------------------------------------------------


def test_chat_is_kept_when_the_template_has_a_system_role():
    chat = judge_chat("judge this")
    assert chat_for(chat, system_role=True) == chat


def test_system_text_is_folded_into_the_user_turn_otherwise():
    chat = [{"role": "system", "content": "Be strict."}, {"role": "user", "content": "Judge."}]
    assert chat_for(chat, system_role=False) == [
        {"role": "user", "content": "Be strict.\n\nJudge."}
    ]
    assert chat[1]["content"] == "Judge."  # the request's messages are not modified
    assert chat_for(chat[:1], system_role=False) == [{"role": "user", "content": "Be strict."}]


def test_shared_prefix_counts_common_leading_tokens():
    assert shared_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert shared_prefix([1, 2], [1, 2, 3]) == 2
    assert shared_prefix([], [1]) == 0


def test_prompts_of_one_source_share_their_prefix_in_one_prefill_group():
    instructions, source_a, source_b = list(range(100)), list(range(1000, 1600)), [7] * 600
    prompts = [
        instructions + source_a + [1, 2, 3],  # alignment of summary 1 of source A
        instructions + source_a + [9],  # questions of source A
        instructions + source_a + [4, 5],  # alignment of summary 2 of source A
        instructions + source_b + [8, 8],  # another source
    ]
    order = sorted(range(4), key=lambda i: prompts[i])
    groups = prefill_groups(prompts, order, max_tokens=8192)
    assert sorted(i for _, members in groups for i in members) == [0, 1, 2, 3]
    by_member = {i: (prefix, members) for prefix, members in groups for i in members}
    prefix, members = by_member[0]
    assert sorted(members) == [0, 1, 2]
    assert prefix == 700  # instructions and source A: computed once for three prompts
    # Source B shares only the instructions: 100 tokens saved would cost 3 * 600 of padding.
    assert by_member[3] == (0, [3])


def test_prompts_whose_sources_are_stored_are_not_grouped_over_the_system_message():
    system = list(range(100))
    prompts = [system + [1000 + i for i in range(600)] + [1], system + [7] * 600 + [2]]
    order = sorted(range(2), key=lambda i: prompts[i])
    # Nothing stored: sources of one length share the system message in one group.
    assert prefill_groups(prompts, order, max_tokens=8192) == [(100, order)]
    # Both stored (the questions wave before): each alone copies its own source.
    assert prefill_groups(prompts, order, 8192, {0: 700, 1: 700}) == [(0, [i]) for i in order]
    # One stored: in a group its source would be computed again, in its tail.
    assert prefill_groups(prompts, order, 8192, {0: 700}) == [(0, [i]) for i in order]


def test_a_group_leaves_a_token_to_compute_and_respects_the_memory_bound():
    same = [1] * 50
    ((prefix, members),) = prefill_groups([same, same], [0, 1], max_tokens=8192)
    assert members == [0, 1] and prefix == 49  # the last token's logits start the reply
    groups = prefill_groups([same + [2] * 30, same + [3] * 30], [0, 1], max_tokens=40)
    assert [m for _, m in groups] == [[0], [1]]  # 2 * 31 tokens would exceed 40


class FakeConstraint:
    def __init__(self) -> None:
        self.advanced: list[int] = []

    def advance(self, token: int) -> None:
        self.advanced.append(token)


def test_a_slot_stops_at_an_end_token_which_counts_as_output_but_not_text():
    slot = Slot(at=0, max_tokens=8, constraint=FakeConstraint(), prompt_tokens=5)
    for token in (10, 11, 2):
        slot.take(token, eos_ids={2})
    assert slot.finish == "stop"
    assert slot.tokens == [10, 11, 2] and slot.text_tokens == [10, 11]
    assert slot.constraint.advanced == [10, 11]


def test_a_slot_that_reaches_max_tokens_is_cut():
    slot = Slot(at=0, max_tokens=2, constraint=FakeConstraint(), prompt_tokens=5)
    slot.take(10, eos_ids={2})
    assert slot.finish is None
    assert slot.position == 5  # the first reply token sits right after the 5 prompt tokens
    slot.take(11, eos_ids={2})
    assert slot.finish == "length" and slot.text_tokens == [10, 11]


class RefusingConstraint:
    def advance(self, token: int) -> None:
        raise ValueError(f"token {token} rejected: lexer fuel exhausted")


def test_a_slot_whose_constraint_fails_ends_with_the_reason():
    slot = Slot(at=0, max_tokens=8, constraint=RefusingConstraint(), prompt_tokens=5)
    slot.take(10, eos_ids={2})
    assert slot.finish == "error"
    assert slot.error == "token 10 rejected: lexer fuel exhausted"


def _cache(rows: int, length: int, value: float):
    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer in range(2):
        kv = torch.full((rows, 1, length, 4), value)
        cache.update(kv, kv.clone(), layer)
    return cache


def test_rows_join_left_padded_and_leave_with_their_padding_cut():
    import torch

    batch = KVBatch()
    old = [Slot(at=i, max_tokens=9, constraint=FakeConstraint(), prompt_tokens=3) for i in range(2)]
    batch.join(old, _cache(2, 3, 1.0), torch.ones(2, 3, dtype=torch.long))
    new = [Slot(at=2, max_tokens=9, constraint=FakeConstraint(), prompt_tokens=5)]
    batch.join(new, _cache(1, 5, 2.0), torch.ones(1, 5, dtype=torch.long))
    assert len(batch) == 3
    assert batch.mask.tolist() == [[0, 0, 1, 1, 1], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    for layer in batch.cache.layers:
        assert layer.keys.shape == (3, 1, 5, 4)
        assert layer.keys[0, 0, :2].abs().sum() == 0  # padding is zeros, masked anyway
        assert torch.all(layer.values[2] == 2.0)

    new[0].finish = "stop"
    assert batch.drop_finished() == new
    assert batch.mask.tolist() == [[1, 1, 1], [1, 1, 1]]  # all-padding columns are cut
    assert all(layer.keys.shape == (2, 1, 3, 4) for layer in batch.cache.layers)
    for slot in old:
        slot.finish = "length"
    assert batch.drop_finished() == old and len(batch) == 0


def test_the_probability_of_true_is_computed_in_float32():
    import math

    import torch

    # bfloat16 logits, as a bfloat16 model gives them: 10 apart. In bfloat16 arithmetic the
    # softmax of the first is 1.0 exactly; in float32 it keeps its last digits.
    logits = torch.tensor([10.0, 0.0, 3.0, -2.0], dtype=torch.bfloat16)
    true_tokens = torch.tensor([True, False, False, False])
    false_tokens = torch.tensor([False, True, False, True])
    p = true_probability(logits, true_tokens, false_tokens)
    false_mass = math.exp(0.0) + math.exp(-2.0)
    assert p == pytest.approx(math.exp(10.0) / (math.exp(10.0) + false_mass), rel=1e-6)
    assert p < 1.0
    assert float(torch.softmax(logits[[0, 1, 3]], -1)[0]) == 1.0  # what bfloat16 would give


def test_options_are_checked_before_loading_anything():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        TransformersEngine("/nowhere", batch_size=0)
    with pytest.raises(
        ValueError, match="compute must be one of auto, bfloat16, int8, float32, got 'fp8'"
    ):
        TransformersEngine("/nowhere", compute="fp8")
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        TransformersEngine("/nowhere", threads=0)
    with pytest.raises(ValueError, match="prefix_cache_mb must be >= 0, got -1"):
        TransformersEngine("/nowhere", prefix_cache_mb=-1)


# -- what the engine computes in (pure: CPU flags in, choice out) ---------------------------

EPYC = "fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16".split()


@pytest.mark.parametrize(
    ("flags", "compute"),
    [
        (EPYC, "bfloat16"),  # AVX512-BF16: the measured machine
        (["avx2", "avx512f", "amx_bf16", "amx_tile"], "bfloat16"),  # Sapphire Rapids
        (["avx2", "avx512f", "avx512_vnni"], "float32"),  # Cascade Lake: no native bfloat16
        (["avx2", "fma"], "float32"),  # int8 would be faster, but changes most replies
        (["fp", "asimd", "bf16"], "float32"),  # an ARM CPU: not measured, the safe choice
        ([], "float32"),
    ],
)
def test_the_cpu_compute_follows_the_cpu_flags(flags, compute):
    chosen, why = choose_cpu_compute(flags)
    assert chosen == compute and why.startswith("the CPU has")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_an_asked_compute_or_dtype_wins_over_the_cpu(monkeypatch):
    from evalgpu.engines import _compute

    monkeypatch.setattr(_compute, "cpu_flags", lambda: frozenset(EPYC))
    assert resolve_compute("auto", None, "cpu") == ("bfloat16", "the CPU has AVX512-BF16")
    monkeypatch.setattr(_compute, "cpu_flags", lambda: frozenset({"avx2"}))
    assert resolve_compute("auto", "auto", "cpu")[0] == "float32"
    assert resolve_compute("int8", None, "cpu") == ("int8", f"asked for; {INT8_CAVEAT}")
    assert resolve_compute("float32", None, "cpu") == ("float32", "asked for")
    assert resolve_compute("auto", "float16", "cpu") == ("float16", "the dtype asked for")
    assert resolve_compute("auto", None, "cuda") == ("bfloat16", "the default on cuda")
    with pytest.raises(ValueError, match="compute='int8' runs on a CPU only, got device='cuda'"):
        resolve_compute("int8", None, "cuda")


# -- the real default model on CPU --------------------------------------------------------

SOURCE = (
    "The Golden Gate Bridge in San Francisco opened to traffic on May 27, 1937. "
    "Its main span is 1,280 metres long. Joseph Strauss was the chief engineer."
)
SUMMARY = "The Golden Gate Bridge opened in 1937. Joseph Strauss was its chief engineer."
PASSAGES = [
    "The Golden Gate Bridge opened in 1937 and links San Francisco to Marin County.",
    "Joseph Strauss led the engineering of the bridge.",
]
ANSWER = "The Golden Gate Bridge opened in 1937. Its chief engineer was Joseph Strauss."


class Recording:
    """Wraps an engine and keeps every request it was given."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.requests: list[JudgeRequest] = []

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        self.requests += requests
        return self.engine.generate(requests)


@pytest.fixture(scope="module")
def engine() -> Engine:
    """The tiny preset in float32: the decode loop's plumbing needs a real model, not a good
    judge, and its equality tests need numerics that do not depend on the batch's shape
    (bfloat16 kernels round differently at other batch sizes)."""
    from evalgpu.engines import load_engine

    return load_engine("smollm2-135m-instruct", backend="transformers", compute="float32")


@pytest.fixture(scope="module")
def default_judge() -> Engine:
    """The embedded default judge, for the few tests about judging on two short rows."""
    from evalgpu.engines import load_engine

    return load_engine(None, backend="transformers")


def _text(request: JudgeRequest) -> str:
    return "\n".join(m["content"] for m in request.messages)


@pytest.mark.slow
def test_summarization_end_to_end(default_judge):
    engine = default_judge
    recording = Recording(engine)
    scorer = create_summarization_scorer(recording, max_questions=3, scale=2.0)
    results = scorer.run_batch(
        [
            {"input": SOURCE, "output": SUMMARY},
            {"input": SOURCE, "output": "The bridge opened in 1950 and is 3 km long."},
        ]
    )
    for result in results:
        assert result.error is None, result.error
        assert 0.0 <= result.score <= 2.0
        assert result.usage.prompt_tokens > 0 and result.usage.output_tokens > 0
        assert result.preprocess_step_result["questions"], "the source yields questions"
    # Source-blindness on the real prompts: coverage never sees the source, questions never
    # the summary.
    # Claims see the summary only, and coverage the summary and one question only.
    tags = {r.tag for r in recording.requests}
    assert {
        "summarization.claims",
        "summarization.alignment",
        "summarization.questions",
        "summarization.question_check",
        "summarization.coverage",
    } <= tags
    for request in recording.requests:
        if request.tag in ("summarization.claims", "summarization.coverage"):
            # (a question may name a fact of the source: that is what it asks about)
            text = re.sub(r"<question>\n.*?\n</question>", "", _text(request), flags=re.S)
            assert "Joseph Strauss was the chief engineer" not in text
            assert "1,280 metres" not in text
        if request.tag == "summarization.questions":
            assert SUMMARY not in _text(request)
            assert "1950" not in _text(request)


@pytest.mark.slow
def test_context_recall_end_to_end(default_judge):
    engine = default_judge
    scorer = create_context_recall_scorer(engine, context=PASSAGES)
    result = scorer.run(input="Who built the Golden Gate Bridge?", output="x", ground_truth=ANSWER)
    assert result.error is None, result.error
    assert 0.0 <= result.score <= 1.0
    assert result.usage.prompt_tokens > 0 and result.usage.output_tokens > 0


@pytest.mark.slow
def test_continuous_batching_gives_the_replies_of_one_request_at_a_time(engine):
    # batch_size 2 for 5 requests: rows join and leave mid-flight, prompts of one source
    # share a prefix, and schemas mix in one batch. Greedy decoding must not notice. No
    # prefix store: each request alone must compute its whole prompt.
    small = TransformersEngine(
        engine.model_path, batch_size=2, compute="float32", prefix_cache_mb=0
    )
    requests = [
        alignment_request(SOURCE, SUMMARY),
        questions_request(SOURCE, 2),
        alignment_request(SOURCE, "The bridge opened in 1950."),
        claims_request(ANSWER),
        questions_request(SOURCE, 3),
    ]
    requests = [JudgeRequest(r.tag, r.messages, r.schema, 120) for r in requests]
    together = small.generate(requests)
    alone = [small.generate([r])[0] for r in requests]
    assert [r.text for r in together] == [r.text for r in alone]
    assert [r.output_tokens for r in together] == [r.output_tokens for r in alone]
    assert [r.finish_reason for r in together] == [r.finish_reason for r in alone]
    # The shared instructions and source were computed once, and the replies say so.
    assert sum(r.cached_tokens for r in together) > 0
    assert all(r.cached_tokens == 0 for r in alone)


@pytest.mark.slow
def test_a_reply_cut_by_max_tokens_is_reported_as_length(engine):
    request = questions_request(SOURCE, 2)
    cut = JudgeRequest(request.tag, request.messages, request.schema, max_tokens=4)
    (reply,) = engine.generate([cut])
    assert reply.finish_reason == "length"
    assert reply.output_tokens == 4
    assert reply.parsed is None and reply.error == "reply cut at max_tokens=4"


@pytest.mark.slow
def test_a_prompt_over_the_context_length_is_an_error_reply(engine):
    long = JudgeRequest("summarization.reason", judge_chat("word " * 9000), Reason, 50)
    fine = questions_request(SOURCE, 2)
    replies = engine.generate([long, fine])
    assert replies[0].finish_reason == "error"
    assert "exceeds max_model_len=8192" in replies[0].error
    assert replies[0].error_kind == "too_long"
    assert replies[1].finish_reason in ("stop", "length")


@pytest.mark.slow
def test_the_head_computes_in_float32_whatever_the_body(default_judge):
    engine = default_judge
    import torch

    assert engine.compute in ("bfloat16", "int8", "float32")
    head = engine.model.get_output_embeddings()
    assert head.weight.dtype == torch.float32
    ids = engine.tokenizer("Is Paris in France? Answer yes or no.", return_tensors="pt")
    with torch.inference_mode():
        logits = engine.model(**ids).logits[0, -1]
    assert logits.dtype == torch.float32
    # In bfloat16 (steps of 0.125 near 20), 50 top logits would almost surely share values.
    top = logits.topk(50).values
    assert len(set(top.tolist())) == 50


@pytest.mark.slow
def test_it_counts_tokens_for_the_context_length_check(engine):
    assert engine.count_tokens("") == 0
    assert 0 < engine.count_tokens("The Golden Gate Bridge opened in 1937.") < 20
    assert engine.max_model_len == 8192


@pytest.fixture(scope="module")
def smollm2() -> Engine:
    """The tiny preset: the plumbing of soft verdicts does not need a good judge."""
    from evalgpu.engines import load_engine

    return load_engine("smollm2-135m-instruct", backend="transformers", compute="float32")


@pytest.mark.slow
def test_soft_verdicts_are_the_probability_of_true_where_the_judge_chose(smollm2):
    import torch

    engine = smollm2

    questions = ["Did the bridge open in 1937?", "Was Joseph Strauss the chief engineer?"]
    requests = [coverage_request(SUMMARY, q) for q in questions]
    # one at a time, as `_decode` below runs them: a batch of two rounds differently
    replies = [engine.generate([r])[0] for r in requests]
    for reply in replies:
        assert reply.error is None, reply.error
    ps = [reply.parsed.p for reply in replies]
    assert len(ps) == 2 and all(p is not None and 0.0 < p < 1.0 for p in ps)

    # Recompute each p from a fresh forward pass, in float64, at the token where the reply
    # chose between the literals; the false side is computed apart and sums with p to 1.
    size = engine.model.get_output_embeddings().weight.shape[0]
    is_true, is_false, is_other = literal_masks(engine.tokenizer, size)
    grammars = engine.grammars()
    recomputed = []
    for request, p in zip(requests, ps, strict=True):
        prompt = engine.tokenizer(
            engine._render(chat_for(request.messages, engine.system_role)),
            add_special_tokens=False,
        )["input_ids"]
        (slot,) = engine._decode([request], [prompt])
        assert slot.true_probs == [p]
        constraint, ids = grammars.start(request.schema), list(prompt)
        for token in slot.text_tokens:
            words = grammars.bitmask(1)
            constraint.allowed(words, 0)
            allowed = ((words.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1).bool()
            allowed = allowed.view(-1)[:size]
            if (is_true[token] or is_false[token]) and not (allowed & is_other).any():
                with torch.inference_mode():
                    logits = engine.model(input_ids=torch.tensor([ids])).logits[0, -1]
                probs = torch.softmax(logits.double(), -1)
                true, false = probs[allowed & is_true].sum(), probs[allowed & is_false].sum()
                recomputed.append((float(true / (true + false)), float(false / (true + false))))
            constraint.advance(token)
            ids.append(token)
    # A fresh forward pass is not the engine's cached, batched one: in float32 they agree to
    # about 1e-6; the tolerance leaves room for a model computed in bfloat16.
    assert [t for t, _ in recomputed] == pytest.approx(ps, abs=5e-3)
    for t, f in recomputed:
        assert t + f == pytest.approx(1.0, abs=1e-12)  # renormalised over the two literals
    assert logits.dtype == torch.float32  # the output layer runs in float32


@pytest.mark.slow
def test_chunked_prefill_gives_the_replies_of_one_pass(smollm2):
    # Chunks of 48 tokens: every prompt here (~200-300 tokens) is prefilled in several chunks,
    # its shared prefix too, and a group's tails in chunks of 48 / rows columns. bfloat16
    # (the CPU default) rounds differently in chunks; float32 is the reference. No prefix
    # store: the second wave would copy the first's prefixes instead of computing them.
    engine = TransformersEngine(
        smollm2.model_path, batch_size=2, compute="float32", prefix_cache_mb=0
    )
    requests = [
        alignment_request(SOURCE, SUMMARY),
        questions_request(SOURCE, 2),
        alignment_request(SOURCE, "The bridge opened in 1950."),
        claims_request(ANSWER),
    ]
    requests = [JudgeRequest(r.tag, r.messages, r.schema, 60) for r in requests]
    whole = engine.generate(requests)
    engine.prefill_chunk = 48
    chunked = engine.generate(requests)
    assert max(r.prompt_tokens for r in whole) > 4 * 48
    assert [r.text for r in chunked] == [r.text for r in whole]
    assert [r.output_tokens for r in chunked] == [r.output_tokens for r in whole]
    assert sum(r.cached_tokens for r in chunked) > 0


# A source of ~450 tokens, and verify-like calls: the verdict only, so replies are short.
LONG_SOURCE = " ".join(
    [
        SOURCE,
        "Construction began on January 5, 1933, and took just over four years.",
        "The bridge was painted International Orange, a colour chosen by the consulting",
        "architect Irving Morrow because it suited the natural setting and stood out in fog.",
        "At its opening it had the longest main span of any suspension bridge in the world,",
        "a record it held until 1964, when the Verrazzano-Narrows Bridge opened in New York.",
        "Eleven workers died during its construction, ten of them in a single accident on",
        "February 17, 1937, when a scaffold fell through the safety net under the deck.",
        "The net itself saved the lives of nineteen men, who became known as the",
        "Halfway to Hell Club. The two main cables are each 92 centimetres thick and contain",
        "27,572 strands of wire. The towers rise 227 metres above the water. On its fiftieth",
        "anniversary, in May 1987, about 300,000 people crowded onto the deck, which flattened",
        "under their weight. Today around 112,000 vehicles cross the bridge every day, and a",
        "toll is charged only to traffic heading south into San Francisco.",
    ]
)
VERIFY_TASK = "Task: judge whether the source supports the claim below. Give the verdict only."


class Supported(Verdict):
    """A verify-like verdict: one boolean, so that a reply is a few tokens."""

    supported: bool


class Verify(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: Supported


def verify_request(source: str, claim: str) -> JudgeRequest:
    user = f"{fence('source', source)}\n\n{VERIFY_TASK}\n\n{fence('claim', claim)}"
    return JudgeRequest("summarization.alignment", judge_chat(user), Verify, 40)


@pytest.mark.slow
def test_a_later_wave_reuses_the_stored_prefix_with_the_replies_of_none(smollm2):
    # Wave 1 asks questions about two sources; wave 2 verifies claims against them: each
    # prompt starts with the system message and its source. With the store, wave 2 copies
    # that prefix from wave 1 and must give the replies, and the p, of an engine without it.
    # The two sources have about the same length, so wave 1 computes them in one group whose
    # head is the system message only: each source is stored from its member's row.
    on = TransformersEngine(smollm2.model_path, batch_size=2, compute="float32")
    off = TransformersEngine(smollm2.model_path, batch_size=2, compute="float32", prefix_cache_mb=0)
    sentences = LONG_SOURCE.split(". ")
    other = ". ".join(sentences[::-1])  # other tokens after the system message
    wave1 = [questions_request(LONG_SOURCE, 2), questions_request(other, 2)]
    wave1 = [JudgeRequest(r.tag, r.messages, r.schema, 60) for r in wave1]
    claims = [
        "The bridge opened in 1937.",
        "The towers rise 300 metres above the water.",
        "Irving Morrow chose the colour of the bridge.",
    ]
    wave2 = [verify_request(LONG_SOURCE, c) for c in claims] + [verify_request(other, claims[0])]
    replies = {
        name: [e.generate(wave1), e.generate(wave2)] for name, e in (("on", on), ("off", off))
    }

    def encode(request: JudgeRequest) -> list[int]:
        text = on._render(chat_for(request.messages, on.system_role))
        return list(on.tokenizer(text, add_special_tokens=False)["input_ids"])

    assert max(r.cached_tokens for r in replies["on"][0]) > 0, "wave 1 was one group"
    for got, want in zip(replies["on"], replies["off"], strict=True):
        assert [r.text for r in got] == [r.text for r in want]
        assert [r.finish_reason for r in got] == [r.finish_reason for r in want]
        assert [r.prompt_tokens for r in got] == [r.prompt_tokens for r in want]
    verdicts = {name: [r.parsed.verdict for r in waves[1]] for name, waves in replies.items()}
    assert [v.supported for v in verdicts["on"]] == [v.supported for v in verdicts["off"]]
    assert all(v.p is not None for v in verdicts["off"])
    assert [v.p for v in verdicts["on"]] == pytest.approx([v.p for v in verdicts["off"]], abs=1e-4)
    # Every wave-2 prompt was served at least the prefix it shares with its source's wave-1
    # prompt (the system message and the source); without the store, the first request of
    # each source computed it.
    shared = [common_prefix(encode(wave1[i > 2]), encode(r)) for i, r in enumerate(wave2)]
    assert min(shared) > 400
    assert all(r.cached_tokens >= n for r, n in zip(replies["on"][1], shared, strict=True))
    assert sorted(r.cached_tokens for r in replies["off"][1])[:2] == [0, 0]
