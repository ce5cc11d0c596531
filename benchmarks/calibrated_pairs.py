"""FRANK pair win of a fitted calibration against the judge's own verdicts, on articles it was
not fitted on.

`python -m evalgpu calibrate` reports on its held-out rows, but a random draw of FRANK rows holds
few (faithful, unfaithful) pairs of one article, the unit FRANK's pair win is read on. This
takes the pairs `agreement.py --pairs` draws (every article with both labels, seed 1234), drops
the articles the calibration folder fitted on (its split.json: every sampled row not held out),
scores the rest once, uncalibrated, with soft verdicts and one coverage question (the label
reads the alignment checks only), and reads each claim's p both ways: hard alignment (the share
of p above 0.5, against above the fitted threshold) and soft (the mean p, against the mean
calibrated p), each difference with an interval over the pairs resampled (`held_out_report`,
as `calibrate` reports its own held-out rows).

    scripts/calibrated_pairs.py runs/cal-frank --out runs/cal-frank-pairs \\
        --json docs/measured/calibrated-pairs.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import evalgpu
from benchmarks.measure.datasets import read_jsonl, sample_pairs
from evalgpu.calibrate import LabelledRow, held_out_report
from evalgpu.calibration import load_calibration

FRANK = Path(__file__).resolve().parent / "data" / "frank_dev.jsonl"
KIND = "summarization.alignment"


def fitted_sources(folder: Path) -> set[str]:
    """The sources of the rows a `calibrate` folder fitted on (sampled and not held out).

    split.json names a held-out row by its line number in its file, from 1, as
    `evalgpu.calibrate.read_labelled` counts them (blank lines included)."""
    split = json.loads((folder / "split.json").read_text())
    sources: set[str] = set()
    for path, held_out in split["held_out"].items():
        kept = set(held_out)
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        sources |= {
            json.loads(line)["source"]
            for number, line in enumerate(lines, 1)
            if line.strip() and number not in kept
        }
    return sources


def held_out_pairs(folder: Path, data: Path = FRANK) -> list[dict[str, Any]]:
    """`sample_pairs`' pairs ([faithful, unfaithful] * n) whose article was not fitted on."""
    fitted = fitted_sources(folder)
    pairs = sample_pairs(read_jsonl(data), None)
    return [
        row
        for i in range(0, len(pairs), 2)
        if pairs[i]["source"] not in fitted
        for row in pairs[i : i + 2]
    ]


def claim_ps(out: Path) -> dict[str, list[float]]:
    """Each row's alignment p, by row id (the last record of a row wins)."""
    ps: dict[str, list[float]] = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("error") is None:
            steps = record["preprocessStepResult"]["alignment"]
            ps[record["id"]] = [check["p"] for check in steps]
    return ps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calibration", type=Path, help="a `calibrate --out` folder")
    parser.add_argument("--out", type=Path, required=True, help="the scoring's output folder")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    check = load_calibration(args.calibration / "calibration.json")
    fitted = check.check(KIND) if check is not None else None
    if fitted is None:
        raise SystemExit(f"{args.calibration} has no {KIND} calibration")
    rows = held_out_pairs(args.calibration)
    started = time.monotonic()
    judge = evalgpu.load_engine()
    scorer = evalgpu.create_summarization_scorer(
        judge, max_questions=1, verdicts="soft", calibration=False
    )
    items = [{"source": r["source"], "summary": r["summary"], "id": r["id"]} for r in rows]
    evalgpu.evaluate(items, [scorer], out=args.out).run()
    ps = claim_ps(args.out)
    scored = [  # the pairs of which both rows have claims, read as `calibrate` reads its own
        LabelledRow(str(FRANK), i, r["id"], r["source"], float(r["label_faithful"]), ps={KIND: p})
        for i, r in enumerate(rows)
        if (p := ps.get(r["id"])) and ps.get(rows[i ^ 1]["id"])  # i ^ 1: its pair's other row
    ]
    report: dict[str, Any] = {
        "calibration": str(args.calibration),
        "threshold": fitted.threshold,
        "slope": fitted.slope,
        "pairs": len(rows) // 2,
        "pairs_scored": len(scored) // 2,
        "seconds": round(time.monotonic() - started, 1),
    }
    report |= held_out_report("faithfulness", scored, KIND, check, seed=1234)
    for name in ("hard", "soft"):
        got = report[f"pair_win({name})"]
        print(
            f"pair_win({name}) {got['uncalibrated']:.3f} -> {got['calibrated']:.3f} "
            f"({got['difference']:+.3f} [{got['ci95'][0]:+.3f}, {got['ci95'][1]:+.3f}])"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":  # vLLM starts its engine processes by spawn: they import this file
    main()
