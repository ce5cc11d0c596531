"""`evalgpu.calibration`: the map, the file, and verdicts calibrated in one place."""

from __future__ import annotations

import json
import math

import pytest

from evalgpu import create_context_recall_scorer, create_summarization_scorer, evaluate
from evalgpu.calibration import Calibration, CheckCalibration, load_calibration
from evalgpu.engines.scripted import ScriptedEngine
from samples import COMPANY, EINSTEIN, GOOD, PASSAGES

STRICT = Calibration(
    name="strict",
    checks={"summarization.alignment": CheckCalibration(threshold=0.95, slope=2.0)},
)
"""The scripted judge's true verdicts have p 0.9: under this map its claims are unsupported."""


def test_the_map_puts_one_half_at_the_threshold_and_keeps_the_order():
    check = CheckCalibration(threshold=0.7, slope=1.5)
    assert check.apply(0.7) == pytest.approx(0.5)
    ps = [0.01, 0.2, 0.5, 0.69, 0.71, 0.9, 0.999]
    mapped = [check.apply(p) for p in ps]
    assert mapped == sorted(mapped)
    assert (mapped[3] < 0.5, mapped[4] > 0.5) == (True, True)
    assert CheckCalibration(threshold=0.5).apply(0.8) == pytest.approx(0.8)  # the identity
    assert (check.apply(0.0), check.apply(1.0)) == (0.0, 1.0)  # certain stays certain
    # slope 2 is the logit doubled around the threshold
    assert check.apply(0.9) == pytest.approx(
        1 / (1 + math.exp(-1.5 * (math.log(9) - math.log(0.7 / 0.3))))
    )


def test_a_file_is_read_and_a_bad_one_is_named_with_its_field(tmp_path):
    path = tmp_path / "c.json"
    STRICT.save(path)
    assert load_calibration(path) == STRICT
    assert load_calibration(str(path)).digest() == STRICT.digest()
    assert load_calibration(False) is None and load_calibration(None) is None
    bad = json.loads(path.read_text())
    bad["checks"]["summarization.alignment"]["threshold"] = 1.5
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"c\.json: checks\.summarization\.alignment\.threshold"):
        load_calibration(path)
    bad["checks"] = {"summarization.typo": {"threshold": 0.6}}
    with pytest.raises(ValueError, match=r"unknown kind 'summarization\.typo'"):
        load_calibration(bad)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read"):
        load_calibration(path)


def test_a_calibrated_scorer_judges_by_the_threshold_and_keeps_the_judges_p(tmp_path):
    engine = ScriptedEngine()
    scorer = create_summarization_scorer(engine, verdicts="hard", calibration=STRICT)
    plain = create_summarization_scorer(engine, verdicts="hard", calibration=False)
    run = {"input": COMPANY, "output": GOOD}
    mine, theirs = scorer.run(**run), plain.run(**run)
    assert theirs.axes["alignment"] == 1.0 and theirs.calibration is None
    assert mine.axes["alignment"] == 0.0 and mine.calibration == "strict"
    for entry in mine.preprocess_step_result["alignment"]:
        assert entry["supported"] is False
        assert entry["p_raw"] == pytest.approx(0.9)
        assert entry["p"] == pytest.approx(STRICT.checks["summarization.alignment"].apply(0.9))
    assert "p_raw" not in theirs.preprocess_step_result["alignment"][0]
    # a kind the file does not map keeps the judge's verdicts
    assert mine.axes["coverage"] == theirs.axes["coverage"]
    assert all("p_raw" not in e for e in mine.analyze_step_result["coverage"])
    # the same engine's cached replies were not changed by the calibrated scorer
    assert plain.run(**run).axes["alignment"] == 1.0


def test_records_and_config_name_the_calibration(tmp_path):
    engine = ScriptedEngine()
    recall = create_context_recall_scorer(
        engine,
        context=PASSAGES,
        calibration={
            "name": "lenient",
            "checks": {"context_recall.attribution": {"threshold": 0.05}},
        },
    )
    out = tmp_path / "out"
    records = list(evaluate([{"ground_truth": EINSTEIN}], [recall], out=out))
    assert records[0]["calibration"] == "lenient"
    verdicts = records[0]["analyzeStepResult"]["verdicts"]
    assert all(v["attributed"] for v in verdicts)  # p 0.1 of a "no" is above 0.05
    assert sorted(v["p_raw"] for v in verdicts) == pytest.approx([0.1, 0.9, 0.9])
    config = json.loads((out / "config.json").read_text())
    (options,) = config["options"].values()
    assert options["calibration"] == {"name": "lenient", "digest": recall.calibration.digest()}
