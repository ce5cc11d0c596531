"""The output folder: lock, configuration, torn lines, durable appends, the ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgpu.storage import (
    SCORED,
    ConfigError,
    Ledger,
    OutputFolder,
    config_hash,
    failure_state,
    scan_results,
)


def config(**options: Any) -> dict[str, Any]:
    made: dict[str, Any] = {
        "scorers": ["summarization"],
        "scorer_ids": ["summarization-scorer"],
        "model": None,
        "backend": "scripted",
        "options": {"max_questions": 10, "scale": 1.0, **options},
        "map": {},
        "data": [{"path": "d.jsonl", "sha256": "ab", "size": 3}],
    }
    made["hash"] = config_hash(made)
    return made


def record(row: int, error: str | None = None) -> dict[str, Any]:
    return {"row": row, "file": "d.jsonl", "scorer": "summarization-scorer", "error": error}


def test_scan_results_skips_a_torn_line_and_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = json.dumps(record(1)) + "\n"
    path.write_text(good + "not json\n" + good.replace('"row": 1', '"row": 2') + good[:30])
    seen: list[dict[str, Any]] = []
    end, bad = scan_results(path, seen.append)
    assert [r["row"] for r in seen] == [1, 2]
    assert bad == 1
    assert end == path.stat().st_size - 30


def test_the_hash_ignores_where_the_data_files_are() -> None:
    moved = config()
    moved["data"][0]["path"] = "elsewhere/d.jsonl"
    assert config_hash(moved) == config()["hash"]
    assert config(scale=2.0)["hash"] != config()["hash"]


def test_a_folder_is_locked_configured_resumed_and_appended(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputFolder(out, config()) as folder:
        with pytest.raises(ConfigError, match="another evalgpu run is writing to"):
            OutputFolder(out, config())
        with pytest.raises(RuntimeError, match="before resume"):
            folder.append([record(1)])
        assert folder.resume(lambda _: None) == 0
        folder.append([record(1), record(2, "row 2: boom")])
    (out / "results.jsonl").write_text((out / "results.jsonl").read_text() + '{"row": 3')
    seen: list[dict[str, Any]] = []
    with OutputFolder(out, config()) as folder:
        folder.resume(seen.append)
    assert [r["row"] for r in seen] == [1, 2]
    assert (out / "results.jsonl").read_text().endswith("}\n")  # the torn line was cut
    with pytest.raises(ConfigError, match=r"holds results of another configuration \(options: "):
        OutputFolder(out, config(scale=2.0))


def test_a_file_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ValueError, match=r"out: .*taken is a file, not a folder"):
        OutputFolder(tmp_path / "taken", config())
    with pytest.raises(ValueError, match=r"out: .*taken/sub lies under .*taken, a file"):
        OutputFolder(tmp_path / "taken" / "sub", config())


def test_the_ledger_keeps_the_latest_outcome_and_never_undoes_a_success() -> None:
    ledger = Ledger(["a.jsonl", "b.jsonl"])
    assert ledger.file_index({"file": "b.jsonl"}) == 1 and ledger.file_index({"file": "c"}) == -1
    ledger.mark(0, 5, "s", failure_state("engine"))
    ledger.mark(0, 6, "s", failure_state(None))  # a record from before error kinds
    assert not ledger.done(0, 5, "s") and ledger.counts("s") == (0, 2)
    assert ledger.error_kinds("s") == {
        "input": 0,
        "too_long": 0,
        "invalid_reply": 0,
        "engine": 1,
        "unknown": 1,
    }
    ledger.mark(0, 5, "s", SCORED)
    ledger.mark(0, 5, "s", failure_state("input"))
    assert ledger.done(0, 5, "s") and ledger.counts("s") == (1, 1)
    assert not ledger.done(1, 5, "s")
