"""`python -m evalgpu run --verdicts`: the soft-verdict option reaches both scorers and the
output folder's configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgpu import cli

COMPANY = (
    "The company was founded in 1995 by John Smith. It started with 10 employees and grew to "
    "500 by 2020. The company is based in Seattle."
)
GOOD = "John Smith founded the company in 1995. The company is based in Seattle."


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str]:
    code = cli.main([str(a) for a in args])
    return code, capsys.readouterr().err


def scored(out: Path) -> list[dict]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_soft_verdicts_score_from_the_soft_axes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"source": COMPANY, "summary": GOOD}) + "\n", encoding="utf-8")
    base = ["run", data, "--scorer", "summarization", "--backend", "scripted"]
    assert run(capsys, *base, "--out", tmp_path / "hard")[0] == 0
    assert run(capsys, *base, "--out", tmp_path / "soft", "--verdicts", "soft")[0] == 0
    (hard,), (soft,) = scored(tmp_path / "hard"), scored(tmp_path / "soft")
    axes = soft["axes"]
    assert soft["score"] == pytest.approx(min(axes["alignment_soft"], axes["coverage_soft"]))
    assert hard["score"] == pytest.approx(min(axes["alignment"], axes["coverage"]))
    assert soft["score"] != hard["score"]
    # The option is configuration: a soft run does not resume a hard folder.
    code, err = run(capsys, *base, "--out", tmp_path / "hard", "--verdicts", "soft")
    assert code == 2 and "another configuration" in err


def test_an_unknown_mode_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"source": COMPANY, "summary": GOOD}) + "\n", encoding="utf-8")
    code, err = run(
        capsys, "run", data, "--scorer", "summarization", "--out", tmp_path / "o", "--verdicts", "x"
    )
    assert code == 2 and "argument --verdicts: invalid choice: 'x'" in err
