"""`python -m evalgpu`: its own behaviour (help, usage errors and exit status, flags reaching
the engine, the lines it writes, the subprocess entry point, `models`), with a scripted engine
injected by `--backend`.

In-process tests call `cli.main(argv)`; the entry-point test starts `python -m evalgpu` in a
subprocess with `tests/` on PYTHONPATH. What a run does with rows, files and folders is tested
beside its module (test_data, test_rows, test_sweep, test_storage, test_evaluation).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evalgpu import cli
from evalgpu.engines.scripted import ScriptedEngine
from evalgpu.storage import OutputFolder
from samples import COMPANY, GOOD, records, run_argv, successes, summary_rows, write_jsonl

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SCRIPTED = ["--backend", "scripted"]
RUN = ["run", "{data}", "--scorer", "summarization", "--out", "{out}"]
"""A valid run of the usage-error cases, before the flag each case gets wrong."""


def run_cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# Help and usage errors


@pytest.mark.parametrize("command", [[], ["run"], ["report"], ["models"]])
def test_help_has_examples(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code, out, _ = run_cli(capsys, *command, "--help")
    assert code == 0
    assert "usage: python -m evalgpu" in out
    if command:
        assert "examples:" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*RUN, "--bogus"], "unrecognized arguments: --bogus"),
        (
            ["run", "{data}", "--scorer", "bleu", "--out", "{out}"],
            "argument --scorer: invalid choice: 'bleu'",
        ),
        (["run", "{data}", "--out", "{out}"], "the following arguments are required: --scorer"),
        (
            ["run", "missing.jsonl", "--scorer", "summarization", "--out", "{out}"],
            "data file not found: missing.jsonl",
        ),
        (
            ["run", "notes.txt", "--scorer", "summarization", "--out", "{out}"],
            "notes.txt: unknown file type '.txt'",
        ),
        ([*RUN, "--map", "summary"], "--map takes FIELD=COLUMN, got 'summary'"),
        ([*RUN, "--map", "answer=x"], "map: unknown field 'answer'"),
        ([*RUN, "--scale", "0"], "scale must be > 0, got 0.0"),
        ([*RUN, "--max-questions", "0"], "max_questions must be >= 1, got 0"),
        ([*RUN, "--chunk-size", "x"], "argument --chunk-size: invalid int value: 'x'"),
        (
            [*RUN, "--backend", "tpu"],
            "backend must be auto, vllm, transformers, scripted or module:factory, got 'tpu'",
        ),
        (
            ["run", "{data}", "--scorer", "summarization", "--out", "{data}"],
            "out: {data} is a file, not a folder",
        ),
        (
            ["run", "{data}", "--scorer", "summarization", "--out", "{data}/sub"],
            "out: {data}/sub lies under {data}, a file, not a folder",
        ),
        ([*RUN, "--compute", "fp8"], "argument --compute: invalid choice: 'fp8'"),
        ([*RUN, "--threads", "0"], "threads must be >= 1, got 0"),
        ([*RUN, "--batch-size", "0"], "batch_size must be >= 1, got 0"),
        (
            [*RUN, "--threads", "2", *SCRIPTED],
            "threads is an option of the transformers and vllm engines, not of backend 'scripted'",
        ),
        (
            [*RUN, "--compute", "float32", "--batch-size", "4", *SCRIPTED],
            "compute and batch_size are options of the transformers engine, not of backend "
            "'scripted'",
        ),
        (
            [*RUN, "--compute", "float32", "--threads", "1", "--batch-size", "4", *SCRIPTED],
            "compute and batch_size are options of the transformers engine, threads is an "
            "option of the transformers and vllm engines, not of backend 'scripted'",
        ),
        (["report", "{out}"], "is not an evalgpu output folder (no config.json)"),
        (["models", "fly"], "argument list|pull: invalid choice: 'fly'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(1))
    (tmp_path / "notes.txt").write_text("x")
    os.chdir(tmp_path)
    argv = [a.format(data=data, out=tmp_path / "out") for a in args]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert message.format(data=data) in err
    assert err.startswith("python -m evalgpu")


# The example files


def test_example_files_score(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for name, scorer in [("summarization", "summarization"), ("context_recall", "context-recall")]:
        out = tmp_path / name
        code, stdout, err = run_cli(
            capsys,
            "run",
            ROOT / "examples" / f"{name}.jsonl",
            "--scorer",
            scorer,
            "--out",
            out,
            *SCRIPTED,
        )
        assert code == 0, err
        got = records(out)
        assert all(r["error"] is None for r in got), got
        assert len(got) >= 5
        assert "Lowest scores" in stdout
    einstein = next(r for r in records(tmp_path / "context_recall") if r["id"] == "einstein")
    assert einstein["score"] == pytest.approx(2 / 3)
    founded = next(r for r in records(tmp_path / "summarization") if r["id"] == "founded-good")
    assert founded["axes"]["alignment"] == 1.0


# Exit status and the lines on stderr


def test_exit_1_when_no_row_could_be_scored(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", ["{bad", {"source": COMPANY}])
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", tmp_path / "o", *SCRIPTED
    )
    assert code == 1
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            ': 0 scored, 2 failed (see "error" in '
            f"{tmp_path / 'o' / 'results.jsonl'}); no row could be scored"
        )
    )
    empty = write_jsonl(tmp_path / "e.jsonl", [])
    code, _, err = run_cli(
        capsys, "run", empty, "--scorer", "summarization", "--out", tmp_path / "e", *SCRIPTED
    )
    assert code == 1 and "no row could be scored" in err


def test_an_engine_that_does_not_load_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(1))
    code, _, err = run_cli(
        capsys,
        "run",
        data,
        "--scorer",
        "summarization",
        "--out",
        tmp_path / "o",
        "--backend",
        "nowhere:engine",
    )
    assert code == 1
    assert "cannot load the judge: ValueError: backend 'nowhere:engine'" in err


def test_row_errors_and_notices_are_echoed_and_the_last_line_counts_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = ["{bad"] * (cli.ERRORS_SHOWN + 2)
    # Rows r2, r3 between the bad lines and the repeat of r0: a chunk is cut only where the
    # source changes, so the read runs a row ahead of the scoring (r0's notice follows the cap).
    rows = [*summary_rows(2), *bad, *summary_rows(2, start=2), summary_rows(1)[0]]
    a = write_jsonl(tmp_path / "a.jsonl", rows)
    b = tmp_path / "b.json"
    b.write_text('{"id": "x"}')  # not an array: the file cannot be read
    out = tmp_path / "out"
    argv = ["run", a, b, "--scorer", "summarization", "--out", out, "--chunk-size", "1"]
    code, stdout, err = run_cli(capsys, *argv, *SCRIPTED)  # a row at a time: errors in order
    assert code == 0, err  # some rows failed, the run finished
    lines = err.strip().splitlines()
    assert f"python -m evalgpu run: {a} row 3: line is not valid JSON" in lines[1]
    assert err.count("line is not valid JSON") == cli.ERRORS_SHOWN  # then the rest are counted
    capped = lines.index("python -m evalgpu run: further errors are only in results.jsonl")
    # Notices are named even after the row errors shown were capped.
    repeated = f'python -m evalgpu run: {a} row {len(bad) + 5}: id "r0" repeats an earlier row'
    assert any(line.startswith(repeated) for line in lines[capped + 1 :])
    assert f"python -m evalgpu run: {b}: a .json file must hold an array of rows" in lines[capped:]
    assert lines[-1].startswith(f"python -m evalgpu run: {len(bad) + 5} rows in ")
    assert lines[-1].endswith(
        f': 5 scored, {len(bad)} failed (see "error" in {out / "results.jsonl"}); 1 unreadable '
        "file(s); 1 row repeating an id (scored; see summary.json); the folder holds 5 scored, "
        f"{len(bad)} failed"
    )
    assert "summarization-scorer" in stdout and f"wrote {out / 'results.jsonl'}" in stdout
    # Run again: the failed rows are tried again, the scored ones said to be done.
    code, _, err = run_cli(capsys, *argv, *SCRIPTED)
    assert code == 0, err
    assert f"{len(bad)} rows in " in err and "(5 already done)" in err
    code, stdout, err = run_cli(capsys, "report", out)
    assert code == 0 and "summarization-scorer" in stdout
    assert err.strip() == f"wrote {out / 'report.html'}"


def test_a_folder_that_cannot_take_the_run_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(2))
    out = tmp_path / "out"
    base = ["run", data, "--scorer", "summarization", "--out", out, *SCRIPTED]
    assert run_cli(capsys, *base, "--limit", "1")[0] == 0
    code, stdout, err = run_cli(capsys, *base, "--scale", "2")
    assert code == 2 and stdout == ""
    (line,) = err.strip().splitlines()[1:]  # after the verdict mode's line
    assert line.startswith(f"python -m evalgpu run: error: output folder {out} holds results of")
    assert "use a new output folder, or delete" in line
    with OutputFolder(out, json.loads((out / "config.json").read_text())):  # another run
        code, _, err = run_cli(capsys, *base)
    assert code == 2 and "another evalgpu run is writing to" in err
    # Flags that do not change scores are not configuration.
    code, _, err = run_cli(capsys, *base, "--chunk-size", "1", "--progress", "off")
    assert code == 0 and "1 row in" in err and "(1 already done)" in err


# Flags reaching the engine, the entry point


def test_engine_options_reach_the_transformers_engine_and_are_not_configuration(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evalgpu.engines

    loaded: list[tuple[Any, str, dict[str, Any]]] = []

    def load_engine(model: Any = None, backend: str = "auto", **options: Any) -> Any:
        loaded.append((model, backend, options))
        return ScriptedEngine()

    monkeypatch.setattr(evalgpu.engines, "load_engine", load_engine)
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(2))
    out = tmp_path / "out"
    base = ["run", data, "--scorer", "summarization", "--out", out]
    assert run_cli(capsys, *base, "--limit", "1")[0] == 0
    # Resumed with engine options: the same configuration ("auto" with them picks the
    # transformers engine: tests/engines/test_load_engine.py).
    assert (
        run_cli(capsys, *base, "--compute", "float32", "--threads", "2", "--batch-size", "4")[0]
        == 0
    )
    assert loaded == [
        (None, "auto", {}),
        (None, "auto", {"compute": "float32", "threads": 2, "batch_size": 4}),
    ]
    assert len(successes(out)) == 2


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def test_the_entry_point_in_a_subprocess(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", summary_rows(3))
    done = subprocess.run(
        run_argv(data, tmp_path / "out", *SCRIPTED),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("python -m evalgpu run: 3 rows in")
    assert len(successes(tmp_path / "out")) == 3


# models and progress


def test_models_list_and_pull(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from evalgpu import models

    code, out, _ = run_cli(capsys, "models", "list")
    assert code == 0
    assert models.DEFAULT_MODEL + "*" in out
    assert models.SMALL_MODEL + " " in out  # the small embedded model, not the default
    pulled: list[str] = []

    def fake_pull(name: str) -> Path:
        pulled.append(name)
        if name != models.DEFAULT_MODEL:
            raise ValueError(f"only the default model can be pulled, got {name!r}")
        return tmp_path / name

    monkeypatch.setattr(models, "pull", fake_pull)
    code, out, _ = run_cli(capsys, "models", "pull")
    assert code == 0 and out.strip() == str(tmp_path / models.DEFAULT_MODEL)
    code, _, err = run_cli(capsys, "models", "pull", "qwen3-8b")
    assert code == 2 and "only the default model can be pulled" in err
    assert pulled == [models.DEFAULT_MODEL, "qwen3-8b"]


def test_progress_lines_and_bar() -> None:
    from evalgpu.evaluation import Progress

    p = Progress(rows_done=50, rows_total=200, rows_run=40, output_tokens=4000, failed=2)
    p.started -= 10
    line = cli._status(p)
    assert line.startswith("50/200 rows, 4.0 rows/s, 400 output tok/s, ETA 0:37")
    assert line.endswith(", 2 errors")
    assert cli._bar(p).startswith("[######..................]  25% 50/200 rows")


def test_progress_moves_within_a_chunk_and_slow_rates_read_per_minute() -> None:
    from evalgpu.evaluation import Progress

    # A CPU judge: 3 rows written in 60 s at 20 calls a row; 3 more rows in flight.
    p = Progress(rows_done=3, rows_total=40, rows_run=3, calls=60, rows_in_flight=3)
    p.started -= 60
    line = "3/40 rows, 3.0 rows/min, 0 output tok/s, ETA 12:20; now 3 rows: 0/~60 judge calls"
    assert cli._status(p) == line
    p.calls, p.calls_in_flight = 84, 24  # a wave of the chunk in flight came back
    assert cli._status(p).endswith("ETA 12:20; now 3 rows: 24/~84 judge calls")
    # Before any chunk is written there is no rate to plan from, but the calls still count.
    first = Progress(rows_total=40, calls=7, calls_in_flight=7, rows_in_flight=1)
    assert cli._status(first).endswith("0.0 rows/s, 0 output tok/s; now 1 row: 7 judge calls")
    assert cli._per_time(0.005) == "0.30 rows/min"


@pytest.mark.slow
def test_end_to_end_on_the_default_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "good", "source": COMPANY, "summary": GOOD},
            {
                "id": "wrong",
                "source": COMPANY,
                "summary": "The company was founded in 2001 in Boston.",
            },
        ],
    )
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", out, "--max-questions", "3"
    )
    assert code == 0, err
    got = records(out)
    assert [r["row"] for r in got] == [1, 2]
    for r in got:
        assert (r["score"] is None) != (r["error"] is None)
        assert r["usage"]["calls"] >= 1
    assert any(r["error"] is None for r in got)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tokens"]["output_tokens"] > 0


def test_run_states_the_verdict_mode_it_defaults_to(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "source": COMPANY, "summary": GOOD}])
    code, _, err = run_cli(
        capsys, "run", data, "--scorer", "summarization", "--out", tmp_path / "a", *SCRIPTED
    )
    assert code == 0, err
    assert "evalgpu: hard verdicts (the reference's default; --verdicts soft for the other)" in err
    soft = ["run", data, "--scorer", "summarization", "--out", tmp_path / "b", "--verdicts", "soft"]
    code, _, err = run_cli(capsys, *soft, *SCRIPTED)
    assert code == 0, err
    assert "verdicts (" not in err  # asked for: nothing to state
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["options"]["summarization-scorer"]["verdicts"] == "soft"
