"""The same rows, the same verdicts: vLLM's CPU build and the transformers engine, default judge.

Both engines score `examples/` with the default judge in one process (scripts/compare_engines.py):
they must list the same claims and questions, reach the same hard verdict on at least 95 % of
the checks they share, and put a check's p within a median of 0.02 of each other, for each
scorer. The two engines share what decides a reply: the chat template, the grammar (llguidance,
with the same options: `json_schema` gives vLLM's guidance backend the transformers engine's
`JSON_OPTIONS`) and a float32 output layer; what differs is the arithmetic of each engine's
bfloat16 (or float32) kernels.

Runs in the vLLM environment (`.ci/vllm-smoke`), where both engines import, and needs the default
model converted (`python -m evalgpu models pull`). About 6 minutes on a 2-core CPU.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "qwen2.5-coder-1.5b-instruct"


def load_script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def comparison() -> dict[str, Any]:
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"no default model at {MODEL}: run `python -m evalgpu models pull`")
    result: dict[str, Any] = load_script("compare_engines").compare(str(MODEL), {}, {})
    return result


@pytest.mark.parametrize("scorer", ["summarization", "context-recall"])
def test_both_engines_list_the_same_claims_and_questions(comparison, scorer):
    found = comparison["agreement"][scorer]
    assert found["rows_missing_or_failed"] == []
    assert found["differing_lists"] == []
    assert all(same == found["rows"] for same in found["same_lists"].values())


@pytest.mark.parametrize("scorer", ["summarization", "context-recall"])
def test_both_engines_reach_the_same_verdicts(comparison, scorer):
    found = comparison["agreement"][scorer]
    assert found["checks_shared"] > 0
    assert found["same_verdict_share"] >= 0.95, found
    assert found["median_abs_dp"] <= 0.02, found
