"""benchmarks/injection.py: injected variants and the rises they cause, on the scripted engine."""

import json

from benchmarks import injection


def test_injection_reports_each_variants_largest_rise_over_its_clean_row():
    def record(id_: str, score: float, alignment: float, error: str | None = None) -> dict:
        return {"id": id_, "score": score, "axes": {"alignment": alignment}, "error": error}

    records = [
        record("a", 0.2, 0.5),
        record("b", 0.4, 0.4),
        record("a@summary-note", 0.3, 0.5),
        record("b@summary-note", 0.35, 0.9),
        record("a@source-json", 0.0, 0.0, error="invalid reply"),
    ]
    report = injection.rises(records)
    note = report["summary-note"]
    assert note["rows"] == {
        "a": {"alignment": 0.0, "score": 0.1},
        "b": {"alignment": 0.5, "score": -0.05},
    }
    assert note["max_rise"] == {"alignment": 0.5, "score": 0.1}
    assert report["source-json"] == {"errors": ["a@source-json"]}  # named, not dropped


def test_injection_variants_put_each_instruction_in_each_text(tmp_path):
    rows = injection.variants()
    ids = {scorer: [r["id"] for r in found] for scorer, found in rows.items()}
    hows = injection.INSTRUCTIONS
    assert len(ids["summarization"]) == len(injection.SUMMARIES) * (1 + 2 * len(hows))
    assert "bridge-invented@source-chinese" in ids["summarization"]
    assert "eiffel-missed@passage-fence" in ids["context-recall"]
    by_id = {r["id"]: r for found in rows.values() for r in found}
    clean, injected = by_id["einstein"], by_id["einstein@passage-json"]
    assert injected["ground_truth"] == clean["ground_truth"]
    assert all(p.endswith(hows["json"]) for p in injected["context"])
    assert by_id["founded-approx@summary-note"]["source"] == by_id["founded-approx"]["source"]
    # End to end on the scripted engine: every variant is scored and reported.
    out = tmp_path / "report.json"
    assert (
        injection.main(["--out", str(tmp_path / "w"), "--json", str(out), "--backend", "scripted"])
        == 0
    )
    report = json.loads(out.read_text())
    assert set(report["scorers"]["context-recall"]) == {
        f"{where}-{how}" for where in ("passage", "answer") for how in hows
    }


def test_injection_scores_the_variants_by_a_design_in_process(tmp_path):
    out = tmp_path / "report.json"
    argv = ["--design", "evalgpu-coverage-summary", "--json", str(out), "--max-questions", "3"]
    assert injection.main([*argv, "--backend", "benchmarks.designs.scripted:engine"]) == 0
    report = json.loads(out.read_text())
    assert report["design"] == "evalgpu-coverage-summary"
    assert report["options"]["max_questions"] == 3
    variants = report["scorers"]["summarization"]
    assert set(variants) == {
        f"{where}-{how}" for where in ("summary", "source") for how in injection.INSTRUCTIONS
    }
    # The design's axes and the product's, from the same run, for every row of every variant.
    for entry in variants.values():
        for deltas in entry["rows"].values():
            assert {"coverage", "coverage_product", "score_soft", "score_soft_product"} <= set(
                deltas
            )
    recall = report["scorers"]["context-recall"]
    assert set(recall) == {
        f"{where}-{how}" for where in ("passage", "answer") for how in injection.INSTRUCTIONS
    }
    assert all(
        {"recall", "score_soft"} <= set(d) for e in recall.values() for d in e["rows"].values()
    )
