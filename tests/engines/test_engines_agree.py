"""The same rows, the same verdicts: vLLM's CPU build and the transformers engine, default judge.

Both engines score `examples/` with the default judge in one process
(benchmarks/compare_engines.py): the target is the same claims and questions, the same hard
verdict on at least 95 % of the checks they share, and a check's p within a median of 0.02, for
each scorer. The two engines share what decides a reply: the chat template, the grammar
(llguidance, with the same options: `json_schema` gives vLLM's guidance backend the
transformers engine's `JSON_OPTIONS`) and a float32 output layer; what differs is the
arithmetic of each engine's bfloat16 (or float32) kernels.

Runs where vLLM is installed (`scripts/test`'s vllm run), where both engines import, and needs
the default model converted (`python -m evalgpu models pull`). About 13 minutes on a 2-core CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import compare_engines

pytest.importorskip("vllm")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "qwen2.5-coder-1.5b-instruct"


@pytest.fixture(scope="module")
def comparison() -> dict[str, Any]:
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"no default model at {MODEL}: run `python -m evalgpu models pull`")
    result: dict[str, Any] = compare_engines.compare(str(MODEL), {}, {})
    return result


# Measured 2026-12-06 (2-core AMD EPYC, AVX512-BF16, bfloat16, guidance backend, float32 head
# in both; docs/measured/compare-engines-examples-guidance-bf16-avx512bf16.json): summarization
# claims 6/6 the same, verdicts 53/53, median |dp| 0.002; context recall claims 5/5, verdicts
# 10/10, median |dp| 0.004 (0.22 until the vLLM engine sent schemas in field order, reading p
# after the passages). Questions agree on 4 of 6 rows: on the bridge source's two rows the
# greedy lists agree on their first six questions, then part at the seventh (vLLM: "...completed
# in two years?", going on to 10 questions that repeat it; transformers: "...on Saturday?", 8),
# one greedy choice between two likely tokens under each engine's bfloat16 kernels. Which way
# that near tie falls depends on the CPU's kernels: CI's machine (2026-12-07) got the same lists
# on every row, so a strict xfail failed there. What holds on every machine is asserted: each
# row's lists start the same, and where they part, it is after at least half the shorter one.


@pytest.mark.parametrize("scorer", ["summarization", "context-recall"])
def test_both_engines_list_the_same_claims(comparison, scorer):
    found = comparison["agreement"][scorer]
    assert found["rows_missing_or_failed"] == []
    assert found["rows"] > 0
    assert found["same_lists"]["claims"] == found["rows"], found["differing_lists"]


def test_both_engines_ask_the_same_first_questions(comparison):
    found = comparison["agreement"]["summarization"]
    assert found["rows"] > 0
    for differing in found["differing_lists"]:
        if differing["list"] != "questions":
            continue
        shorter = min(len(differing["a"]), len(differing["b"]))
        assert shorter > 0, differing
        assert differing["shared_prefix"] * 2 >= shorter, differing


@pytest.mark.parametrize("scorer", ["summarization", "context-recall"])
def test_both_engines_reach_the_same_verdicts(comparison, scorer):
    found = comparison["agreement"][scorer]
    assert found["checks_shared"] > 0
    assert found["same_verdict_share"] >= 0.95, found
    assert found["median_abs_dp"] <= 0.02, found
