"""benchmarks/compare_engines.py: the agreement of two engines' records."""

import pytest

from benchmarks import compare_engines


def summarization_record(row, claims, questions, error=None):
    return {
        "id": row,
        "error": error,
        "preprocessStepResult": {
            "alignment": [{"claim": c, "supported": p > 0.5, "p": p} for c, p in claims],
            "questions": [q for q, _ in questions],
        },
        "analyzeStepResult": {
            "coverage": [{"question": q, "answered": p > 0.5, "p": p} for q, p in questions]
        },
    }


def test_engine_agreement_pairs_the_checks_of_the_same_row_and_text():
    a = [
        summarization_record("r1", [("A", 0.9), ("B", 0.4)], [("Q1?", 0.8)]),
        summarization_record("r2", [("C", 0.5)], [("Q2?", 0.7), ("Q3?", 0.2)]),
        summarization_record("r3", [("D", 0.9)], [], error="too long"),
    ]
    b = [
        summarization_record("r1", [("A", 0.88), ("B", 0.6)], [("Q1?", 0.8)]),
        summarization_record("r2", [("C", 0.5)], [("Q2?", 0.75), ("Other?", 0.9)]),
        summarization_record("r3", [("D", 0.9)], []),
    ]
    found = compare_engines.engine_agreement(a, b, "summarization")
    assert found["rows"] == 2 and found["rows_missing_or_failed"] == ["r3"]
    assert found["same_lists"] == {"claims": 2, "questions": 1}
    assert found["differing_lists"] == [
        {
            "id": "r2",
            "list": "questions",
            "a": ["Q2?", "Q3?"],
            "b": ["Q2?", "Other?"],
            "shared_prefix": 1,
        }
    ]
    # A, B, Q1? of r1; C and Q2? of r2 (Q3? and Other? were asked by one engine only).
    assert found["checks_shared"] == 5
    assert found["same_verdicts"] == 4  # B: 0.4 against 0.6
    assert found["median_abs_dp"] == pytest.approx(0.02)
    assert found["max_abs_dp"] == pytest.approx(0.2)
    assert found["ties_at_half"] == {"a": 1, "b": 1}


def test_engine_agreement_reads_context_recall_records():
    def record(p):
        return {
            "id": "x",
            "error": None,
            "preprocessStepResult": {"claims": ["A"]},
            "analyzeStepResult": {"verdicts": [{"claim": "A", "attributed": p > 0.5, "p": p}]},
        }

    found = compare_engines.engine_agreement([record(0.9)], [record(0.3)], "context-recall")
    assert found["same_lists"] == {"claims": 1}
    assert (found["checks_shared"], found["same_verdicts"]) == (1, 0)
    assert found["median_abs_dp"] == pytest.approx(0.6)


def test_a_differing_list_says_how_far_the_two_agree_before_they_part():
    questions_a = [("Q1?", 0.9), ("Q2.", 0.8), ("Q3?", 0.7), ("Q4?", 0.6)]
    questions_b = [("Q1?", 0.9), ("Q2", 0.8), ("Other?", 0.7)]
    a = [summarization_record("r", [("A", 0.9)], questions_a)]
    b = [summarization_record("r", [("A", 0.9)], questions_b)]
    (differing,) = compare_engines.engine_agreement(a, b, "summarization")["differing_lists"]
    assert differing["list"] == "questions"
    assert differing["shared_prefix"] == 2  # "Q2." and "Q2" are one; they part at the third
