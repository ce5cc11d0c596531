"""`evalgpu.calibrate` and `python -m evalgpu calibrate`: split, score, fit, report.

The judge is `cli_engines.GradedEngine`: a check's p is the grade its claim or question says,
so each made-up labelled row below writes the judge's leaning into its own text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgpu import cli
from evalgpu.calibrate import (
    LabelledRow,
    balanced_accuracy,
    calibrate,
    fit_check,
    pair_win,
    read_labelled,
    roc_auc,
    spearman,
    split_rows,
)
from evalgpu.calibration import load_calibration
from samples import records, write_jsonl

from cli_engines import GradedEngine

GRADES = list(range(30, 100, 2))
"""35 grades; the judge says "yes" from 51, the label from 71: it leans to yes."""


def attribution_rows() -> list[dict]:
    return [
        {
            "id": f"a{g}",
            "ground_truth": f"The lake {g} is deep grade {g}.",
            "context": [f"Lake {g} lies in the north."],
            "label_attributed": int(g > 70),
        }
        for g in GRADES
    ]


def test_the_statistics():
    assert balanced_accuracy([True, True, False, True], [1, 1, 0, 0]) == 0.75
    assert roc_auc([0.9, 0.1, 0.5, 0.5], [1, 0, 1, 0]) == pytest.approx(0.875)
    assert spearman([1, 2, 3, 4], [10, 20, 40, 30]) == pytest.approx(0.8)
    # one article's faithful summary above one of its two unfaithful ones, tied with the other
    assert pair_win([0.9, 0.5, 0.9, 0.1], [1, 0, 0, 1], ["a", "a", "a", "b"]) == 0.75


def test_the_threshold_is_fitted_where_the_labels_turn_on_each_rows_weakest_p():
    rows = [
        LabelledRow("f", i, None, f"g{i}", label, ps={"context_recall.attribution": ps})
        for i, (ps, label) in enumerate(
            [([0.95, 0.6], 0), ([0.8, 0.99], 1), ([0.65], 0), ([0.9], 1), ([0.55, 0.9], 0)]
        )
    ]
    fitted = fit_check("attribution", rows, "context_recall.attribution")
    assert 0.65 < fitted.threshold < 0.8
    assert fitted.fit["balanced_accuracy(hard)"] == 1.0
    assert fitted.rows == 5


def test_coverage_is_fitted_against_a_graded_label():
    rows = [
        LabelledRow("f", i, None, f"g{i}", label, ps={"summarization.coverage": ps})
        for i, (ps, label) in enumerate(
            [([0.6, 0.6, 0.6], 0.0), ([0.8, 0.6, 0.6], 0.3), ([0.8, 0.8, 0.6], 0.6), ([], 0.0)]
        )
    ]
    fitted = fit_check("coverage", rows, "summarization.coverage")
    assert 0.6 <= fitted.threshold < 0.8  # at 0.5 every row but the empty one covers all
    assert fitted.fit["spearman(hard)"] == pytest.approx(1.0)


def test_rows_of_one_text_fall_on_one_side_and_the_split_repeats():
    rows = [LabelledRow("f", i, None, f"article {i // 3}", 0) for i in range(60)]
    split_rows(rows, 0.5, seed=7)
    sides = {}
    for r in rows:
        assert sides.setdefault(r.group, r.fit) == r.fit
    assert sum(sides.values()) == 10
    again = [LabelledRow("f", i, None, f"article {i // 3}", 0) for i in range(60)]
    split_rows(again, 0.5, seed=7)
    assert [r.fit for r in again] == [r.fit for r in rows]


def test_a_bad_label_is_named_and_left_out_and_a_file_without_labels_is_refused(tmp_path):
    path = write_jsonl(
        tmp_path / "rows.jsonl",
        [
            {"summary": "s", "source": "x", "label_faithful": 1},
            {"summary": "s", "source": "x", "label_faithful": 0.5},
            {"summary": "s", "source": "x"},
            "{broken",
        ],
    )
    label, rows, problems = read_labelled(path)
    assert (label, [r.row for r in rows]) == ("label_faithful", [1])
    assert problems == [
        f"{path} row 2: label_faithful: 0.5 is out of range",
        f"{path} row 3: label_faithful: not a number (None)",
        f"{path} row 4: not JSON (Expecting property name enclosed in double quotes)",
    ]
    write_jsonl(path, [{"summary": "s", "source": "x"}])
    with pytest.raises(ValueError, match="row 1: no label field"):
        read_labelled(path)


def test_calibrate_fits_on_one_share_and_beats_the_judges_threshold_on_the_rest(tmp_path):
    data = write_jsonl(tmp_path / "attribution.jsonl", attribution_rows())
    out = tmp_path / "cal"
    engine = GradedEngine()
    calibration, report = calibrate([data], out, engine, fit_share=0.5, seed=3)
    check = calibration.checks["context_recall.attribution"]
    assert 0.6 < check.threshold <= 0.72
    held = report["checks"]["context_recall.attribution"]
    split = json.loads((out / "split.json").read_text())
    assert held["rows"] == len(split["held_out"][str(data)]) == len(GRADES) - check.rows
    accuracy = held["balanced_accuracy(hard)"]
    assert accuracy["calibrated"] == 1.0 > accuracy["uncalibrated"]
    assert load_calibration(out / "calibration.json") == calibration
    assert all(r["calibration"] is None for r in records(out / "attribution"))  # raw p fitted
    # A rerun resumes: nothing is scored twice, the same fit comes out.
    calls = len(engine.requests)
    again, _ = calibrate([data], out, engine, fit_share=0.5, seed=3)
    assert len(engine.requests) == calls and again == calibration
    with pytest.raises(ValueError, match="holds another split"):
        calibrate([data], out, engine, fit_share=0.5, seed=4)


def test_the_command_line_calibrates_and_a_run_uses_the_file(tmp_path, capsys):
    data = write_jsonl(tmp_path / "attribution.jsonl", attribution_rows())
    out = tmp_path / "cal"
    backend = ["--backend", "cli_engines:GradedEngine", "--progress", "off"]
    assert cli.main(["calibrate", str(data), "--out", str(out), *backend]) == 0
    shown = capsys.readouterr().out
    fitted = load_calibration(out / "calibration.json").checks["context_recall.attribution"]
    assert f"context_recall.attribution: threshold {fitted.threshold:.3f}" in shown
    assert "balanced_accuracy(hard)" in shown
    run = ["run", str(data), "--scorer", "context-recall", *backend]
    cal = str(out / "calibration.json")
    assert cli.main([*run, "--out", str(tmp_path / "r"), "--calibration", cal]) == 0
    (first, *_) = records(tmp_path / "r")
    assert first["calibration"] == "cal" and "p_raw" in first["analyzeStepResult"]["verdicts"][0]
    broken = Path(tmp_path / "broken.json")
    broken.write_text('{"name": "x"}')
    code = cli.main([*run, "--out", str(tmp_path / "r2"), "--calibration", str(broken)])
    assert code == 2
    assert "broken.json: checks: Field required" in capsys.readouterr().err


def test_faithfulness_rows_fit_alignment_with_one_question_a_source(tmp_path):
    rows = []
    for article in range(12):
        source = f"Town {article} has a river. The river is long."
        for grade in (40 + article, 55 + article, 80 + article):
            summary = f"Town {article} has a river grade {grade}. The river is long grade 95."
            label = int(grade > 70)
            rows.append({"source": source, "summary": summary, "label_faithful": label})
    data = write_jsonl(tmp_path / "faithful.jsonl", rows)
    out = tmp_path / "cal"
    calibration, report = calibrate([data], out, GradedEngine(), seed=5)
    assert list(calibration.checks) == ["summarization.alignment"]
    assert 0.6 < calibration.checks["summarization.alignment"].threshold < 0.8
    held = report["checks"]["summarization.alignment"]
    assert held["pair_win(hard)"]["calibrated"] == 1.0 > held["pair_win(hard)"]["uncalibrated"]
    config = json.loads((out / "faithful" / "config.json").read_text())
    assert [o["max_questions"] for o in config["options"].values()] == [1]


class DyingEngine(GradedEngine):
    """A graded judge that fails every call while `broken` is set."""

    broken = True

    def generate(self, requests):
        if self.broken:
            raise RuntimeError("the device fell over")
        return super().generate(requests)


def test_rows_failed_in_the_engine_fit_nothing_and_a_rerun_resumes(tmp_path):
    data = write_jsonl(tmp_path / "attribution.jsonl", attribution_rows())
    out = tmp_path / "cal"
    engine = DyingEngine()
    with pytest.raises(RuntimeError, match="35 rows failed in the engine"):
        calibrate([data], out, engine, seed=3)
    assert not (out / "calibration.json").exists()
    engine.broken = False
    calibration, _ = calibrate([data], out, engine, seed=3)
    assert calibration.checks["context_recall.attribution"].rows + (
        calibration.fitted_on["held_out_rows"]
    ) == len(GRADES)
    assert calibration.fitted_on["failed_rows"] == {str(data): {}}
