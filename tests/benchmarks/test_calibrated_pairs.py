"""benchmarks/calibrated_pairs.py: the pairs kept are the articles a calibration did not fit on,
and each row's claims are read from its last successful record."""

from __future__ import annotations

import json

from benchmarks.calibrated_pairs import claim_ps, held_out_pairs
from evalgpu.calibrate import read_labelled


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_pairs_kept_are_of_articles_the_calibration_did_not_fit_on(tmp_path):
    data = [
        {"id": f"{a}-{k}", "source": a, "summary": f"{a} {k}", "label_faithful": k}
        for a in ("A", "B", "C")
        for k in (1, 0)
    ]
    _write(tmp_path / "frank.jsonl", data)
    sample = tmp_path / "sample.jsonl"
    _write(sample, [data[0], data[2], data[5]])  # rows of A, B, C drawn
    # B held out, numbered as calibrate numbers the rows it writes into split.json.
    _, rows, _ = read_labelled(sample)
    held = [r.row for r in rows if r.id == "B-1"]
    assert held == [2]
    split = {"seed": 1, "fit_share": 0.5, "held_out": {str(sample): held}}
    (tmp_path / "split.json").write_text(json.dumps(split))
    kept = held_out_pairs(tmp_path, tmp_path / "frank.jsonl")
    assert [r["id"] for r in kept] == ["B-1", "B-0"]  # A and C were fitted on


def test_a_rows_claims_come_from_its_last_record_and_failures_are_left_out(tmp_path):
    def record(row_id, ps, error=None):
        steps = {"alignment": [{"claim": "c", "p": p} for p in ps]}
        return {"id": row_id, "error": error, "preprocessStepResult": steps}

    _write(
        tmp_path / "results.jsonl",
        [record("x", [0.2]), record("y", [], error="boom"), record("x", [0.9, 0.4])],
    )
    assert claim_ps(tmp_path) == {"x": [0.9, 0.4]}
