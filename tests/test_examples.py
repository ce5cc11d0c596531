"""`examples/score_examples.py`, the Python API's demo: both files scored, resumed, reported."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import evalgpu
from evalgpu import cli
from evalgpu.engines.scripted import ScriptedEngine

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def test_it_scores_both_example_files_once_into_the_folders_the_command_line_resumes(
    tmp_path, monkeypatch, capsys
):
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    loads = []
    monkeypatch.setattr(evalgpu, "load_engine", lambda: loads.append(1) or ScriptedEngine())
    script = runpy.run_path(str(tmp_path / "examples" / "score_examples.py"))
    script["main"]()
    assert loads == [1]  # one judge for both files
    first = capsys.readouterr().err
    for name, out in [
        ("summarization", "example-summarization"),
        ("context_recall", "example-context-recall"),
    ]:
        rows = _rows(tmp_path / "examples" / f"{name}.jsonl")
        assert rows <= script["ONE_CHUNK"]  # each file is one batch of waves (its docstring)
        assert f"{rows} scored, 0 failed, 0 already done" in first
        assert _rows(tmp_path / "runs" / out / "results.jsonl") == rows
    script["main"]()  # run again: every row is already done, nothing is scored twice
    again = capsys.readouterr().err
    assert again.count("0 scored, 0 failed,") == 2
    # The command line's run of the same file into the same folder resumes it too.
    code = cli.main(
        [
            "run",
            "examples/summarization.jsonl",
            "--scorer",
            "summarization",
            "--out",
            "runs/example-summarization",
            "--backend",
            "cli_engines:LimitedEngine",
        ]
    )
    assert code == 0
    assert _rows(tmp_path / "runs" / "example-summarization" / "results.jsonl") == _rows(
        tmp_path / "examples" / "summarization.jsonl"
    )
