"""The output folder: lock, configuration, torn lines, durable appends, what is done, summary."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from evalgpu import create_summarization_scorer, evaluate
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.models import DEFAULT_MODEL
from evalgpu.report import write_report
from evalgpu.results import RESULT_VERSION
from evalgpu.rows import Row
from evalgpu.storage import (
    CONFIG_VERSION,
    ConfigError,
    OutputFolder,
    config_hash,
    read_folder,
    scan_results,
)
from samples import (
    distinct_rows,
    read_summary,
    records,
    run_argv,
    successes,
    summary_rows,
    write_jsonl,
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


def test_the_folder_alone_says_which_rows_and_scorers_are_still_to_score(tmp_path: Path) -> None:
    out, sid, other = tmp_path / "out", "summarization-scorer", "context-recall-scorer"
    rows = [Row(0, n, {}) for n in (1, 2, 3)]
    with OutputFolder(out, config()) as folder:
        with pytest.raises(RuntimeError, match="pending before resume"):
            next(folder.pending(rows, [sid]))
        folder.resume()
        folder.append([record(1), record(2, "row 2: boom")])
        skipped: list[int] = []
        todo = folder.pending(rows, [sid, other], lambda r: skipped.append(r.number))
        # Row 1 still lacks the other scorer; row 2's failure is retried; row 3 is new.
        assert [(r.number, r.todo) for r in todo] == [
            (1, (other,)),
            (2, (sid, other)),
            (3, (sid, other)),
        ]
        assert skipped == []
        assert [
            r.number for r in folder.pending(rows, [sid], lambda r: skipped.append(r.number))
        ] == [2, 3]
        assert skipped == [1]


def test_summary_json_holds_the_configuration_the_aggregates_and_the_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputFolder(out, config()) as folder:
        folder.resume()
        folder.append([record(1, score=0.5), record(2, "row 2: boom")])
        written = folder.write_summary(
            engine="scripted",
            file_errors=["d2.jsonl: not found"],
            duplicate_ids={"count": 0},
            run={"rows": 2},
        )
    summary = json.loads((out / "summary.json").read_text())
    assert summary == written
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


# Through a whole run (`evaluate`, or `python -m evalgpu` killed at random)


def test_text_that_cannot_be_written_as_utf8_is_replaced_in_records(tmp_path: Path) -> None:
    class Garbled(ScriptedEngine):  # an engine whose error message holds a lone surrogate
        def generate(self, requests: Any) -> Any:
            raise RuntimeError("the device said \udc80")

    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(1))
    errors: list[str] = []
    scorers = [create_summarization_scorer(Garbled())]
    evaluate(data, scorers, out=tmp_path / "out", on_error=errors.append).run()
    (record,) = records(tmp_path / "out")  # reads the file as strict UTF-8
    assert record["error"].endswith("RuntimeError: the device said \ufffd")
    assert record["errorKind"] == "engine"
    assert errors == [record["error"]]  # what is echoed is the written, replaced text
    failures = read_summary(tmp_path / "out")["scorers"]["summarization-scorer"]["failures"]
    assert failures[0]["error"] == record["error"]


def test_a_folder_in_use_is_refused_by_another_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(1))
    out = tmp_path / "out"
    scorers = [create_summarization_scorer(ScriptedEngine())]
    with evaluate(data, scorers, out=out) as holding:
        next(iter(holding))  # the folder is open, its lock held
        with pytest.raises(ConfigError, match="another evalgpu run is writing to"):
            evaluate(data, scorers, out=out).run()


def test_a_torn_last_line_is_ignored_and_cut(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(5))
    out = tmp_path / "out"
    scorers = [create_summarization_scorer(ScriptedEngine())]
    evaluate(data, scorers, out=out).run()
    lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[:3]) + lines[3][:40])  # a crash mid-write
    text, _, _ = write_report(out)
    assert "summarization-scorer" in text  # the report reads around it
    run = evaluate(data, scorers, out=out).run()
    assert run.progress is not None and run.progress.rows_run == 2
    got = records(out)  # every line parses: the torn tail was cut before appending
    assert sorted(r["row"] for r in got) == [1, 2, 3, 4, 5]


def test_kill_9_at_a_random_moment_then_resume(tmp_path: Path) -> None:
    rows = 2000
    data = write_jsonl(tmp_path / "d.jsonl", distinct_rows(rows))
    out = tmp_path / "out"
    argv = run_argv(data, out, "--chunk-size", "40", "--backend", "cli_engines:slow")
    tests = Path(__file__).resolve().parent
    path = [str(tests), str(tests.parent / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "EVALGPU_TEST_SLEEP": "0.03"}
    # About 5 s of judging in all.
    rng = random.Random()
    for _ in range(3):  # three kills at random moments, each after the previous one's restart
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (out / "results.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(successes(out, killed=True)) < rows  # the kills came before the end
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    scored = successes(out)  # asserts no duplicate successful (row, scorer)
    assert sorted(k[1] for k in scored) == list(range(1, rows + 1))
    assert all(r["error"] is None for r in records(out))
