"""A sweep fed chunk by chunk from outside (as a Ray driver would): append, count, resume."""

from __future__ import annotations

import json
from pathlib import Path

from evalgpu import create_summarization_scorer
from evalgpu.driver import Driver
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.rows import Row
from evalgpu.sweep import Sweep

SOURCE = "The company was founded in 1995 by John Smith. The company is based in Seattle."


def test_chunks_scored_elsewhere_are_appended_counted_and_resumed(tmp_path: Path) -> None:
    scorers = [create_summarization_scorer(ScriptedEngine())]
    data = tmp_path / "d.jsonl"
    data.write_text("{}\n")
    driver = Driver(scorers, files=[str(data)])
    rows = [Row(0, n, {"source": SOURCE, "summary": SOURCE}) for n in (1, 2, 3)]
    errors: list[str] = []
    with Sweep(tmp_path / "out", scorers, paths=[data]) as sweep:
        sweep.add_chunk(2, driver.score_chunk(rows[:2]), on_error=errors.append)
        sweep.add_chunk(
            1, [{**driver.score_chunk(rows[2:])[0], "error": "row 3: boom"}], on_error=errors.append
        )
        summary = json.loads(sweep.finish().read_text())
    assert errors == ["row 3: boom"]
    assert (summary["scorers"]["summarization-scorer"]["scored"], summary["run"]["rows"]) == (2, 3)
    with Sweep(tmp_path / "out", scorers, paths=[data]) as again:
        assert [again.folder.done(0, n, "summarization-scorer") for n in (1, 2, 3)] == [
            True,
            True,
            False,
        ]
