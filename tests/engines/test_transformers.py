"""The transformers engine: its pure request adapter (no model), then slow end-to-end runs of
both scorers on the real default model on CPU."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from evalgpu import create_context_recall_scorer, create_summarization_scorer
from evalgpu.engines import Engine, JudgeReply, JudgeRequest
from evalgpu.engines._compute import choose_cpu_compute, cpu_flags, resolve_compute
from evalgpu.engines._decode import Constrained, Slot, literal_masks, true_probability
from evalgpu.engines.transformers import TransformersEngine, chat_for
from evalgpu.prompting import judge_chat
from evalgpu.scorers.context_recall import claims_request
from evalgpu.scorers.summarization import alignment_request, coverage_request, questions_request
from evalgpu.verdicts import Reason

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


class FakeConstraint:
    def __init__(self) -> None:
        self.advanced: list[int] = []

    def advance(self, token: int) -> None:
        self.advanced.append(token)


def test_a_slot_stops_at_an_end_token_which_counts_as_output_but_not_text():
    slot = Slot(max_tokens=8, constraint=FakeConstraint(), prompt_tokens=5)
    for token in (10, 11, 2):
        slot.take(token, eos_ids={2})
    assert slot.finish == "stop"
    assert slot.tokens == [10, 11, 2] and slot.text_tokens == [10, 11]
    assert slot.constraint.advanced == [10, 11]


def test_a_slot_that_reaches_max_tokens_is_cut():
    slot = Slot(max_tokens=2, constraint=FakeConstraint(), prompt_tokens=5)
    slot.take(10, eos_ids={2})
    assert slot.finish is None
    slot.take(11, eos_ids={2})
    assert slot.finish == "length" and slot.text_tokens == [10, 11]


class RefusingConstraint:
    def advance(self, token: int) -> None:
        raise ValueError(f"token {token} rejected: lexer fuel exhausted")


def test_a_slot_whose_constraint_fails_ends_with_the_reason():
    slot = Slot(max_tokens=8, constraint=RefusingConstraint(), prompt_tokens=5)
    slot.take(10, eos_ids={2})
    assert slot.finish == "error"
    assert slot.error == "token 10 rejected: lexer fuel exhausted"


class AllowingConstraint:
    """Allows a fixed set of tokens (ids below 32) and records what it was advanced by."""

    def __init__(self, allowed: set[int]) -> None:
        self.ids, self.advanced = allowed, []

    def allowed(self, words, row: int) -> None:
        words[row, 0] = sum(1 << i for i in self.ids)

    def advance(self, token: int) -> None:
        self.advanced.append(token)


class OneWordGrammars:
    """Bitmasks of one 32-bit word: a vocabulary of at most 32 tokens."""

    def bitmask(self, rows: int):
        import torch

        return torch.zeros((rows, 1), dtype=torch.int32)


def test_the_processor_masks_each_row_to_its_schema_and_reads_p_where_a_verdict_is_chosen():
    import math

    import torch

    # Tokens: 0 the end, 1 "true", 2 "false", 3 "{", 4 " " (leads a literal), 5 other text.
    literals = torch.tensor(
        [[0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0], [1, 0, 0, 1, 0, 1]], dtype=torch.bool
    )
    verdict = Slot(max_tokens=8, constraint=AllowingConstraint({1, 2}), prompt_tokens=3)
    text = Slot(max_tokens=8, constraint=AllowingConstraint({3, 5}), prompt_tokens=2)
    processor = Constrained([verdict, text], OneWordGrammars(), {0}, 3, literals)
    prompt = torch.tensor([[7, 7, 7], [9, 7, 7]])
    scores = torch.tensor([[0.0, 2.0, 1.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0, 3.0]])
    out = processor(prompt, scores)
    inf = float("-inf")
    assert out.tolist() == [[inf, 2.0, 1.0, inf, inf, inf], [inf, inf, inf, 1.0, inf, 3.0]]
    assert verdict.true_probs == [pytest.approx(1 / (1 + math.exp(-1.0)))]
    assert text.true_probs == [] and verdict.tokens == []  # nothing chosen yet
    # The next step: each row took its greedy token; an end token stops a row, which is then
    # given only the end token, so that `generate()` counts it finished.
    out = processor(torch.cat([prompt, torch.tensor([[1], [0]])], 1), scores)
    assert verdict.tokens == [1] and verdict.constraint.advanced == [1]
    assert text.finish == "stop" and text.constraint.advanced == []
    assert out[1].tolist() == [0.0, inf, inf, inf, inf, inf]
    assert len(verdict.true_probs) == 2


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
        ValueError, match="compute must be one of auto, bfloat16, float32, got 'fp8'"
    ):
        TransformersEngine("/nowhere", compute="fp8")
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        TransformersEngine("/nowhere", threads=0)
    with pytest.raises(ValueError, match="batch_tokens must be >= 1, got 0"):
        TransformersEngine("/nowhere", batch_tokens=0)


# -- what the engine computes in (pure: CPU flags in, choice out) ---------------------------

EPYC = "fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16".split()


@pytest.mark.parametrize(
    ("flags", "compute"),
    [
        (EPYC, "bfloat16"),  # AVX512-BF16: the measured machine
        (["avx2", "avx512f", "amx_bf16", "amx_tile"], "bfloat16"),  # Sapphire Rapids
        (["avx2", "avx512f", "avx512_vnni"], "float32"),  # Cascade Lake: no native bfloat16
        (["avx2", "fma"], "float32"),
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
    assert resolve_compute("float32", None, "cpu") == ("float32", "asked for")
    assert resolve_compute("auto", "float16", "cpu") == ("float16", "the dtype asked for")
    assert resolve_compute("auto", None, "cuda") == ("bfloat16", "the default on cuda")


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
    # Claims see the summary only, and coverage its claims and one question only.
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
def test_batches_give_the_replies_of_one_request_at_a_time(engine):
    # batch_size 2 for 5 requests: left-padded batches whose rows end at different steps,
    # schemas mixed in one batch. Greedy decoding must not notice.
    small = TransformersEngine(engine.model_path, batch_size=2, compute="float32")
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
    assert [r.prompt_tokens for r in together] == [r.prompt_tokens for r in alone]


@pytest.mark.slow
def test_the_models_own_generation_settings_do_not_reach_the_judge(engine, tmp_path):
    # A chat model's generation_config.json may ask for a repetition penalty, banned n-grams or
    # sampling; transformers fills what a call leaves unset from it. The judge's replies must
    # be those of a model folder without them.
    import json
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(engine.model_path, folder)
    config = json.loads((folder / "generation_config.json").read_text())
    config.update(repetition_penalty=1.5, no_repeat_ngram_size=2, do_sample=True, top_k=3)
    (folder / "generation_config.json").write_text(json.dumps(config))
    tuned = TransformersEngine(str(folder), compute="float32")
    requests = [questions_request(SOURCE, 2), coverage_request(SUMMARY, "Did it open in 1937?")]
    requests = [JudgeRequest(r.tag, r.messages, r.schema, 60) for r in requests]
    got, want = tuned.generate(requests), engine.generate(requests)
    assert [r.text for r in got] == [r.text for r in want]
    assert [r.parsed.p for r in got[1:]] == [r.parsed.p for r in want[1:]]


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

    assert engine.compute in ("bfloat16", "float32")
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
        (slot,) = engine._decode([request], [prompt], [0])
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
