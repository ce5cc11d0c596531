"""The runner: one generate() per wave across rows and scorers, failures isolated."""

import pytest

from evalgpu import create_context_recall_scorer, create_summarization_scorer, run_evals
from evalgpu.engines.base import JudgeReply
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.results import InputError, ScoreResult, TooLongError
from evalgpu.runner import Runner, reply_cache

SOURCE = "The company was founded in 1995 by John Smith. The company is based in Seattle."


class Broken(ScriptedEngine):
    def generate(self, requests):
        self.calls.append(list(requests))
        raise RuntimeError("CUDA out of memory")


class Short(ScriptedEngine):
    def generate(self, requests):
        return super().generate(requests)[:-1]


def test_an_engine_that_raises_fails_the_wave_rows_not_the_run():
    scorer = create_summarization_scorer(Broken())
    results = scorer.run_batch([{"input": SOURCE, "output": SOURCE}] * 2)
    assert [r.score for r in results] == [None, None]
    assert results[1].error == (
        "row 2: summarization.claims: engine 'scripted' failed: RuntimeError: CUDA out of memory"
    )


def test_an_engine_that_drops_replies_is_a_bug_not_a_score():
    scorer = create_summarization_scorer(Short())
    with pytest.raises(RuntimeError, match="returned 1 replies for 2 requests"):
        scorer.run(input=SOURCE, output=SOURCE)


def test_results_come_back_in_input_order_whatever_finishes_first(engine):
    scorer = create_context_recall_scorer(engine, context=["Cats purr."])
    runs = [
        {"input": "q", "ground_truth": "Cats purr."},  # two waves
        {"input": "q", "ground_truth": None},  # done before any call
        {"input": "q", "ground_truth": "Dogs bark."},
    ]
    assert [r.score for r in scorer.run_batch(runs)] == [1.0, 0.0, 0.0]


def test_the_reply_cache_spans_batches(engine):
    scorer = create_summarization_scorer(engine)
    scorer.run_batch([{"input": SOURCE, "output": SOURCE}])
    scorer.run_batch([{"input": SOURCE, "output": "The company is based in Seattle."}])
    assert len(engine.by_tag("summarization.questions")) == 1


def test_a_cleared_reply_cache_asks_again(engine):
    scorer = create_summarization_scorer(engine)
    scorer.run_batch([{"input": SOURCE, "output": SOURCE}])
    cache = reply_cache(engine)
    assert len(cache) > 0
    cache.clear()
    assert len(cache) == 0
    scorer.run_batch([{"input": SOURCE, "output": SOURCE}])
    assert len(engine.by_tag("summarization.questions")) == 2


def test_cache_off_asks_again(engine):
    scorer = create_summarization_scorer(engine)
    runner = Runner(engine, cache=False)
    for _ in range(2):
        runner.run([(scorer.id, scorer.steps({"input": SOURCE, "output": SOURCE}))])
    assert len(engine.by_tag("summarization.questions")) == 2


def test_on_wave_reports_each_generate(engine):
    waves = []
    scorer = create_summarization_scorer(engine)
    runner = Runner(engine, on_wave=waves.append)
    runner.run([(scorer.id, scorer.steps({"input": SOURCE, "output": SOURCE})) for _ in range(3)])
    # identical rows: sent once. Per row: claims and questions; two claims and two questions
    # checked; two questions answered from the summary.
    assert [(w.requests, w.unique) for w in waves] == [(6, 2), (12, 4), (6, 2)]
    assert runner.generate_calls == 3
    assert waves[0].prompt_tokens > 0 and waves[0].output_tokens > 0


def test_two_scorers_on_one_engine_share_its_reply_cache(engine):
    strict = create_summarization_scorer(engine)
    doubled = create_summarization_scorer(engine, scale=2.0)
    strict.run(input=SOURCE, output=SOURCE)
    doubled.run_batch([{"input": SOURCE, "output": "The company is based in Seattle."}])
    run_evals([{"input": SOURCE, "output": SOURCE}], [doubled])
    assert len(engine.by_tag("summarization.questions")) == 1
    other = ScriptedEngine()  # another engine has a cache of its own
    create_summarization_scorer(other).run(input=SOURCE, output=SOURCE)
    assert len(other.by_tag("summarization.questions")) == 1


def test_a_call_too_long_for_the_judge_fails_its_row_before_the_engine(engine):
    class Limited(ScriptedEngine):
        max_model_len = 4096

        def count_tokens(self, text):
            return len(text) // 4

    judge = Limited()
    long = "The company sells boats. " * 800  # 20,000 characters: 5,000 "tokens"
    results = create_summarization_scorer(judge).run_batch(
        [{"input": long, "output": "The company sells boats."}, {"input": SOURCE, "output": SOURCE}]
    )
    assert results[0].error.startswith("row 1: source: 5,000 tokens, too long for the judge")
    assert results[1].error is None
    assert all(long not in r.messages[-1]["content"] for r in judge.requests)


# Error kinds: each set where it arises


def _steps_raising(error):
    raise error
    yield  # a generator: the runner records the error for the row


def test_each_error_kind_is_set_where_it_arises():
    def cut(request):
        return JudgeReply(None, "{", 1, 1, 0, "length")  # cut twice: the retry is cut too

    def refused(request):
        return JudgeReply(None, "", 1, 0, 0, "error", "prompt too big", "too_long")

    def unexplained(request):
        return JudgeReply(None, "", 1, 0, 0, "error", "something went wrong")

    cases = {
        "invalid_reply": ScriptedEngine(overrides={"summarization.alignment": lambda r: "{oops"}),
        "too_long": ScriptedEngine(overrides={"summarization.alignment": refused}),
        "engine": Broken(),
    }
    for kind, engine in cases.items():
        result = create_summarization_scorer(engine).run(input=SOURCE, output=SOURCE)
        assert result.error is not None and result.error_kind == kind, (kind, result.error)
    twice = create_summarization_scorer(ScriptedEngine(overrides={"summarization.questions": cut}))
    result = twice.run(input=SOURCE, output=SOURCE)
    assert result.error_kind == "invalid_reply" and "after one retry" in result.error
    # An engine's error reply that does not say why counts as the engine's.
    vague = ScriptedEngine(overrides={"summarization.questions": unexplained})
    assert (
        create_summarization_scorer(vague).run(input=SOURCE, output=SOURCE).error_kind == "engine"
    )
    rows = [
        ("s", _steps_raising(InputError("summary: missing"))),
        ("s", _steps_raising(TooLongError("source: too long"))),
        ("s", _steps_raising(RecursionError("maximum recursion depth exceeded"))),
    ]
    results = Runner(ScriptedEngine()).run(rows)
    assert [r.error_kind for r in results] == ["input", "too_long", "input"]
    assert results[2].error == "RecursionError: maximum recursion depth exceeded"


def test_the_error_kind_is_serialised_as_errorKind_and_goes_with_an_error():
    ok = ScoreResult(scorer="s", score=1.0)
    assert ok.error_kind is None and ok.model_dump(by_alias=True)["errorKind"] is None
    failed = ScoreResult(scorer="s", error="row 1: boom", error_kind="engine")
    assert failed.model_dump(by_alias=True)["errorKind"] == "engine"
    assert ScoreResult.model_validate(failed.model_dump(by_alias=True)).error_kind == "engine"
    # An error given without a kind is an input error (a row that could not be scored as given).
    assert ScoreResult(scorer="s", error="item 1: target raised").error_kind == "input"
    with pytest.raises(ValueError, match="error_kind 'engine' without an error"):
        ScoreResult(scorer="s", score=1.0, error_kind="engine")
    with pytest.raises(ValueError):
        ScoreResult(scorer="s", error="x", error_kind="bogus")  # type: ignore[arg-type]


def test_a_lone_surrogate_in_one_run_fails_that_run_not_the_wave():
    engine = ScriptedEngine()
    runs = [
        {"input": SOURCE, "output": "Founded \ud800 in 1995."},
        {"input": SOURCE, "output": SOURCE},
    ]
    bad, good = create_summarization_scorer(engine).run_batch(runs)
    assert bad.error == (
        "row 1: summarization.claims: the prompt holds a lone surrogate (\\ud800), "
        "which is not text"
    )
    assert bad.error_kind == "input"
    assert good.error is None and good.score == 1.0
    assert all("\ud800" not in m["content"] for r in engine.requests for m in r.messages)
