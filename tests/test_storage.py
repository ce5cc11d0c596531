"""The output folder: lock, configuration, torn lines, durable appends, what is done, summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgpu.models import DEFAULT_MODEL
from evalgpu.results import RESULT_VERSION
from evalgpu.storage import (
    CONFIG_VERSION,
    ConfigError,
    OutputFolder,
    config_hash,
    read_folder,
    scan_results,
)


def config(model: str | None = None, backend: str = "scripted", **options: Any) -> dict[str, Any]:
    made: dict[str, Any] = {
        "version": CONFIG_VERSION,
        "result_version": RESULT_VERSION,
        "scorer_ids": ["summarization-scorer"],
        "model": model,
        "backend": backend,
        "options": {"summarization-scorer": {"max_questions": 10, "scale": 1.0, **options}},
        "map": {},
        "data": [{"path": "d.jsonl", "sha256": "ab", "size": 3}],
    }
    made["hash"] = config_hash(made)
    return made


def record(row: int, error: str | None = None, score: float = 1.0) -> dict[str, Any]:
    return {
        "row": row,
        "file": "d.jsonl",
        "scorer": "summarization-scorer",
        "score": None if error else score,
        "error": error,
    }


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
        assert folder.resume() == 0
        folder.append([record(1), record(2, "row 2: boom")])
    (out / "results.jsonl").write_text((out / "results.jsonl").read_text() + '{"row": 3')
    with OutputFolder(out, config()) as folder:
        folder.resume()
        assert folder.aggregates.counts("summarization-scorer") == (1, 1)
    assert (out / "results.jsonl").read_text().endswith("}\n")  # the torn line was cut
    with pytest.raises(ConfigError, match=r"holds results of another configuration \(options: "):
        OutputFolder(out, config(scale=2.0))


def version_1(**changes: Any) -> dict[str, Any]:
    """A config.json as version 1 of the command line wrote it (the judge as asked for)."""
    old: dict[str, Any] = {
        "version": 1,
        "result_version": RESULT_VERSION,
        "scorers": ["summarization"],
        "scorer_ids": ["summarization-scorer"],
        "model": None,
        "backend": "auto",
        "options": {"max_questions": 10, "scale": 1.0},
        "map": {},
        "data": [{"path": "old/d.jsonl", "sha256": "ab", "size": 3}],
        "hash": "0123456789abcdef",
        **changes,
    }
    return old


def test_a_version_1_folder_that_means_the_same_is_resumed_in_this_shape(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(version_1()))
    # "auto" and the default model, as this machine resolves them.
    new = config(model=DEFAULT_MODEL, backend="transformers")
    with OutputFolder(out, new) as folder:
        assert folder.config["hash"] == new["hash"]
        assert folder.config["data"][0]["path"] == "old/d.jsonl"  # its records name it so
    written = json.loads((out / "config.json").read_text())
    assert written["version"] == CONFIG_VERSION and written["hash"] == new["hash"]
    assert written["options"] == {"summarization-scorer": {"max_questions": 10, "scale": 1.0}}
    with OutputFolder(out, new):  # and from now on, plainly the same configuration
        pass


def test_a_version_1_folder_that_means_another_run_is_refused_with_what_differs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(version_1(backend="vllm")))
    with pytest.raises(ConfigError, match=r'\(backend: "vllm" -> "transformers"\)'):
        OutputFolder(out, config(model=DEFAULT_MODEL, backend="transformers"))
    soft = version_1(options={"max_questions": 10, "scale": 1.0, "verdicts": "soft"})
    (out / "config.json").write_text(json.dumps(soft))
    with pytest.raises(
        ConfigError, match=r'options: summarization-scorer verdicts: "soft" -> null'
    ):
        OutputFolder(out, config(model=DEFAULT_MODEL, backend="transformers"))
    assert json.loads((out / "config.json").read_text())["version"] == 1  # left as it was


def test_a_file_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ValueError, match=r"out: .*taken is a file, not a folder"):
        OutputFolder(tmp_path / "taken", config())
    with pytest.raises(ValueError, match=r"out: .*taken/sub lies under .*taken, a file"):
        OutputFolder(tmp_path / "taken" / "sub", config())


def test_the_folder_knows_what_is_done_and_never_writes_a_success_twice(tmp_path: Path) -> None:
    out, sid = tmp_path / "out", "summarization-scorer"
    with OutputFolder(out, config()) as folder:
        folder.resume()
        assert folder.append([record(1), record(2, "row 2: boom")]) == [
            record(1),
            record(2, "row 2: boom"),
        ]
        # A chunk scored twice (a Ray chunk retried): the success already there is dropped.
        assert folder.append([record(1, score=0.5), record(2)]) == [record(2)]
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["row"] for line in lines] == [1, 2, 2]
    with OutputFolder(out, config()) as folder:
        assert not folder.done(0, 1, sid)  # nothing read before resume
        folder.resume()
        assert folder.done(0, 1, sid) and folder.done(0, 2, sid) and not folder.done(0, 3, sid)


def test_summary_json_holds_the_configuration_the_aggregates_and_the_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputFolder(out, config()) as folder:
        folder.resume()
        folder.append([record(1, score=0.5), record(2, "row 2: boom")])
        path = folder.write_summary(
            engine="scripted",
            file_errors=["d2.jsonl: not found"],
            duplicate_ids={"count": 0},
            run={"rows": 2},
        )
    summary = json.loads(path.read_text())
    assert list(summary) == [
        "version",
        "config_hash",
        "model",
        "backend",
        "engine",
        "options",
        "map",
        "data",
        "file_errors",
        "duplicate_ids",
        "scorers",
        "tokens",
        "cached_share",
        "run",
    ]
    assert summary["config_hash"] == config()["hash"] and summary["data"] == ["d.jsonl"]
    assert summary["file_errors"] == {"count": 1, "messages": ["d2.jsonl: not found"]}
    scored = summary["scorers"]["summarization-scorer"]
    assert (scored["scored"], scored["failed"], scored["mean"]) == (1, 1, 0.5)
    assert summary["run"] == {"rows": 2}


def test_a_folder_is_read_without_its_lock(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputFolder(out, config()) as folder:
        folder.resume()
        folder.append([record(1, score=0.25)])
        (out / "results.jsonl").write_text((out / "results.jsonl").read_text() + "not json\n")
        read, aggregates, bad = read_folder(out)  # while the run holds it
    assert read["hash"] == config()["hash"] and bad == 1
    assert aggregates.summary()["scorers"]["summarization-scorer"]["mean"] == 0.25
    with pytest.raises(FileNotFoundError, match="is not an evalgpu output folder"):
        read_folder(tmp_path / "nowhere")
