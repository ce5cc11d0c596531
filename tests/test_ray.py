"""`run --ray`: the same records as a local run, scored by replicas on a local Ray cluster.

One cluster (`ray.init(num_cpus=2)`) serves the whole test session, as Ray's testing advice
has it; every run uses 2 replicas. Skipped when Ray is not installed (`pip install -e
".[ray]"`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

import evalgpu.engines as engines  # noqa: E402
from evalgpu import cli, evaluate  # noqa: E402
from evalgpu.distributed import Planned, Replica, layout, run_ray  # noqa: E402
from evalgpu.engines import load_engine  # noqa: E402
from evalgpu.settings import RunSettings  # noqa: E402
from evalgpu.storage import judge_model  # noqa: E402
from samples import records, run_argv  # noqa: E402

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture(scope="session")
def cluster() -> Iterator[str]:
    """One local cluster for the session; its workers import evalgpu and `cli_engines`."""
    with pytest.MonkeyPatch.context() as env:
        # Workers inherit the environment the cluster starts with.
        env.setenv("RAY_AUTH_MODE", "disabled")
        path = [str(TESTS), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
        env.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
        try:
            yield str(ray.get_runtime_context().gcs_address)
        finally:
            ray.shutdown()


def source(i: int) -> str:
    return (
        f"Town {i} built a bridge over river {i} in {1800 + i}. The bridge closed in {1900 + i} "
        f"after a flood. Volunteers from town {i} reopened it last spring."
    )


def write_data(folder: Path) -> list[Path]:
    """A JSONL, a CSV and a Parquet file: several summaries per source, some bad rows."""
    rows: list[Any] = []
    for i in range(4):
        for j, summary in enumerate(
            [
                f"Town {i} built a bridge in {1800 + i}.",
                f"The bridge of town {i} closed after a flood and reopened.",
                f"Town {i} built a tunnel.",
            ]
        ):
            rows.append({"id": f"s{i}-{j}", "source": source(i), "summary": summary})
    rows.insert(5, "{not json")
    rows.append({"id": "no-summary", "source": source(9)})
    jsonl = folder / "a.jsonl"
    jsonl.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
        encoding="utf-8",
    )
    csv = folder / "b.csv"
    csv.write_text(
        "id,input,output,ground_truth,context\n"
        + "".join(
            f"c{i},Where is bridge {i}?,Over river {i}.,Bridge {i} crosses river {i}.,"
            f'"[""Bridge {i} crosses river {i} in town {i}.""]"\n'
            for i in range(3)
        ),
        encoding="utf-8",
    )
    parquet = folder / "c.parquet"
    pq.write_table(
        pa.table(
            {
                "id": ["p0", "p1", "p2", "s0-0"],  # the last repeats a JSONL row's id
                # Sources of their own: a replica's reply cache is its own, so a source that
                # another file repeats may cost one call more than locally (usage differs).
                "source": [source(10 + i) for i in range(4)],
                "summary": [f"Volunteers reopened bridge {i}." for i in range(4)],
            }
        ),
        parquet,
    )
    return [jsonl, csv, parquet]


def by_key(found: list[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    keyed = {(r["file"], r["row"], r["scorer"]): r for r in found}
    assert len(keyed) == len(found), "a (row, scorer) was recorded twice"
    return keyed


def settings(data: list[Path], out: Path, **kw: Any) -> RunSettings:
    kw.setdefault("scorers", ("summarization", "context-recall"))
    kw.setdefault("backend", "scripted")
    return RunSettings(data=tuple(data), out=out, **kw)


def totals(out: Path) -> tuple[int, int]:
    """(scored, failed) that the folder's summary.json counts, over its scorers."""
    summary = json.loads((out / "summary.json").read_text())["scorers"].values()
    return sum(s["scored"] for s in summary), sum(s["failed"] for s in summary)


def test_records_equal_the_local_runs(cluster: str, tmp_path: Path) -> None:
    data = write_data(tmp_path)
    local = settings(data, tmp_path / "local", chunk_size=2)
    told: list[str] = []
    scorers = local.build_scorers(load_engine(None, backend="scripted"))
    evaluate(data, scorers, out=local.out, chunk_size=2, on_notice=told.append).run()
    remote = settings(data, tmp_path / "ray", chunk_size=2)
    seen: list[tuple[int, int | None]] = []
    notices: list[str] = []
    run_ray(
        remote,
        replicas=2,
        on_progress=lambda p: seen.append((p.rows_done, p.rows_total)),
        on_notice=notices.append,
    )
    assert sorted(notices) == sorted(told) and any("repeats an earlier row" in n for n in told)
    mine, theirs = records(tmp_path / "ray"), records(tmp_path / "local")
    assert by_key(mine) == by_key(theirs)
    assert any(r["error"] and "line is not valid JSON" in r["error"] for r in mine)
    assert totals(tmp_path / "ray")[0] == sum(r["error"] is None for r in theirs)
    assert seen[-1][0] == 21  # 14 JSONL rows (one unreadable), 3 CSV rows, 4 Parquet rows
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    expected = json.loads((tmp_path / "local" / "summary.json").read_text())
    # Every aggregate is the local run's. (The few lowest rows and first failures listed are
    # picked in the order records arrive, which on Ray is the order chunks finish.)
    for sid, entry in expected["scorers"].items():
        ours = summary["scorers"][sid]
        assert {k: v for k, v in ours.items() if k not in ("lowest", "failures")} == {
            k: v for k, v in entry.items() if k not in ("lowest", "failures")
        }
        assert len(ours["lowest"]) == len(entry["lowest"])
    assert summary["engine"] == expected["engine"]
    assert summary["config_hash"] == expected["config_hash"]  # one configuration
    assert summary["duplicate_ids"] == expected["duplicate_ids"]
    assert summary["duplicate_ids"]["count"] == 1

    # A rerun retries only the failures (the unreadable line, the row without a summary).
    again = run_ray(remote, replicas=2)
    assert again.progress.rows_run == 2 and again.progress.resumed == 19
    added = records(tmp_path / "ray")[len(mine) :]
    assert sorted((r["row"], r["scorer"]) for r in added) == sorted(
        (r["row"], r["scorer"]) for r in mine if r["error"]
    )


def test_a_chunk_that_raises_becomes_error_records(cluster: str, tmp_path: Path) -> None:
    rows = [
        {"id": f"{i}-{j}", "source": source(i) + (" BOOM." if i == 1 else ""), "summary": "x."}
        for i in range(3)
        for j in range(2)
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    s = settings(
        [data],
        tmp_path / "out",
        scorers=("summarization",),
        backend="cli_engines:broken",
        chunk_size=2,
    )
    run_ray(s, replicas=2)
    found = by_key(records(tmp_path / "out"))
    failed = {key[1]: r["error"] for key, r in found.items() if r["error"]}
    assert sorted(failed) == [3, 4]
    assert failed[3].startswith('row 3 (id "1-0"): RuntimeError: engine ')
    assert "returned 0 replies" in failed[3]
    assert totals(tmp_path / "out") == (4, 2)


def test_an_actor_that_dies_is_restarted_and_its_chunk_retried(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "source": source(i), "summary": f"Town {i} built it."})
            + "\n"
            for i in range(6)
        ),
        encoding="utf-8",
    )
    marker = tmp_path / "crash"
    marker.touch()
    # Forwarded to the replicas, like every EVALGPU_* variable of the driver.
    monkeypatch.setenv("EVALGPU_TEST_CRASH", str(marker))
    s = settings(
        [data],
        tmp_path / "out",
        scorers=("summarization",),
        backend="cli_engines:crashing",
        chunk_size=1,
    )
    run_ray(s, replicas=2)
    assert not marker.exists()  # a replica died on it
    found = by_key(records(tmp_path / "out"))
    assert sorted(k[1] for k in found) == [1, 2, 3, 4, 5, 6]
    assert totals(tmp_path / "out") == (6, 0)


def test_kill_9_of_the_driver_then_a_rerun_scores_every_row_once(
    cluster: str, tmp_path: Path
) -> None:
    rows = 30
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "source": source(i), "summary": f"Town {i} built it."})
            + "\n"
            for i in range(rows)
        ),
        encoding="utf-8",
    )
    out = tmp_path / "out"
    argv = run_argv(
        data,
        out,
        "--chunk-size",
        "1",
        "--backend",
        "cli_engines:slow",
        "--ray",
        "--ray-address",
        cluster,
        "--replicas",
        "2",
    )
    env = {**os.environ, "EVALGPU_TEST_SLEEP": "0.1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and results.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = records(out, killed=True)
    assert 3 <= len(first) < rows  # killed mid-run
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = by_key(records(out))  # asserts each (row, scorer) once
    assert sorted(k[1] for k in found) == list(range(1, rows + 1))
    assert all(r["error"] is None for r in found.values())


def test_replicas_default_to_one_per_gpu(tmp_path: Path) -> None:
    data = write_data(tmp_path)[:1]
    vllm = settings(data, tmp_path / "o", backend="vllm")
    assert layout(vllm, 8) == (8, 1)  # one replica per GPU
    assert layout(vllm, 8, gpus_per_replica=2) == (4, 2)  # tensor_parallel_size = 2
    assert layout(vllm, 8, replicas=3) == (3, 1)
    assert layout(vllm, 0) == (1, 0)  # no GPU: one replica, on CPUs
    assert layout(settings(data, tmp_path / "o"), 8) == (1, 0)  # the scripted judge


def test_the_folder_names_the_judge_the_replicas_load(tmp_path: Path) -> None:
    data = write_data(tmp_path)[:1]

    def planned(gpus: int, **kw: Any) -> tuple[str, str | None]:
        judge = Planned(settings(data, tmp_path / "o", **kw), gpus)
        return judge.name, judge_model(judge)

    small = "smollm2-135m-instruct"
    # "auto" is what a replica resolves it to: without vLLM, transformers with or without GPUs;
    # with vLLM's CUDA build, vLLM where a replica holds a GPU; with its CPU build, vLLM.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engines, "_vllm_build", lambda: None)
        assert planned(0, backend="auto", model=small) == ("transformers", small)
        assert planned(1, backend="auto", model=small) == ("transformers", small)
        patch.setattr(engines, "_vllm_build", lambda: "cuda")
        assert planned(0, backend="auto", model=small) == ("transformers", small)
        assert planned(1, backend="auto", model=small) == ("vllm", small)
        assert planned(1, backend="auto", compute="float32")[0] == "transformers"
        patch.setattr(engines, "_vllm_build", lambda: "cpu")
        assert planned(0, backend="auto", model=small) == ("vllm", small)
    assert planned(0) == ("scripted", None)  # the scripted judge loads no model
    # A replica that loaded the judge the folder names goes on; one that did not, stops.
    s = settings(data, tmp_path / "o")
    Replica(s, [str(data[0])], ("scripted", None))
    with pytest.raises(RuntimeError, match=r"loaded the judge \('scripted', None\), not the"):
        Replica(s, [str(data[0])], ("transformers", "qwen3-8b"))


def test_cli_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_data(tmp_path)[0]
    code = cli.main(
        [
            "run",
            str(data),
            "--scorer",
            "summarization",
            "--out",
            str(tmp_path / "o"),
            "--replicas",
            "2",
        ]
    )
    assert code == 2
    assert "--ray-address and --replicas need --ray" in capsys.readouterr().err
    code = cli.main(
        [
            "run",
            str(data),
            "--scorer",
            "summarization",
            "--out",
            str(tmp_path / "o"),
            "--ray",
            "--replicas",
            "0",
        ]
    )
    assert code == 2
    assert "replicas must be >= 1, got 0" in capsys.readouterr().err
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda name: None if name == "ray" else real(name)
    )
    code = cli.main(
        ["run", str(data), "--scorer", "summarization", "--out", str(tmp_path / "o"), "--ray"]
    )
    assert code == 2
    assert 'pip install "evalgpu[ray]"' in capsys.readouterr().err


@pytest.mark.slow
def test_the_tiny_model_on_real_rows(cluster: str, tmp_path: Path) -> None:
    rows = [
        {"id": "a", "source": source(1), "summary": "Town 1 built a bridge over river 1."},
        {"id": "b", "source": source(1), "summary": "Town 1 built a tunnel in 1990."},
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    s = settings(
        [data],
        tmp_path / "out",
        scorers=("summarization",),
        model="smollm2-135m-instruct",
        backend="transformers",
        max_questions=2,
    )
    run_ray(s, replicas=2)
    found = records(tmp_path / "out")
    assert sorted(r["row"] for r in found) == [1, 2]
    for r in found:
        assert r["error"] is not None or 0.0 <= r["score"] <= 1.0
        assert r["usage"]["calls"] >= 1 or r["error"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["engine"].startswith("transformers")


def test_importing_evalgpu_does_not_import_ray() -> None:
    code = "import sys, evalgpu, evalgpu.cli, evalgpu.distributed; print('ray' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
